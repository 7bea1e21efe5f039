"""The machine a plan runs on: the devices regions may use, the memory tiers and the links.

Tier 0 is host RAM, where the CPU computes and where the model's weights and the call's
inputs start; every device adds its own memory tier, joined to RAM by two links (host to
device, device to host). Two devices that are peers (a declared peer link, or a measured
one where the backend reports peer access) exchange values over a direct link each way;
others exchange them through RAM.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from ..errors import InvalidArgumentError, UnsupportedError
from ..hardware.accelerator import profiled
from ..hardware.device import RAM, Device, cpu_device, virtual_devices
from ..hardware.virtual import VirtualDevice

log = logging.getLogger(__name__)

CPU_QUEUE, IO_QUEUE = 0, 1  # where "cpu" and "io" are in every program's queues (PlanMachine.queue_names)


@dataclass(frozen=True)
class Link:
    """A link data crosses between two tiers: a device's with RAM, or a peer link."""

    name: str  # "<device>.h2d", "<device>.d2h", or "<from>-><to>" between peers
    from_tier: int
    to_tier: int
    device_tier: int | None  # the device whose link with RAM this is (its transfer model times it)
    bytes_per_s: float | None = None  # a peer link's measured or declared rate


@dataclass(frozen=True)
class PlanMachine:
    devices: tuple[Device, ...]
    ram_bytes: int  # host RAM's budget, tier RAM's capacity

    @property
    def is_cpu_only(self) -> bool:
        return all(d.is_cpu for d in self.devices)

    def check_activation_budget(self, budget: int | None, caller: str) -> None:
        """UnsupportedError for an activation budget on a machine with devices: activations
        spill from CPU regions only today (planning/activation_spill.py)."""
        if budget is not None and not self.is_cpu_only:
            raise UnsupportedError(f"{caller}: activations spill from CPU regions only today; use devices='cpu'")

    def profiled(self, runner, flat_inputs, load=None) -> PlanMachine:
        """The machine with each region's time measured on its real accelerators (`load`:
        see hardware/accelerator.profiled)."""
        devices = tuple(profiled(d, runner, flat_inputs, load) if d.measured else d for d in self.devices)
        return replace(self, devices=devices)

    @property
    def cpu_index(self) -> int | None:
        """The CPU's position in `devices`; None when the plan may not use it."""
        return next((i for i, d in enumerate(self.devices) if d.is_cpu), None)

    def shares_layers(self, weight_bytes: int) -> bool:
        """Whether layers may be split between the CPU and a device: both are used, and some
        weights must stay in host RAM (a device cannot hold them all)."""
        return self.cpu_index is not None and any(d.memory_bytes < weight_bytes for d in self.on_devices)

    @property
    def tier_names(self) -> list[str]:
        return ["ram"] + [d.name for d in self.on_devices]

    def tier_capacities(self) -> list[int]:
        return [self.ram_bytes] + [d.memory_bytes for d in self.on_devices]

    @property
    def on_devices(self) -> tuple[Device, ...]:
        """The devices with memory tiers of their own: every one but the CPU, in tier order."""
        return tuple(d for d in self.devices if not d.is_cpu)

    def device_on_tier(self, tier: int) -> Device:
        return next(d for d in self.on_devices if d.tier == tier)

    @property
    def device_count(self) -> int:
        """How many device tiers there are (RAM aside)."""
        return len(self.on_devices)

    @functools.cached_property
    def peer_links(self) -> tuple[tuple[int, int, float], ...]:
        """The direct links between devices: (from tier, to tier, bytes/s), each way, in tier order."""
        return tuple(
            (a.tier, b.tier, bandwidth)
            for a in self.on_devices
            for b in self.on_devices
            if a is not b and (bandwidth := a.peer_bandwidth(b)) is not None
        )

    def peers(self, from_tier: int, to_tier: int) -> bool:
        """Whether a direct link joins device tiers `from_tier` and `to_tier`."""
        return any((a, b) == (from_tier, to_tier) for a, b, _ in self.peer_links)

    @functools.cached_property
    def links(self) -> tuple[Link, ...]:
        """Every link: per device, host-to-device then back; then each peer link."""
        tier_names = self.tier_names
        with_ram = tuple(
            Link(f"{d.name}.{way}", *tiers, d.tier)
            for d in self.on_devices
            for way, tiers in (("h2d", (RAM, d.tier)), ("d2h", (d.tier, RAM)))
        )
        return with_ram + tuple(
            Link(f"{tier_names[a]}->{tier_names[b]}", a, b, None, rate) for a, b, rate in self.peer_links
        )

    def link(self, from_tier: int, to_tier: int) -> Link:
        """The link from one tier to another."""
        link = self._links_by_tiers.get((from_tier, to_tier))
        if link is None:
            raise AssertionError(f"no direct link from tier {from_tier} to tier {to_tier}")
        return link

    @functools.cached_property
    def _links_by_tiers(self) -> dict[tuple[int, int], Link]:
        return {(link.from_tier, link.to_tier): link for link in self.links}

    @property
    def link_names(self) -> list[str]:
        return [link.name for link in self.links]

    def link_seconds(self, link: Link, nbytes: int) -> float:
        if link.bytes_per_s is not None:
            return nbytes / link.bytes_per_s
        return self.device_on_tier(link.device_tier).transfer_seconds(nbytes)

    @functools.cached_property
    def queue_names(self) -> tuple[str, ...]:
        """A program's queues, in order: the CPU's compute slots ("cpu") and the I/O engine
        ("io"), then per device its compute queue (its name) and its two links with RAM,
        then the peer links. Queues are found by name (queue_of), never by position."""
        names = ["cpu", "io"]
        for device in self.on_devices:
            names += [device.name, f"{device.name}.h2d", f"{device.name}.d2h"]
        return (*names, *(link.name for link in self.links if link.device_tier is None))

    @functools.cached_property
    def queue_of(self) -> dict[str, int]:
        """A queue's position in the program by its name."""
        return {name: index for index, name in enumerate(self.queue_names)}

    def compute_queue(self, tier: int) -> int:
        """The queue of the regions computing on tier `tier`'s device (the CPU's for RAM)."""
        return self.queue_of["cpu" if tier == RAM else self.device_on_tier(tier).name]

    def link_queue(self, from_tier: int, to_tier: int) -> int:
        return self.queue_of[self.link(from_tier, to_tier).name]

    def to_device_seconds(self, tier: int, nbytes: int) -> float:
        """How long copying `nbytes` from RAM to the device of `tier` takes."""
        return self.link_seconds(self.link(RAM, tier), nbytes)

    def slowest_link_bytes_per_s(self) -> float:
        rates = [d.link_bandwidth for d in self.on_devices]
        return min(rates) if rates else 0.0


