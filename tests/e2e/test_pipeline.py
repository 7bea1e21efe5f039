"""Pipeline export: stages run by torchrun (two CPU processes, gloo) give eager's outputs,
each rank holds only its own stage, a rank under a RAM budget streams, and bad requests
are named. Every run is bounded: the runner's own timeout and the test's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

import tensortorrent as tt
from tensortorrent.pipeline.export import TRAINING_TORCH_REQUIRED, torch_release
from tensortorrent.pipeline.runner import check_torch
from tiny_transformers import MODELS, logits

RUN_TIMEOUT_S = 240


def torchrun(directory: Path, *args: str, processes: int | None = None) -> subprocess.CompletedProcess:
    """The export's own torchrun.sh (with this interpreter's torchrun first on PATH), or
    torchrun itself with another number of processes."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if processes is None:
        command = [str(directory / "torchrun.sh"), *args]
    else:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={processes}",
            "-m",
            "tensortorrent.pipeline",
            str(directory),
            *args,
        ]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)


def run_ok(directory: Path, *args: str) -> dict[str, torch.Tensor]:
    done = torchrun(directory, "--outputs", str(directory.parent / "outputs.safetensors"), "--timeout-s", "120", *args)
    assert done.returncode == 0, done.stderr[-4000:]
    outputs = directory.parent / "outputs.safetensors"
    return load_file(outputs) if outputs.exists() else {}  # a training run writes none


class Skipping(nn.Module):
    """Layers whose first output is added back at the end: a skip across any cut."""

    def __init__(self, width: int = 32, layers: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(layers))

    def forward(self, x):
        first = self.layers[0](x)
        h = first
        for layer in self.layers[1:]:
            h = layer(h)
        return h + first


def test_gpt2_in_two_stages_gives_eager_and_compiled_outputs(tmp_path):
    torch.manual_seed(0)
    cls, config = MODELS["gpt2"]
    model = cls(config()).eval()
    ids = torch.randint(0, 128, (2, 12))
    compiled = tt.compile(model, (ids,), devices="cpu")
    command = compiled.export_pipeline(tmp_path / "gpt2", 2, n_microbatches=4)
    assert command.startswith("torchrun --standalone --nproc-per-node=2 -m tensortorrent.pipeline")
    plan = json.loads((tmp_path / "gpt2" / "pp_plan.json").read_text())
    assert plan["num_stages"] == 2 and plan["n_microbatches"] == 4 and plan["schedule"] == "GPipe"
    assert plan["link"].startswith("measured") and plan["link_bytes_per_s"] > 0
    assert [i["shape"] for i in plan["inputs"]] == [[8, 12]] and plan["outputs"][0]["name"] == "logits"
    first, second = plan["stages"]
    assert first["outputs"] == second["inputs"] and first["boundary_bytes"] == second["boundary_bytes"] > 0
    assert (tmp_path / "gpt2" / "torchrun.sh").read_text().count("--nproc-per-node=2") == 1

    batch = torch.randint(0, 128, (8, 12))
    save_file({"args[0]": batch}, tmp_path / "inputs.safetensors")
    outputs = run_ok(tmp_path / "gpt2", "--inputs", str(tmp_path / "inputs.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(outputs["logits"], logits(model(batch)))
    per_microbatch = torch.cat([logits(compiled(chunk)) for chunk in batch.chunk(4)])
    torch.testing.assert_close(outputs["logits"], per_microbatch)


def test_a_skip_connection_across_the_cut_is_carried_through_the_stage(tmp_path):
    torch.manual_seed(0)
    model = Skipping().eval()
    compiled = tt.compile(model, (torch.randn(4, 32),), devices="cpu")
    compiled.export_pipeline(tmp_path / "skip", 2)
    plan = json.loads((tmp_path / "skip" / "pp_plan.json").read_text())
    assert len(plan["stages"][1]["inputs"]) == 2, "the skip crosses the cut beside the main path"
    outputs = run_ok(tmp_path / "skip")  # the inputs exported beside the stages
    batch = load_file(tmp_path / "skip" / "inputs.safetensors")["args[0]"]
    with torch.no_grad():
        torch.testing.assert_close(outputs["output"], model(batch))


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """Four 16 MiB layers in two stages (two layers each, unless the layers' measured times
    differ by far: the cut balances them), and in one stage of 64 MiB."""
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(2048, 2048) for _ in range(4))).eval()
    root = tmp_path_factory.mktemp("wide")
    config = tt.CompileConfig(max_region_nodes=1)  # a region per layer
    compiled = tt.compile(model, (torch.randn(2, 2048),), config=config, devices="cpu")
    compiled.export_pipeline(root / "two" / "pipeline", 2)
    compiled.export_pipeline(root / "one" / "pipeline", 1)
    return model, root / "two" / "pipeline", root / "one" / "pipeline"


