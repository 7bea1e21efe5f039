"""`tensortorrent serve`'s command line: what it needs is named, before anything loads."""

from __future__ import annotations

import pytest

import tensortorrent as tt
from tensortorrent.cli.main import main


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "expected at least one --model NAME=DIR (or a [models] table in --config)"),
        (["--model", "nodir"], "--model: expected NAME=DIR, got 'nodir'"),
        (["--model", "a=x", "--model", "a=y"], "'a' named twice"),
        (["--model", "a=x", "--max-queue-size", "0"], "max_queue_size: expected an integer >= 1, got 0"),
        (["--model", "a=x", "--timeout-s", "500"], "expected 0 < timeout_s <= max_timeout_s, got 500.0 and 300.0"),
        (["--model", "a=x", "--devices", "cpu,"], "devices: expected device names joined by commas, got 'cpu,'"),
    ],
)
def test_bad_command_lines_are_named(argv, message, capsys):
    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


def test_an_empty_token_file_is_refused(tmp_path, capsys):
    empty = tmp_path / "token"
    empty.write_text("\n")
    assert main(["serve", "--model", "a=x", "--api-key-file", str(empty)]) == 2
    assert "the file holds no token" in capsys.readouterr().err


def write(tmp_path, text: str) -> str:
    path = tmp_path / "serve.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("port = 'eighty'", "port: expected int, got str ('eighty')"),
        ("portt = 80", "unknown settings ['portt']"),
        ("timeout_s = true", "timeout_s: expected float, got bool"),
        ("[models]\na = 1", '[models]: expected NAME = "DIR" entries'),
        ("port = ", "not TOML"),
    ],
)
def test_a_bad_config_file_is_named(tmp_path, capsys, text, message):
    assert main(["serve", "--config", write(tmp_path, text)]) == 2
    assert message in capsys.readouterr().err


def test_flags_override_the_file_which_overrides_the_defaults(tmp_path):
    from tensortorrent.cli.main import build_parser
    from tensortorrent.cli.serve import resolved

    config = write(tmp_path, 'port = 9000\ntimeout_s = 5\n[models]\nmlp = "/models/mlp"\n')
    args = build_parser().parse_args(["serve", "--config", config, "--port", "9100", "--model", "b=/b"])
    models, settings = resolved(args)
    assert models == {"mlp": "/models/mlp", "b": "/b"}
    assert (settings["port"], settings["timeout_s"], settings["max_queue_size"]) == (9100, 5.0, 64)
    twice = build_parser().parse_args(["serve", "--config", config, "--model", "mlp=/other"])
    with pytest.raises(tt.InvalidArgumentError, match="'mlp' is named by --model and in"):
        resolved(twice)


@pytest.mark.parametrize(
    "setting, devices",
    [(None, None), ("cpu", "cpu"), ("auto", "auto"), ("cpu, cuda:0", ["cpu", "cuda:0"]), ("cuda:1", ["cuda:1"])],
)
def test_the_devices_setting_becomes_load_compileds_devices(setting, devices):
    from tensortorrent.cli.serve import devices_of

    assert devices_of(setting) == devices


def test_a_missing_artifact_is_named(tmp_path, capsys):
    assert main(["serve", "--model", f"a={tmp_path / 'nowhere'}"]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_without_the_serve_extra_the_command_says_what_to_install(monkeypatch, capsys):
    import sys

    for name in [m for m in sys.modules if m == "fastapi" or m.startswith(("fastapi.", "tensortorrent.serve"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "fastapi", None)  # as if it were not installed
    assert main(["serve", "--model", "a=x"]) == 2
    assert "needs the serve extra (fastapi is missing): pip install 'tensortorrent[serve]'" in capsys.readouterr().err
    assert "tensortorrent.serve.app" not in sys.modules
