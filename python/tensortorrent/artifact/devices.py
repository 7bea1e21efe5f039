"""The devices an artifact's plan was made for, in its manifest ("devices"): the CPU,
accelerators by name ("cuda:0"), virtual devices with their declarations, so that loading
plans for them again (tensortorrent/load.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import ArtifactError, TensorTorrentError
from ..hardware.virtual import VirtualDevice
from ..planning import ExecutionPlan
from .layout import MANIFEST

# Artifacts written before the manifest recorded devices held CPU plans only.
CPU_ONLY = [{"name": "cpu"}]


def device_entries(plan: ExecutionPlan) -> list[dict[str, Any]]:
    """The manifest's "devices": every device the plan's machine had, in its order."""
    if plan.placement is None:
        return CPU_ONLY
    return [
        {"name": device.name, "virtual": dataclasses.asdict(device.declaration)}
        if device.declared
        else {"name": device.name}
        for device in plan.placement.machine.devices
    ]


def saved_devices(manifest: dict[str, Any]) -> list[tuple[str, VirtualDevice | None]]:
    """The devices by name, each with its declaration where it is a virtual device; or
    ArtifactError when the entry is malformed."""
    entries = manifest.get("devices", CPU_ONLY)
    try:
        devices = [(str(entry["name"]), _declared(entry.get("virtual"))) for entry in entries]
    except (AttributeError, KeyError, TypeError, TensorTorrentError) as error:
        raise ArtifactError(f"{MANIFEST}: unreadable devices ({error})") from error
    if not devices:
        raise ArtifactError(f"{MANIFEST}: devices: expected at least one device, got none")
    return devices


def _declared(fields: object) -> VirtualDevice | None:
    if fields is None:
        return None
    if not isinstance(fields, dict):
        raise TypeError(f"a virtual device's declaration is a JSON object, got {type(fields).__name__}")
    return VirtualDevice(**fields)
