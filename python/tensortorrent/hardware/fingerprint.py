"""A stable fingerprint of the machine: what a saved plan depends on."""

from __future__ import annotations

import hashlib
import json
import platform
from typing import Any

from .devices import discover_devices
from .host import probe


def hardware_fingerprint() -> dict[str, Any]:
    """Architecture, CPU model, usable cores and each device's model and memory, with a
    short digest to compare. Free memory and load are left out: they change by the minute,
    and reading free memory would create a CUDA context on every device."""
    host = probe()
    facts = {
        "machine": platform.machine(),
        "usable_cpus": host.cpus.usable_cpus,
        "devices": [
            {"name": d.name, "model": d.model, "total_bytes": d.total_bytes, "capability": d.capability}
            for d in discover_devices(live=False)
        ],
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    return {**facts, "digest": digest}