def reports(directory: Path, *args: str) -> list[dict]:
    report = str(directory.parent / "report-RANK.json")
    run_ok(directory, "--report", report, *args)
    ranks = json.loads((directory / "pp_plan.json").read_text())["num_stages"]
    return [json.loads((directory.parent / f"report-{rank}.json").read_text()) for rank in range(ranks)]


def growth(report: dict) -> int:
    return report["peak_rss_bytes"] - report["baseline_rss_bytes"]


def test_each_rank_holds_only_its_own_stage(wide):
    model, two, one = wide
    total = sum(p.numel() * 4 for p in model.parameters())
    (whole,) = reports(one)
    assert whole["stage_parameter_bytes"] == total
    stages = json.loads((two / "pp_plan.json").read_text())["stages"]
    assert sum(stage["parameter_bytes"] for stage in stages) == total
    for report, stage in zip(reports(two), stages, strict=True):
        assert report["stage_parameter_bytes"] == stage["parameter_bytes"] >= total // 4
        # Its peak is the whole model's less about the other stage's weights (what a rank
        # needs besides its weights, the runtime's and gloo's, is the same in both).
        others = total - stage["parameter_bytes"]
        assert growth(report) < growth(whole) - 0.75 * others, (report, whole)


def test_a_rank_under_a_ram_budget_streams_its_stage(wide):
    model, directory, _ = wide
    batch = load_file(directory / "inputs.safetensors")["args[0]"]
    budget = 24 << 20  # below a stage of two or three layers
    ranks = reports(directory, "--ram-budget-bytes", str(budget))
    assert any(r["stage_parameter_bytes"] > budget for r in ranks)
    assert all(r["weights_streamed"] for r in ranks if r["stage_parameter_bytes"] > budget), ranks
    with torch.no_grad():
        torch.testing.assert_close(load_file(directory.parent / "outputs.safetensors")["output"], model(batch))


def test_bad_requests_name_the_figures(tmp_path):
    torch.manual_seed(0)
    compiled = tt.compile(Skipping(layers=2).eval(), (torch.randn(4, 32),), devices="cpu")
    with pytest.raises(ValueError, match=r"5 stages asked of a program of \d+ region"):
        compiled.export_pipeline(tmp_path / "p", 5)
    with pytest.raises(ValueError, match="n_microbatches=1 is fewer than the 2 stages"):
        compiled.export_pipeline(tmp_path / "p", 2, n_microbatches=1)
    for stages in (0, -1):
        with pytest.raises(ValueError, match=f"num_stages: expected a positive int, got {stages}"):
            compiled.export_pipeline(tmp_path / "p", stages)
    assert not (tmp_path / "p").exists(), "nothing is written for a refused request"
    compiled.export_pipeline(tmp_path / "p", 2)
    done = torchrun(tmp_path / "p", "--timeout-s", "60", processes=3)
    assert done.returncode != 0
    assert "the pipeline has 2 stages and this run has a world size of 3" in done.stderr


def test_the_command_line_exports_an_artifact(tmp_path):
    from tensortorrent.cli.main import main

    torch.manual_seed(0)
    model = Skipping().eval()
    tt.compile(model, (torch.randn(4, 32),), devices="cpu").save(tmp_path / "artifact")
    assert main(["export-pipeline", str(tmp_path / "artifact"), str(tmp_path / "p"), "--stages", "2"]) == 0
    assert json.loads((tmp_path / "p" / "pp_plan.json").read_text())["num_stages"] == 2
    assert main(["export-pipeline", str(tmp_path / "artifact"), str(tmp_path / "q"), "--stages", "9"]) == 2


