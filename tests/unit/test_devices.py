"""Device discovery creates no CUDA context unless a plan or a hardware command needs one."""

from __future__ import annotations

import hashlib
import json
import platform
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import tensortorrent as tt
from tensortorrent.backends.cpu import cpu_model
from tensortorrent.hardware import discover_devices, hardware_fingerprint
from tensortorrent.hardware.devices import names_accelerator
from tensortorrent.hardware.host import probe

GiB = 1 << 30


@pytest.fixture
def two_gpus(monkeypatch):
    """Discovery sees two CUDA devices; the calls that create a context on one are recorded
    and fail. Only discovery's view of torch is faked: torch.export itself asks
    torch.cuda.is_available() and would then really use CUDA, which this build lacks."""
    touched = []

    def creates_context(name):
        def call(*args, **kwargs):
            touched.append(name)
            raise AssertionError(f"torch.cuda.{name} creates a CUDA context")

        return call

    properties = SimpleNamespace(name="Fake H100", total_memory=80 * GiB, major=9, minor=0)
    cuda = SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 2,
        get_device_properties=lambda index: properties,
        mem_get_info=creates_context("mem_get_info"),
        can_device_access_peer=creates_context("can_device_access_peer"),
    )
    monkeypatch.setattr("tensortorrent.backends.torch_accelerator.torch", SimpleNamespace(cuda=cuda, xpu=None))
    return touched


@pytest.mark.parametrize("devices", ["cpu", ["cpu"]])  # "auto" takes the accelerators too
def test_compiling_for_the_cpu_never_touches_cuda(two_gpus, tmp_path, devices):
    model, x = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval(), torch.randn(2, 8)
    compiled = tt.compile(model, example_inputs=(x,), devices=devices)
    torch.testing.assert_close(compiled(x), model(x))
    compiled.save(tmp_path / "a")  # the fingerprint names both devices without a context
    assert "saved plan replayed" in tt.load_compiled(tmp_path / "a").explain()
    assert two_gpus == []


def test_the_fingerprint_names_the_devices_without_live_figures(two_gpus):
    devices = hardware_fingerprint()["devices"]
    assert [d["name"] for d in devices] == ["cpu", "cuda:0", "cuda:1"]
    assert devices[1] == {"name": "cuda:0", "model": "Fake H100", "total_bytes": 80 * GiB, "capability": "9.0"}
    assert two_gpus == []


def test_full_discovery_for_doctor_still_reads_free_memory(two_gpus):
    with pytest.raises(AssertionError, match="mem_get_info creates a CUDA context"):
        discover_devices()
    assert two_gpus == ["mem_get_info"]


def test_the_fingerprint_on_a_cpu_only_machine_is_unchanged(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    xpu = getattr(torch, "xpu", None)
    if xpu is not None:
        monkeypatch.setattr(xpu, "is_available", lambda: False)
    # The facts and digest exactly as before discovery became lazy.
    facts = {
        "machine": platform.machine(),
        "usable_cpus": probe().cpus.usable_cpus,
        "devices": [{"name": "cpu", "model": cpu_model(), "total_bytes": None, "capability": None}],
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    assert hardware_fingerprint() == {**facts, "digest": digest}


def test_only_accelerator_names_ask_for_discovery():
    assert names_accelerator("auto") and not names_accelerator(["cpu", "vgpu"]) and not names_accelerator(3)
    assert names_accelerator("cuda:0") and names_accelerator(["cpu", "xpu"])
