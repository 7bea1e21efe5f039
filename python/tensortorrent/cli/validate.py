"""`tensortorrent validate-hardware`: run real work on every device and give each a verdict.

Verdicts: "discovered" (found, but a check failed) and "validated" (on this host: basic
execution; for an accelerator, its backend's conformance checks, copies and events to
and from host memory among them; and TensorTorrent against eager on the device, on the
direct path, on the data plane with every region its own, and with weights over a small
device budget copied to the device on every call). Only "validated" is a claim fit for
production.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from torch import nn

from ..backends.conformance import CHECKS
from ..files import write_text_atomically
from ..hardware import discover_devices
from ..hardware.accelerator import find_device
from ..hardware.devices import DeviceInfo, absent_kinds


def add_parser(commands) -> None:
    parser = commands.add_parser("validate-hardware", help="execute checks on every device and report verdicts")
    parser.add_argument("--output", type=str, metavar="PATH", help="write the report as JSON to PATH")
    parser.add_argument("--stress", action="store_true", help="larger workloads, repeated")
    parser.set_defaults(run=run)


def _timed_check(name: str, fn) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        detail = fn()
        ok = True
    except Exception as error:  # the check's failure is the report's content
        detail, ok = f"{type(error).__name__}: {error}", False
    return {"name": name, "ok": ok, "detail": detail, "seconds": round(time.perf_counter() - start, 4)}


def basic_execution(device: torch.device, size: int, repeat: int) -> str:
    """A matmul on the device against a float64 CPU reference."""
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(size, size, generator=generator), torch.randn(size, size, generator=generator)
    reference = (a.double() @ b.double()).float()
    for _ in range(repeat):
        got = (a.to(device) @ b.to(device)).cpu()
        error = (got - reference).abs().max().item()
        if error > 1e-2 * size**0.5:
            raise AssertionError(f"matmul {size}x{size} differs from the reference by {error:g}")
    return f"matmul {size}x{size} x{repeat}: max error {error:.2g}"


def compiled_numerics(device: str, width: int, repeat: int) -> str:
    """tt.compile against eager on a small MLP on `device` (the model and inputs in host
    memory, as a user gives them), in eval mode, on every path a plan there may take."""
    import tensortorrent as tt

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width * 2), nn.GELU(), nn.Linear(width * 2, width)).eval()
    x = torch.randn(8, width)
    layer_bytes = max(p.numel() * p.element_size() for p in model.parameters())
    configs = {"direct path": tt.CompileConfig(), "data plane": tt.CompileConfig(max_region_nodes=1)}
    if device != "cpu":
        configs["data plane"] = tt.CompileConfig(max_region_nodes=1, prefer_direct_path=False)
        configs["weights copied per call"] = tt.CompileConfig(max_region_nodes=1, vram_budget_bytes=2 * layer_bytes)
    ran = []
    for name, config in configs.items():
        compiled = tt.compile(model, example_inputs=(x,), devices=[device], config=config)
        for _ in range(repeat):
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        if compiled.uses_direct_path:
            ran.append(f"{name} ({compiled.region_count} region(s), inline)")
        else:
            moved = sum(r.bytes for r in compiled.last_report.records if r.kind == "copy")
            ran.append(f"{name} ({compiled.region_count} region(s), {moved} bytes copied per call)")
    return f"MLP {width} matches eager: " + "; ".join(ran)


def conformance(device: str) -> str:
    """The device's backend keeps the interface's promises on this device."""
    backend, index = find_device(device)
    info = backend.devices()[index]
    for check in CHECKS:
        check(backend, index, info)
    return f"{len(CHECKS)} checks of the {backend.kind} backend passed"


def transfers(source: torch.device, target: torch.device, nbytes: int) -> str:
    data = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=source)
    if not torch.equal(data.to(target).to(source), data):
        raise AssertionError(f"bytes changed on the way {source} -> {target} -> {source}")
    return f"{nbytes} bytes {source} -> {target} -> {source} unchanged"


def torch_device_of(name: str) -> torch.device:
    """Where device `name` computes, as torch names it (a plugin's device may compute in host memory)."""
    found = find_device(name)
    if found is None:
        return torch.device(name)
    backend, index = found
    return backend.torch_device(index)


def validate_device(device: DeviceInfo, stress: bool) -> dict[str, Any]:
    size, repeat = (2048, 20) if stress else (256, 2)
    where = torch_device_of(device.name)
    checks = [_timed_check("basic execution", lambda: basic_execution(where, size, repeat))]
    if device.kind != "cpu":
        checks.append(_timed_check("backend conformance", lambda: conformance(device.name)))
    width = 1024 if stress else 64
    checks.append(_timed_check("tensortorrent vs eager", lambda: compiled_numerics(device.name, width, repeat)))
    verdict = "validated" if all(check["ok"] for check in checks) else "discovered"
    return {"device": device.name, "model": device.model, "verdict": verdict, "checks": checks}


def report(stress: bool = False) -> dict[str, Any]:
    devices = discover_devices()
    results = [validate_device(device, stress) for device in devices]
    accelerators = [d.name for d in devices if d.kind != "cpu"]
    pairs = [(a, b) for a in accelerators for b in accelerators if a != b]
    transfer_checks = [
        _timed_check(
            f"transfer {a} -> {b}", lambda a=a, b=b: transfers(torch_device_of(a), torch_device_of(b), 64 << 20)
        )
        for a, b in pairs
    ]
    return {
        "devices": results,
        "absent": [{"kind": kind, "status": "absent"} for kind in absent_kinds(devices)],
        "transfers": transfer_checks,
        "ok": all(c["ok"] for r in results for c in r["checks"]) and all(c["ok"] for c in transfer_checks),
    }


def run(args: argparse.Namespace) -> int:
    data = report(stress=args.stress)
    for result in data["devices"]:
        print(f"{result['device']:8} {result['model']}: {result['verdict']}")
        for check in result["checks"]:
            print(f"    {'ok' if check['ok'] else 'FAILED':6} {check['name']}: {check['detail']}")
    for absent in data["absent"]:
        print(f"{absent['kind']:8} absent")
    for check in data["transfers"]:
        print(f"    {'ok' if check['ok'] else 'FAILED':6} {check['name']}: {check['detail']}")
    if args.output:
        write_text_atomically(args.output, json.dumps(data, indent=2) + "\n")
    return 0 if data["ok"] else 1