def test_a_training_pipeline_runs_1f1b_and_its_gradients_equal_eagers(tmp_path, monkeypatch):
    import transformers

    from tiny_transformers import gpt2_config

    torch.manual_seed(0)
    config = gpt2_config()
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0  # ranks draw no masks eager could match
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 128, (2, 12))
    compiled = tt.compile(model, (ids,), config=tt.CompileConfig(allow_training=True), devices="cpu")
    # GPT-2's attention mask (bool) crosses the cut: older torch cannot receive it in training.
    with monkeypatch.context() as patch:
        patch.setattr(torch, "__version__", "2.11.0+cu130")
        with pytest.raises(tt.UnsupportedFeatureError, match=r"take no gradient \(v\d+ \(bool\)\).*torch >= 2.13"):
            compiled.export_pipeline(tmp_path / "old", 2, n_microbatches=4, training=True)
    assert not (tmp_path / "old").exists()
    if torch_release(torch.__version__) < torch_release(TRAINING_TORCH_REQUIRED):
        pytest.skip(f"a training pipeline passing a bool mask needs torch >= 2.13; this is {torch.__version__}")
    compiled.export_pipeline(tmp_path / "train", 2, n_microbatches=4, training=True)
    plan = json.loads((tmp_path / "train" / "pp_plan.json").read_text())
    assert plan["training"] and plan["schedule"] == "1F1B" and plan["torch_required"] == "2.13"
    batch, target = torch.randint(0, 128, (8, 12)), torch.randint(0, 128, (8, 12))
    save_file({"args[0]": batch}, tmp_path / "inputs.safetensors")
    save_file({"target": target}, tmp_path / "targets.safetensors")
    gradients = str(tmp_path / "gradients-RANK.safetensors")
    run_ok(
        tmp_path / "train",
        *("--inputs", str(tmp_path / "inputs.safetensors"), "--targets", str(tmp_path / "targets.safetensors")),
        *("--loss", "cross_entropy", "--gradients", gradients),
    )
    model.train()
    nn.functional.cross_entropy(logits(model(batch)).flatten(0, -2), target.flatten()).backward()
    ranks = [load_file(gradients.replace("RANK", str(rank))) for rank in (0, 1)]
    for name, parameter in model.named_parameters():
        held = [rank[name] for rank in ranks if name in rank]
        assert held, f"{name}: no rank holds it"
        for gradient in held:  # a weight tied across stages (wte) gets the sum on both ranks
            torch.testing.assert_close(gradient, parameter.grad, rtol=1e-4, atol=1e-5)
    with pytest.raises(tt.UnsupportedFeatureError, match="allow_training=True"):
        tt.compile(model.eval(), (ids,), devices="cpu").export_pipeline(tmp_path / "no", 2, training=True)


def test_a_rank_checks_its_torch_against_the_plans():
    check_torch("2.13.0+cpu", "2.13")
    check_torch("3.0.1", "2.4")
    with pytest.raises(RuntimeError, match=r"needs torch >= 2.13 .*found 2.11.0\+cu130"):
        check_torch("2.11.0+cu130", "2.13")


def test_a_model_streamed_from_disk_exports_a_stage_at_a_time(wide, tmp_path):
    model, _, _ = wide
    config = tt.CompileConfig(max_region_nodes=1, ram_budget_bytes=40 << 20, spill_dir=str(tmp_path / "spill"))
    batch = torch.randn(2, 2048)
    compiled = tt.compile(model, (batch,), config=config, devices="cpu")
    assert compiled.streams_weights
    compiled.export_pipeline(tmp_path / "streamed" / "pipeline", 2)
    outputs = run_ok(tmp_path / "streamed" / "pipeline", "--ram-budget-bytes", str(24 << 20))
    inputs = load_file(tmp_path / "streamed" / "pipeline" / "inputs.safetensors")["args[0]"]
    with torch.no_grad():
        torch.testing.assert_close(outputs["output"], model(inputs))
