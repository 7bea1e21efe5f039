"""The wheel installs into a fresh virtual environment with only its declared dependencies
and works there: compile, save and load a small model."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys, tempfile
    import torch
    from torch import nn
    import tensortorrent as tt

    assert tt.__file__.startswith(sys.prefix), tt.__file__  # the installed wheel, not the checkout
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).eval()
    x = torch.randn(3, 16)
    compiled = tt.compile(model, example_inputs=(x,))
    with tempfile.TemporaryDirectory() as directory:
        compiled.save(directory + "/artifact")
        loaded = tt.load_compiled(directory + "/artifact")
        torch.testing.assert_close(loaded(x), model(x).detach())
    print("wheel ok")
    """
)


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def test_wheel_installs_with_declared_dependencies_only(tmp_path):
    # Built with this environment's build tools (the wheel's own build requirements), so
    # the C++ build reuses the editable install's build directory.
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ]
    )
    (wheel,) = tmp_path.glob("tensortorrent-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    # The running torch's version, so pip takes the wheel already on this machine rather
    # than downloading a newer one; every other dependency resolves as for a user.
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"torch=={torch.__version__.split('+')[0]}\n")
    run([python, "-m", "pip", "install", "-q", "-c", str(constraints), str(wheel)])
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    result = run([python, "-c", SCRIPT], cwd=tmp_path, env=env)
    assert "wheel ok" in result.stdout
