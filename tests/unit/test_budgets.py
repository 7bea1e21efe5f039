"""The budget resolver on fake cgroup v1/v2 trees: precedence, provenance, clamping, CPUs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensortorrent as tt
from tensortorrent.hardware.budgets import Budget, hold_torch_threads, reserve, resolve_budgets
from tensortorrent.hardware.host import probe

GiB = 1 << 30
MiB = 1 << 20
MEM_AVAILABLE = 8 * GiB
V1_UNLIMITED = 9223372036854771712


def fake_host(tmp_path, *, version: int, files: dict[str, str]):
    """A /proc, /sys and cgroup tree holding `files` (paths under the cgroup root), probed."""
    proc, sys_root, cgroup = tmp_path / "proc", tmp_path / "sys", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    sys_root.mkdir()
    cgroup.mkdir()
    (proc / "meminfo").write_text(
        f"MemTotal:       {16 * GiB // 1024} kB\nMemFree:        {GiB // 1024} kB\n"
        f"MemAvailable:   {MEM_AVAILABLE // 1024} kB\n"
    )
    if version == 2:
        (proc / "self" / "cgroup").write_text("0::/job\n")
        (cgroup / "cgroup.controllers").write_text("cpu memory\n")
    else:
        (proc / "self" / "cgroup").write_text("4:memory:/job\n2:cpu,cpuacct:/job\n0::/\n")
    for path, text in files.items():
        (cgroup / path).parent.mkdir(parents=True, exist_ok=True)
        (cgroup / path).write_text(text + "\n")
    return probe(proc_root=str(proc), sys_root=str(sys_root), cgroup_root=str(cgroup))


def ram(host, **config):
    return resolve_budgets(tt.CompileConfig(**config), host=host, devices=[]).ram


def test_v2_limit_binds_less_usage_and_reserve(tmp_path):
    host = fake_host(tmp_path, version=2, files={"job/memory.max": str(GiB), "job/memory.current": str(256 * MiB)})
    budget = ram(host)
    assert budget.source == "cgroup"
    assert budget.amount == 768 * MiB - reserve(768 * MiB)
    assert "cgroup v2 limit 1073741824 bytes less 268435456 in use" in budget.detail
    assert budget.raw["memory_max"] == GiB and budget.raw["MemAvailable"] == MEM_AVAILABLE


def test_v2_unlimited_falls_back_to_the_os(tmp_path):
    host = fake_host(tmp_path, version=2, files={"job/memory.max": "max", "job/memory.current": str(MiB)})
    budget = ram(host)
    assert budget.source == "os" and budget.amount == MEM_AVAILABLE - reserve(MEM_AVAILABLE)
    assert "MemAvailable 8589934592 bytes" in budget.detail


def test_v2_memory_high_below_max_binds(tmp_path):
    files = {"job/memory.max": str(2 * GiB), "job/memory.high": str(GiB), "job/memory.current": "0"}
    budget = ram(fake_host(tmp_path, version=2, files=files))
    assert budget.source == "cgroup" and budget.amount == GiB - reserve(GiB)


def test_inactive_file_cache_in_a_full_cgroup_is_not_counted_as_in_use(tmp_path):
    # A cgroup that streamed files is at its limit, most of it cache the kernel drops first.
    stat = f"anon {256 * MiB}\nactive_file {256 * MiB}\ninactive_file {512 * MiB}"
    files = {"job/memory.max": str(GiB), "job/memory.current": str(GiB), "job/memory.stat": stat}
    host = fake_host(tmp_path, version=2, files=files)
    budget = ram(host)
    assert budget.amount == 512 * MiB - reserve(512 * MiB)
    assert "less 536870912 in use" in budget.detail and "inactive file cache of 536870912 bytes" in budget.detail
    assert budget.raw["memory_current"] == GiB and budget.raw["inactive_file"] == 512 * MiB


def test_usage_above_the_limit_clamps_at_zero(tmp_path):
    files = {"job/memory.max": str(GiB), "job/memory.current": str(2 * GiB)}
    budget = ram(fake_host(tmp_path, version=2, files=files))
    assert budget.source == "cgroup" and budget.amount == 0


def test_v1_limited_and_unlimited(tmp_path):
    limited = fake_host(
        tmp_path / "a",
        version=1,
        files={"memory/job/memory.limit_in_bytes": str(2 * GiB), "memory/job/memory.usage_in_bytes": str(GiB)},
    )
    assert ram(limited).source == "cgroup" and ram(limited).amount == GiB - reserve(GiB)
    unlimited = fake_host(
        tmp_path / "b",
        version=1,
        files={"memory/job/memory.limit_in_bytes": str(V1_UNLIMITED), "memory/job/memory.usage_in_bytes": "0"},
    )
    assert ram(unlimited).source == "os"


def test_explicit_config_beats_environment_beats_cgroup(tmp_path, monkeypatch):
    host = fake_host(tmp_path, version=2, files={"job/memory.max": str(GiB), "job/memory.current": "0"})
    monkeypatch.setenv("TT_RAM_BUDGET_BYTES", str(3 * GiB))
    from_env = ram(host)
    assert (from_env.source, from_env.amount, from_env.detail) == (
        "environment",
        3 * GiB,
        f"TT_RAM_BUDGET_BYTES={3 * GiB}",
    )
    from_config = ram(host, ram_budget_bytes=5 * GiB)
    assert (from_config.source, from_config.amount) == ("config", 5 * GiB)
    assert from_config.detail == f"CompileConfig.ram_budget_bytes={5 * GiB}"


def test_a_bad_environment_value_names_the_variable(tmp_path, monkeypatch):
    host = fake_host(tmp_path, version=2, files={})
    monkeypatch.setenv("TT_RAM_BUDGET_BYTES", "lots")
    with pytest.raises(tt.ConfigValueError, match="TT_RAM_BUDGET_BYTES: expected an integer, got 'lots'"):
        ram(host)


def test_cpu_count_from_quota_and_affinity(tmp_path):
    affinity = len(__import__("os").sched_getaffinity(0))
    half_core = fake_host(tmp_path / "a", version=2, files={"job/cpu.max": "50000 100000"})
    cpus = resolve_budgets(tt.CompileConfig(), host=half_core, devices=[]).cpus
    if affinity > 1:
        assert (cpus.source, cpus.amount) == ("cgroup", 1)
        assert "cgroup CPU quota 0.5 cores" in cpus.detail
    unlimited = fake_host(tmp_path / "b", version=2, files={"job/cpu.max": "max 100000"})
    cpus = resolve_budgets(tt.CompileConfig(), host=unlimited, devices=[]).cpus
    assert (cpus.source, cpus.amount) == ("os", affinity)
    v1 = fake_host(tmp_path / "c", version=1, files={"cpu,cpuacct/job/cpu.cfs_quota_us": "-1"})
    assert resolve_budgets(tt.CompileConfig(), host=v1, devices=[]).cpus.amount == affinity
    explicit = resolve_budgets(tt.CompileConfig(cpu_budget=7), host=v1, devices=[]).cpus
    assert (explicit.source, explicit.amount) == ("config", 7)


def test_early_fit_gate_counts_only_host_ram(monkeypatch):
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256))  # 526,336 bytes of weights
    # A budget from the environment, not CompileConfig.ram_budget_bytes (which streams the
    # weights from disk instead). Disk and a virtual device with room for it all: no plan
    # can keep weights there instead of RAM.
    monkeypatch.setenv("TT_RAM_BUDGET_BYTES", "100000")
    config = tt.CompileConfig(disk_budget_bytes=1 << 30)
    device = tt.VirtualDevice("vgpu", memory_bytes=1 << 30, flops=1e9, link_bandwidth=1e9)
    for devices in ("cpu", ["vgpu"]):
        with pytest.raises(tt.MemoryCapacityError) as caught:
            tt.compile(model, example_inputs=(torch.randn(1, 256),), config=config, devices=devices, machine=device)
        message = str(caught.value)
        assert "need 526336 bytes" in message and "host RAM, where a plan keeps them, allows 100000 bytes" in message
        assert "TT_RAM_BUDGET_BYTES" in message
        assert "disk" not in message and "vgpu" not in message


def test_an_explicit_budget_below_the_weights_streams_them(tmp_path):
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256))
    x = torch.randn(1, 256)
    config = tt.CompileConfig(ram_budget_bytes=400_000, spill_dir=str(tmp_path))
    compiled = tt.compile(model, example_inputs=(x,), config=config)
    assert compiled.last_peak_bytes == {} and "read on every call" in compiled.explain()
    device = tt.VirtualDevice("vgpu", memory_bytes=1 << 30, flops=1e9, link_bandwidth=1e9)
    on_device = tt.compile(model, example_inputs=(x,), config=config, devices=["vgpu"], machine=device)
    torch.testing.assert_close(on_device(x), model(x))
    assert on_device.last_peak_bytes["ram"] <= 400_000 and "Weights streamed from disk" in on_device.explain()


def test_a_model_within_ram_compiles_whatever_the_disk_budget():
    model = nn.Linear(16, 16)  # 1,088 bytes
    config = tt.CompileConfig(ram_budget_bytes=1 << 20, disk_budget_bytes=1)
    compiled = tt.compile(model, example_inputs=(torch.randn(2, 16),), config=config)
    assert compiled(torch.randn(2, 16)).shape == (2, 16)


def test_torchs_threads_are_held_to_the_cpu_budget_and_never_raised():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        hold_torch_threads(Budget("cpu", 1, "config", "cpu_budget=1"))
        assert torch.get_num_threads() == 1
        hold_torch_threads(Budget("cpu", 4, "config", "cpu_budget=4"))
        assert torch.get_num_threads() == 1, "a budget above torch's threads leaves them"
    finally:
        torch.set_num_threads(threads)