def resolve_machine(
    requested: list[str],
    machine: tuple[VirtualDevice, ...],
    ram_bytes: int,
    accelerators: Mapping[str, Device] = MappingProxyType({}),
    caller: str = "tt.compile",
) -> PlanMachine:
    """The devices `requested` (tt.compile's `devices` as names, target.py:
    requested_devices; 'auto' means the CPU and the found accelerators in `accelerators`:
    virtual devices run only when named), with the declared virtual devices and the real
    accelerators (found and measured, by name) they refer to, each given its tier."""
    declared = {d.name: d for d in machine}
    if requested == ["auto"]:
        if declared:
            log.info("devices='auto' uses the cpu and accelerators; name virtual devices in `devices` to plan on them")
        requested = ["cpu", *accelerators]
    repeated = sorted({d for d in requested if requested.count(d) > 1})
    if repeated:
        raise InvalidArgumentError(f"{caller}: devices: each device once, got {repeated} more than once")
    for name in requested:
        if name == "auto":
            raise InvalidArgumentError(f"{caller}: devices: 'auto' cannot be combined with device names")
        if name != "cpu" and name not in declared and name not in accelerators:
            known = ", ".join(["'cpu'"] + [repr(n) for n in [*declared, *accelerators]])
            raise InvalidArgumentError(
                f"{caller}: devices: unknown device {name!r}; known: {known} (an accelerator is known when "
                "its backend finds it: see `tensortorrent doctor`)"
            )
    found = {"cpu": cpu_device(), **accelerators}
    found.update((d.name, d) for d in virtual_devices([declared[n] for n in requested if n in declared]))
    chosen: list[Device] = []
    for name in requested:
        tier = RAM if name == "cpu" else 1 + sum(not d.is_cpu for d in chosen)
        chosen.append(replace(found[name], tier=tier))
    return PlanMachine(tuple(chosen), ram_bytes)
