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
