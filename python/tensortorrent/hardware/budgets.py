"""One resolver for every budget: explicit settings, then cgroup limits, then the OS.

Each tier (host RAM, each accelerator's memory, spill/cache disk) and the CPU count is
resolved the same way: a CompileConfig field wins, then its TT_* environment variable,
then the cgroup limit, then the live operating-system figure, and a figure not set
explicitly keeps a reserve of RESERVE_FRACTION (at most RESERVE_CAP_BYTES) for everything
else on the machine. Every figure carries where it came from and the raw values seen.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .. import core
from ..environment import env_int
from ..files import nearest_existing
from .devices import DeviceInfo, discover_devices
from .host import probe

if TYPE_CHECKING:  # a config is read here, never built: config.py calls resolve_budgets
    from ..config import CompileConfig

log = logging.getLogger(__name__)

RESERVE_FRACTION = 0.10
RESERVE_CAP_BYTES = 2 << 30
DEFAULT_SPILL_DIR = os.path.join(os.path.expanduser("~"), ".cache", "tensortorrent")


def spill_root(spill_dir: str | None) -> str:
    """Where spilled and cached data go: CompileConfig.spill_dir, else TT_SPILL_DIR, else
    the cache directory."""
    return spill_dir or os.environ.get("TT_SPILL_DIR") or DEFAULT_SPILL_DIR


@dataclass(frozen=True)
class Budget:
    """How much of one tier a plan may use, and why: `source` won; `raw` holds what was seen."""

    tier: str  # "ram", "disk", "cpu" or a device name ("cuda:0")
    amount: int  # bytes (cores for "cpu")
    source: str  # "config", "environment", "cgroup" or "os"
    detail: str
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Budgets:
    ram: Budget
    disk: Budget
    cpus: Budget
    devices: dict[str, Budget]


def reserve(amount: int) -> int:
    """What an inferred figure leaves for the rest of the machine."""
    return min(int(amount * RESERVE_FRACTION), RESERVE_CAP_BYTES)


def resolve_budgets(config: CompileConfig, host=None, devices: list[DeviceInfo] | None = None) -> Budgets:
    """Resolves every budget; `host` defaults to probing this machine now, `devices` to the
    CPU alone: accelerators get budgets only when the caller discovered them (doctor, or a
    compile for a device that names one), since reading their free memory creates a CUDA
    context on each."""
    host = host if host is not None else probe()
    devices = devices if devices is not None else discover_devices(accelerators=False)
    spill_dir = spill_root(config.spill_dir)
    return Budgets(
        ram=_ram(config, host),
        disk=_disk(config, spill_dir),
        cpus=_cpus(config, host),
        devices={d.name: _device(config, d) for d in devices if d.kind != "cpu"},
    )


def _explicit(tier: str, value: int | None, field_name: str, env_name: str) -> Budget | None:
    if value is not None:
        return Budget(tier, value, "config", f"CompileConfig.{field_name}={value}", {field_name: value})
    from_env = env_int(env_name, minimum=1)
    if from_env is not None:
        return Budget(tier, from_env, "environment", f"{env_name}={from_env}", {env_name: from_env})
    return None


def _less_reserve(tier: str, figure: int, source: str, detail: str, raw: dict[str, Any]) -> Budget:
    kept = reserve(figure)
    return Budget(tier, max(0, figure - kept), source, f"{detail}, less a reserve of {kept} bytes", raw)


def cgroup_memory_in_use(cgroup) -> int:
    """What the cgroup's usage counts less its inactive file cache: the working set, as
    container runtimes count it. A cgroup that read or wrote much is full of cache up to
    its limit, and the kernel drops that cache before it would kill anything, so usage
    alone would leave a plan no room at all."""
    usage = int(cgroup.memory_current_bytes or 0)
    return max(0, usage - int(cgroup.memory_inactive_file_bytes or 0))


def _ram(config: CompileConfig, host) -> Budget:
    explicit = _explicit("ram", config.ram_budget_bytes, "ram_budget_bytes", "TT_RAM_BUDGET_BYTES")
    if explicit:
        return explicit
    cgroup, os_available = host.cgroup, int(host.memory.available_bytes)
    raw: dict[str, Any] = {"MemTotal": int(host.memory.total_bytes), "MemAvailable": os_available}
    limits = [v for v in (cgroup.memory_max_bytes, cgroup.memory_high_bytes) if v is not None]
    if limits:
        in_use = cgroup_memory_in_use(cgroup)
        in_cgroup = max(0, min(limits) - in_use)  # usage above the limit leaves nothing, not less
        raw.update(
            cgroup_version=cgroup.version,
            memory_max=cgroup.memory_max_bytes,
            memory_high=cgroup.memory_high_bytes,
            memory_current=cgroup.memory_current_bytes,
            inactive_file=cgroup.memory_inactive_file_bytes,
            cgroup_path=cgroup.memory_path,
        )
        if in_cgroup <= os_available:
            detail = f"cgroup v{cgroup.version} limit {min(limits)} bytes less {in_use} in use ({cgroup.memory_path})"
            if cgroup.memory_inactive_file_bytes:
                detail += f", inactive file cache of {cgroup.memory_inactive_file_bytes} bytes not counted"
            return _less_reserve("ram", in_cgroup, "cgroup", detail, raw)
    return _less_reserve("ram", os_available, "os", f"MemAvailable {os_available} bytes", raw)


def _cpus(config: CompileConfig, host) -> Budget:
    explicit = _explicit("cpu", config.cpu_budget, "cpu_budget", "TT_CPU_BUDGET")
    if explicit:
        return explicit
    cpus = host.cpus
    raw = {"affinity": cpus.affinity_cpus, "online": cpus.online_cpus, "cgroup_quota_cores": cpus.quota_cores}
    if cpus.quota_cores is not None and math.ceil(cpus.quota_cores) < cpus.affinity_cpus:
        quota = max(1, math.ceil(cpus.quota_cores))
        return Budget("cpu", quota, "cgroup", f"cgroup CPU quota {cpus.quota_cores:g} cores", raw)
    return Budget("cpu", cpus.affinity_cpus, "os", f"{cpus.affinity_cpus} CPUs in the affinity mask", raw)


def hold_torch_threads(cpus: Budget) -> None:
    """Lowers torch's intra-op threads (process-wide) to the CPU budget where they exceed
    it: the budget is what the plan may use, and torch's default (every core of the host,
    not the container's quota) would oversubscribe it. Never raises them."""
    threads = torch.get_num_threads()
    if cpus.amount < threads:
        torch.set_num_threads(cpus.amount)
        log.info(
            "torch's intra-op threads lowered from %d to %d, the CPU budget (%s)", threads, cpus.amount, cpus.detail
        )


def _device(config: CompileConfig, device: DeviceInfo) -> Budget:
    explicit = _explicit(device.name, config.vram_budget_bytes, "vram_budget_bytes", "TT_VRAM_BUDGET_BYTES")
    if explicit:
        return explicit
    free = int(device.free_bytes or device.total_bytes or 0)
    raw = {"total": device.total_bytes, "free": device.free_bytes}
    return _less_reserve(device.name, free, "os", f"{device.name} free memory {free} bytes", raw)


def _disk(config: CompileConfig, spill_dir: str) -> Budget:
    explicit = _explicit("disk", config.disk_budget_bytes, "disk_budget_bytes", "TT_DISK_BUDGET_BYTES")
    if explicit:
        return explicit
    space = core.probe_disk(nearest_existing(spill_dir))  # the directory is created on first use
    raw = {"spill_dir": spill_dir, "free": space.free_bytes, "total": space.total_bytes}
    return _less_reserve("disk", space.free_bytes, "os", f"free space {space.free_bytes} bytes under {spill_dir}", raw)
