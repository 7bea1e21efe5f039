"""The deployment files (Dockerfile, docker-compose.yaml, deploy/k8s/) parse, and name the
server's real routes, port and command line. Images are not built here."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("fastapi")

from tensortorrent.cli.main import build_parser  # noqa: E402
from tensortorrent.serve.app import PUBLIC  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LIVE, READY = PUBLIC


def dockerfile() -> dict[str, list[str]]:
    """Per instruction of the final stage (continuation lines joined), its arguments."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages: list[dict[str, list[str]]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, rest = line.strip().partition(" ")
        if instruction == "FROM":
            stages.append({})
        stages[-1].setdefault(instruction, []).append(rest.strip())
    return stages[-1]


def serve_args(argv: list[str]):
    """Our own parser's reading of a `tensortorrent serve` command line (SystemExit if it is wrong)."""
    return build_parser().parse_args(["serve", *argv])


def test_the_dockerfile_runs_the_server_unprivileged_with_a_live_health_check():
    final = dockerfile()
    assert final["USER"] == ["10001"] and final["EXPOSE"] == ["8000"]
    entrypoint = json.loads(final["ENTRYPOINT"][0])
    assert entrypoint[:2] == ["tensortorrent", "serve"]
    args = serve_args(entrypoint[2:] + json.loads(final["CMD"][0]))
    assert (args.port, args.host, args.model) == (8000, "0.0.0.0", ["model=/models/model"])
    assert f"http://127.0.0.1:8000{LIVE}" in final["HEALTHCHECK"][0]
    assert "TT_SPILL_DIR=/var/cache/tensortorrent" in final["ENV"][0]


def test_compose_mounts_the_models_read_only_on_a_read_only_root():
    service = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())["services"]["tensortorrent"]
    assert service["read_only"] is True and "./models:/models:ro" in service["volumes"]
    assert service["ports"] == ["127.0.0.1:8000:8000"]
    args = serve_args(service["command"])
    assert args.api_key_file == "/run/secrets/serve_token" and "serve_token" in service["secrets"]
    assert f"http://127.0.0.1:8000{LIVE}" in " ".join(service["healthcheck"]["test"])


def test_the_kubernetes_manifests_probe_our_routes_and_read_the_token_from_a_secret():
    deployment = yaml.safe_load((ROOT / "deploy/k8s/deployment.yaml").read_text())
    service = yaml.safe_load((ROOT / "deploy/k8s/service.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == LIVE
    assert container["readinessProbe"]["httpGet"]["path"] == READY
    assert container["ports"] == [{"name": "http", "containerPort": 8000}]
    assert service["spec"]["ports"][0]["targetPort"] == "http" and service["spec"]["ports"][0]["port"] == 8000
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"]
    args = serve_args(container["args"])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secret = next(v for v in pod["volumes"] if v["name"] == "token")["secret"]["secretName"]
    assert secret == "tensortorrent-token" and args.api_key_file.startswith(mounts["token"] + "/")
    assert shlex.join(container["args"]).startswith("--model mlp=/models/mlp")
