"""`tensortorrent doctor`: the machine, the budgets a plan gets and where they come from."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from typing import Any

import torch

from .. import core
from ..backends import backends, plugin_problems
from ..config import CompileConfig
from ..files import nearest_existing, write_text_atomically
from ..hardware import discover_devices, hardware_fingerprint, resolve_budgets
from ..hardware.budgets import cgroup_memory_in_use, spill_root
from ..hardware.devices import absent_kinds, measure_host_to_device_bandwidth
from ..hardware.host import probe
from ..storage.read_mode_cache import cached_read_modes
from ..units import format_bytes
from ..version import __version__

BANDWIDTH_PROBE_BYTES = 64 << 20


def add_parser(commands) -> None:
    parser = commands.add_parser("doctor", help="show devices, budgets and their provenance; exit 1 if a check fails")
    parser.add_argument("--json", type=str, metavar="PATH", help="also write the report as JSON to PATH")
    parser.add_argument("--no-bandwidth", action="store_true", help="skip measuring the spill directory's read speed")
    parser.add_argument(
        "--h2d", action="store_true", help="measure pinned host-to-device bandwidth of each accelerator"
    )
    parser.set_defaults(run=run)


def report(measure_bandwidth: bool = True, measure_h2d: bool = False) -> dict[str, Any]:
    """Everything doctor shows, as JSON-able data (the --json schema)."""
    host = probe()
    devices = discover_devices()
    budgets = resolve_budgets(CompileConfig(), host=host, devices=devices)
    checks = []
    disk = _spill_disk(measure_bandwidth, checks)
    checks.append(_check("ram budget", budgets.ram.amount > 0, f"{format_bytes(budgets.ram.amount)} usable"))
    checks += [_check("device backend plugin", False, problem) for problem in plugin_problems()]
    cgroup = host.cgroup
    limit = min((v for v in (cgroup.memory_max_bytes, cgroup.memory_high_bytes) if v is not None), default=None)
    if limit is not None:
        used = cgroup_memory_in_use(cgroup)
        checks.append(_check("cgroup memory", used < limit, f"{format_bytes(used)} used of {format_bytes(limit)}"))
    return {
        "tensortorrent": __version__,
        "torch": torch.__version__,
        "fingerprint": hardware_fingerprint(),
        "host": _host_json(host),
        "devices": [vars(d) | {"peers": list(d.peers)} | _h2d(d, measure_h2d) for d in devices],
        "absent": absent_kinds(devices),
        "backends": [backend.kind for backend in backends()],
        "budgets": [vars(b) for b in (budgets.ram, *budgets.devices.values(), budgets.disk, budgets.cpus)],
        "disk": disk,
        "read_modes": cached_read_modes(),
        "checks": checks,
        "healthy": all(c["ok"] for c in checks),
    }


def _h2d(device, measure: bool) -> dict[str, Any]:
    if not measure or device.kind == "cpu":
        return {}
    return {"h2d_bytes_per_second": measure_host_to_device_bandwidth(device.name)}


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail}


def _spill_disk(measure: bool, checks: list) -> dict[str, Any]:
    path = spill_root(None)
    existing = nearest_existing(path)
    try:
        os.makedirs(path, exist_ok=True)
        space = core.probe_disk(path)
        disk: dict[str, Any] = {"path": path, "free_bytes": space.free_bytes, "total_bytes": space.total_bytes}
        if measure:
            speed = core.measure_read_bandwidth(path, BANDWIDTH_PROBE_BYTES)
            disk.update(read_bytes_per_second=speed.bytes_per_second, read_direct=speed.direct)
        if space.in_memory:  # as storage/spill_dir.py refuses it
            detail = f"{path} is held in RAM (tmpfs): spilling there saves no RAM, so compiles refuse it "
            checks.append(_check("spill directory", False, detail + "unless CompileConfig(allow_tmpfs_spill=True)"))
        else:
            checks.append(_check("spill directory", True, f"{path} writable, {format_bytes(space.free_bytes)} free"))
        return disk
    except Exception as error:  # any failure here is what the check reports
        checks.append(_check("spill directory", False, f"{path}: {error}"))
        return {"path": path}
    finally:  # the folders made to look at it go again (empty): the first spill creates them
        with contextlib.suppress(OSError):
            while path != existing:
                os.rmdir(path)
                path = os.path.dirname(path)


def _host_json(host) -> dict[str, Any]:
    cpus, memory, cgroup = host.cpus, host.memory, host.cgroup
    return {
        "cpus": {
            "affinity": cpus.affinity_cpus,
            "online": cpus.online_cpus,
            "quota_cores": cpus.quota_cores,
            "usable": cpus.usable_cpus,
        },
        "memory": {
            "total_bytes": memory.total_bytes,
            "available_bytes": memory.available_bytes,
            "transparent_huge_pages": memory.transparent_huge_pages or None,
        },
        "cgroup": {
            "version": cgroup.version,
            "memory_max_bytes": cgroup.memory_max_bytes,
            "memory_high_bytes": cgroup.memory_high_bytes,
            "memory_current_bytes": cgroup.memory_current_bytes,
            "memory_inactive_file_bytes": cgroup.memory_inactive_file_bytes,
            "cpu_quota_cores": cgroup.cpu_quota_cores,
            "memory_path": cgroup.memory_path,
            "cpu_path": cgroup.cpu_path,
        },
        "numa": [
            {"id": n.id, "total_bytes": n.mem_total_bytes, "free_bytes": n.mem_free_bytes, "cpus": list(n.cpus)}
            for n in host.numa
        ],
    }


def print_report(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]TensorTorrent {data['tensortorrent']}[/] on torch {data['torch']}, "
        f"fingerprint {data['fingerprint']['digest']}"
    )
    host = data["host"]
    cpus, cgroup = host["cpus"], host["cgroup"]
    quota = "none" if cpus["quota_cores"] is None else f"{cpus['quota_cores']:g} cores"
    where = f"cgroup v{cgroup['version']} at {cgroup['memory_path']}" if cgroup["version"] else "no cgroup found"
    console.print(
        f"host: {cpus['usable']} usable CPUs (affinity {cpus['affinity']}, online {cpus['online']}, quota {quota}); "
        f"RAM {format_bytes(host['memory']['total_bytes'])}, {format_bytes(host['memory']['available_bytes'])} "
        f"available; {where}; {len(host['numa'])} NUMA node(s); {_huge_pages(host['memory'])}"
    )
    devices = Table(title="Devices")
    for column in ("device", "model", "memory", "free", "capability"):
        devices.add_column(column)
    for d in data["devices"]:
        devices.add_row(
            d["name"], d["model"], _bytes(d["total_bytes"]), _bytes(d["free_bytes"]), d["capability"] or "-"
        )
    for kind in data["absent"]:
        devices.add_row(kind, "absent", "-", "-", "-")
    console.print(devices)
    budgets = Table(title="Budgets")
    for column in ("tier", "budget", "source", "provenance"):
        budgets.add_column(column)
    for b in data["budgets"]:
        amount = f"{b['amount']} cores" if b["tier"] == "cpu" else format_bytes(b["amount"])
        budgets.add_row(b["tier"], amount, b["source"], b["detail"])
    console.print(budgets)
    disk = data["disk"]
    if "read_bytes_per_second" in disk:
        how = "O_DIRECT" if disk["read_direct"] else "buffered, cache dropped"
        console.print(
            f"spill directory {disk['path']}: reads {format_bytes(int(disk['read_bytes_per_second']))}/s ({how})"
        )
    for device, entry in sorted(data["read_modes"].items()):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.get("measured_at", 0)))
        console.print(
            f"weights on device {device} read {entry.get('mode')} with {entry.get('threads')} thread(s) at "
            f"{entry.get('measured_gbps') or 0:.2f} GB/s (measured by a streaming compile {when}, cached)"
        )
    checks = Table(title="Checks")
    for column in ("check", "result", "detail"):
        checks.add_column(column)
    for c in data["checks"]:
        checks.add_row(c["name"], "[green]ok[/]" if c["ok"] else "[red]FAILED[/]", c["detail"])
    console.print(checks)


def _huge_pages(memory: dict[str, Any]) -> str:
    """What the kernel's transparent huge page mode means for streamed reads."""
    mode = memory["transparent_huge_pages"]
    if mode is None:
        return "no transparent huge pages"
    if mode == "never":
        return "transparent huge pages never (streamed O_DIRECT reads go out in smaller requests; madvise enables them)"
    return f"transparent huge pages {mode} (streaming arenas use them)"


def _bytes(value: int | None) -> str:
    return "-" if value is None else format_bytes(value)


def run(args: argparse.Namespace) -> int:
    data = report(measure_bandwidth=not args.no_bandwidth, measure_h2d=args.h2d)
    print_report(data)
    if args.json:
        write_text_atomically(args.json, json.dumps(data, indent=2) + "\n")
    return 0 if data["healthy"] else 1
