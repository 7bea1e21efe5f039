"""The accelerator backends pass the conformance checks on the devices this machine has."""

from __future__ import annotations

import pytest

from tensortorrent.backends.conformance import CHECKS, check_backend
from tensortorrent.backends.torch_accelerator import TorchAcceleratorBackend


@pytest.mark.parametrize("kind", ["cuda", "xpu"])
def test_an_accelerator_backend_conforms(kind):
    backend = TorchAcceleratorBackend(kind)
    if not backend.available():
        pytest.skip(f"no {kind} device: torch.{kind}.is_available() is False on this machine")
    passed = check_backend(backend)
    assert len(passed) == len(CHECKS) * len(backend.devices())


def test_validate_hardware_validates_every_cuda_device_transfers_included(tmp_path):
    import json

    from tensortorrent.cli.main import main

    if not TorchAcceleratorBackend("cuda").available():
        pytest.skip("no cuda device: torch.cuda.is_available() is False on this machine")
    path = tmp_path / "report.json"
    assert main(["validate-hardware", "--output", str(path)]) == 0
    data = json.loads(path.read_text())
    gpus = [d for d in data["devices"] if d["device"].startswith("cuda:")]
    assert gpus and all(d["verdict"] == "validated" for d in gpus), gpus
    for gpu in gpus:
        numerics = next(c["detail"] for c in gpu["checks"] if c["name"] == "tensortorrent vs eager")
        assert "weights copied per call" in numerics
