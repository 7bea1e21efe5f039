"""The host as the C++ probes see it (CPUs, memory, cgroup limits, NUMA), with injectable roots."""

from __future__ import annotations

from .. import core


def probe(proc_root: str = "/proc", sys_root: str = "/sys", cgroup_root: str = "/sys/fs/cgroup"):
    """A fresh core.HostProbe; the roots point the probes at fake trees in tests."""
    return core.probe_host(proc_root=proc_root, sys_root=sys_root, cgroup_root=cgroup_root)
