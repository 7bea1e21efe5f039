"""A lowered plan's Program bound to its data plane and kernels: CPU plans, weights streamed
from disk, and plans on virtual devices alike.

With weights on disk (a streaming plan), the core holds them: residents in its resident
arena (read once through the I/O engine), streamed ones in each call's arena, written by
`Load` instructions while other regions compute. With weights in memory, the model's own
tensors are used in place and the program counts them, with the activations, against
each tier's budget. A device's memory is its backend's: the copies to and from it run
on its queues (runtime/device_copies.py), and its resident weights are copied there
once, when the program is built. On virtual devices every instruction lasts at least
its declared time (see hardware/virtual.py).
"""

from __future__ import annotations

from typing import Any

import torch

from .. import core
from ..backends.interface import DeviceBackend
from ..errors import InvalidArgumentError
from ..planning.lowering import UNBOUNDED, LoweredProgram
from ..planning.machine import IO_QUEUE, RAM, PlanMachine
from ..planning.streaming import predicted_at
from ..planning.weights_on_disk import SETTLED_NS, WeightsOnDisk
from ..units import format_bytes
from .device_copies import device_links
from .held_weights import HeldWeights
from .host_pins import HostPins, page_spans
from .plane_call import PlaneCall, call_steps
from .program_runner import ProgramRunner

K = core.InstructionKind
LIFE = core.BufferLifetime


class PlaneProgram:
    """A Program bound to its data plane and kernels; shared by concurrent calls (the
    core's ledger admits each only with room for its working set on every tier)."""

    def __init__(
        self,
        runner: ProgramRunner,
        plan: LoweredProgram,
        weights: WeightsOnDisk | None = None,
        io: core.IoEngine | None = None,
        reads: str = "",
        spill_dir: str = "",
        costs: str = "",
        layout: str = "",
        machine: PlanMachine | None = None,
        read_window_bytes: int = 0,
    ) -> None:
        """`weights` and `io`: the files the weights stream from and the engine reading them
        (`reads` says how it reads, for explain()); None when the weights are the model's
        own tensors in memory. `spill_dir`: where a plan that spills activations writes
        them (storage/spill_dir.py); its spills and reloads share `io`, or an engine of
        their own when the weights are in memory. `costs` says where the predictions'
        figures came from, and `layout` why these weights stream, for explain().
        `machine`: the devices the program's device tiers are (None: the CPU alone).
        `read_window_bytes`: the bytes `io` keeps in flight to read at its measured speed."""
        self.runner = runner
        self.plan = plan
        self.weights = weights
        self.io = io
        self.reads = reads
        self.read_window_bytes = read_window_bytes
        self.costs = costs
        self.layout = layout
        program = plan.program
        queues = {queue.name: queue for queue in program.queues}
        # The caller's thread computes too; each virtual device's regions need a thread of their own.
        devices = sum(1 for name, q in queues.items() if q.kind == core.QueueKind.Compute and name != "cpu")
        if io is None and plan.spilled_bytes:
            io = core.IoEngine(threads=queues["io"].capacity, queue_depth=queues["io"].capacity)
        self.spill_dir = spill_dir
        workers = max(1, queues["cpu"].capacity - 1 + devices)
        self.plane = core.DataPlane(program, io, workers=workers, spill_dir=spill_dir)
        self.plane.open_files()  # the files verified for this plan, held: a path replaced later changes nothing
        self.devices = device_backends(program, machine)
        if weights is not None:
            self.resident_tensors = self._load_residents()
            runner.rebind(self.bound_values())
        links = device_links(program, self.devices)
        self.held = HeldWeights()
        self._steps = call_steps(runner, plan, links, self._held_on_devices(), self.devices)
        self.pins = HostPins(backend for backend, _ in self.devices.values()) if self.devices else None
        if self.pins is not None:
            copied = self._copied_weights()
            self.pins.cover(page_spans(copied), owner=copied)
            self.pins.cover(self.plane.resident_memory().host_arenas, owner=self.plane)

    def _copied_weights(self) -> list[torch.Tensor]:
        """The model's tensors in RAM that copies to a device read on every call."""
        program, values = self.plan.program, self.runner.bound_values
        slot_of = dict(self.plan.preset)
        read = {b for i in program.schedule.instructions if i.kind == K.Copy for b in i.reads}
        return [
            values[slot_of[b]]
            for b in read
            if b in slot_of and slot_of[b] < self.runner.bound_count and isinstance(values[slot_of[b]], torch.Tensor)
        ]

    def _device_of(self, tier: int) -> tuple[DeviceBackend, int]:
        return self.devices[self.plan.program.tiers[tier].name]

    def _held_on_devices(self) -> dict[int, Any]:
        """The resident weights on devices, and the buffers written in place there: each
        copied into its device's memory once (runtime/held_weights.py)."""
        program, values = self.plan.program, self.runner.bound_values
        held = {}
        for buffer, slot in self.plan.preset:
            tier = program.buffers[buffer].tier
            if tier != RAM and values[slot] is not None and program.buffers[buffer].lifetime == LIFE.Resident:
                backend, index = self._device_of(tier)
                held[buffer] = self.held.hold(backend, index, values[slot], written=slot in self.plan.homes)
        return held

    def read_in_ram(self) -> list[torch.Tensor]:
        """The buffers of the model its calls update in RAM (those a device holds and
        writes in place aside): a device's newer copy of one comes back first
        (runtime/held_weights.py)."""
        return [
            buffer
            for (_, buffer), target in zip(self.runner.mutations, self.plan.mutations)
            if target is not None and isinstance(buffer, torch.Tensor)
        ]

    def predicted_s(self) -> float:
        """The simulated duration of one call (0 when the program carries no predictions)."""
        return max((i.predicted_end_us for i in self.plan.program.schedule.instructions), default=0.0) / 1e6

    def predicted_at(self, report) -> float | None:
        """The simulated duration of one call at the compute times and read speed of the
        call `report` records (planning/streaming.py); None when it read nothing."""
        return predicted_at(self.plan, report, len(self.runner.kernels))

    @property
    def streams(self) -> bool:
        return self.weights is not None

    def _load_residents(self) -> dict[int, torch.Tensor]:
        """Reads every resident weight into the resident arena, once; returns their views."""
        memory = self.plane.resident_memory()
        tensors = {}
        for slot, buffer in self.plan.resident.items():
            place = self.weights.ranges[slot]
            tier = self.plan.program.buffers[buffer].tier
            # A device's are read into host memory first, then copied to the device.
            view = self.plane.view(memory, buffer) if tier == RAM else torch.empty(place.nbytes, dtype=torch.uint8)
            if place.nbytes:
                self.io.read_into(self.weights.path_of(place), place.offset, view)
            tensors[slot] = view.view(place.dtype).reshape(place.shape)
            if tier != RAM:
                backend, index = self._device_of(tier)
                tensors[slot] = backend.hold(index, tensors[slot])
        return tensors

    @property
    def tier_names(self) -> list[str]:
        """The tiers whose peaks a call reports: every one but disk."""
        return [t.name for t in self.plan.program.tiers if t.kind != core.TierKind.Disk]

    def describe(self) -> list[str]:
        """explain()'s lines: what streams, the prefetch distance, the memory plan and the program."""
        plan, program = self.plan, self.plan.program
        memory = program.memory_plan
        pinned = [self.pins.describe()] if self.pins is not None else []
        if self.weights is None:
            lines = ["Data plane: the model's own weights used in place; per tier, its memory plan"]
            for tier, name in enumerate(self.tier_names):
                capacity = program.tiers[tier].capacity_bytes
                budget = "unbounded" if capacity >= UNBOUNDED else f"budget {format_bytes(capacity)}"
                lines.append(
                    f"  {name}: {format_bytes(memory.arena_bytes[tier])} at most, "
                    f"{format_bytes(memory.peak_bytes[tier])} live at the peak in plan order ({budget})"
                )
            return lines + pinned + self._spill_lines() + ["", *self._program_lines()]
        resident = sum(self.weights.ranges[slot].nbytes for slot in plan.resident)
        lines = [
            f"Weights streamed from disk (ram_budget_bytes={plan.budget_bytes}, {format_bytes(plan.budget_bytes)})",
            *self._file_lines(),
            self._integrity_line(),
            f"  layout: {self.layout}",
            f"  prefetch distance: {plan.prefetch} (of the largest streamed regions' bytes); "
            f"loads in flight: {program.queues[IO_QUEUE].capacity}; "
            f"reads: {self.reads}",
            f"  predicted per call: {self.predicted_s() * 1e3:.2f} ms (the simulator; {self.costs})",
            f"  resident: {len(plan.resident)} tensor(s), {format_bytes(resident)}, loaded once into the core's arena",
            f"  streamed: {sum(len(w) for w in plan.streamed.values())} tensor(s) of {len(plan.streamed)} region(s), "
            f"{format_bytes(plan.streamed_bytes)} read on every call",
            f"  memory plan (ram): {format_bytes(memory.arena_bytes[0])} at most "
            f"({format_bytes(memory.owned_bytes[0])} in the core's arena, "
            f"{format_bytes(memory.arena_bytes[0] - memory.owned_bytes[0])} of torch's tensors), "
            f"{format_bytes(memory.peak_bytes[0])} live at the peak in plan order",
        ]
        for region, weights in sorted(plan.streamed.items()):
            nbytes = sum(self.weights.ranges[w.slot].nbytes for w in weights)
            lines.append(f"    {plan.region_names[region]}: {format_bytes(nbytes)} streamed per call")
        return lines + pinned + self._spill_lines() + ["", *self._program_lines()]

    def _spill_lines(self) -> list[str]:
        program = self.plan.program
        spills = sum(1 for i in program.schedule.instructions if i.kind == K.Spill)
        if not spills:
            return []
        reloads = sum(1 for i in program.schedule.instructions if i.kind == K.Reload)
        return [
            f"Activations spilled: {spills} value(s), {format_bytes(self.plan.spilled_bytes)} written and "
            f"{reloads} reload(s) per call, in anonymous files under {self.spill_dir} (emptied after every call)"
        ]

    def _file_lines(self) -> list[str]:
        files = self.weights.files
        if len(files) == 1:
            return [f"  file: {files[0].path}"]
        return [f"  files: {len(files)}, read in place", *(f"    {file.path}" for file in files)]

    def _integrity_line(self) -> str:
        files, ranges = self.weights.files, self.weights.ranges.values()
        if not all(place.crc32c >= 0 for place in ranges):
            return "  integrity: each load checks the SHA-256 of the whole chunks it covers"
        trusted = sum(1 for file in files if file.verified_as is not None)
        return (
            "  integrity: a load checks its tensor's CRC-32C unless it found it good before in the file as it is "
            f"(device, inode, size, times; unchanged for {SETTLED_NS / 1e9:g} s); any write brings the check back. "
            f"Found good when built: {trusted} of {len(files)} file(s)"
        )

    def _program_lines(self) -> list[str]:
        lines = ["Schedule: the data plane's program (instruction, queue, kind, label, deps)"]
        for instruction in self.plan.program.schedule.instructions:
            deps = ",".join(str(d) for d in instruction.deps) or "-"
            lines.append(
                f"  {instruction.id:>4} {instruction.device:<8} {str(instruction.kind).split('.')[-1]:<8} "
                f"{instruction.label:<40} after {deps}"
            )
        return lines

    def bound_values(self) -> list[torch.Tensor | None]:
        """The program's bound slots: resident views, None where a weight streams, and the
        program's own tensor where a slot has no bytes on disk."""
        own = self.runner.bound_values
        return [
            self.resident_tensors.get(slot, None if slot in self.weights.ranges else own[slot])
            for slot in range(self.runner.bound_count)
        ]

    def close(self) -> None:
        """Releases now what the program holds, once no call runs: its pinned ranges, then
        its arenas (the views of them dropped first), workers, spill files and I/O threads,
        and its weights held on devices. Every later call raises."""
        if self.pins is not None:
            self.pins.release()  # before the memory it registered goes
        self.resident_tensors = {}
        self.runner.rebind([None] * self.runner.bound_count)  # their views hold the resident arena
        self._steps = None
        self.held = HeldWeights()
        self.plane.close()
        self.io = None

    def run(
        self,
        flat_inputs: list[Any],
        token: core.CancelToken,
        stall_timeout_s: float,
        timeout_s: float,
        grad: bool = False,
    ):
        """One call: returns (outputs, run report, per-tier peak bytes). With `grad`,
        autograd records it (see PlaneCall) and the outputs keep their history."""
        plane = self.plane
        memory = plane.begin_call(timeout_s)
        call = None
        try:
            if self.pins is not None:  # a pooled arena seen before is registered already
                self.pins.cover(memory.host_arenas, owner=self.plane)  # its pool's arenas
            # The caller's thread computes too; its grad mode comes back after.
            with torch.set_grad_enabled(grad):
                call = PlaneCall(self.runner, self.plan, plane, memory, flat_inputs, self._steps, grad)
                report = plane.run(
                    memory, call.compute, stall_timeout_s=stall_timeout_s, cancel=token, device_copy=call.copy
                )
                outputs = call.finish()
            return outputs, report, list(memory.peak_bytes)
        finally:
            if call is not None:  # its values (device memory too) go now, even while an error's traceback lives
                call.drop()
            plane.end_call(memory)


def device_backends(program: core.Program, machine: PlanMachine | None) -> dict[str, tuple[DeviceBackend, int]]:
    """Per device tier of `program`, by name, the backend and index its Device is bound to."""
    devices = {d.name: (d.backend, d.index) for d in (machine.on_devices if machine is not None else ())}
    for tier in program.tiers:
        if tier.kind == core.TierKind.Device and tier.name not in devices:
            raise InvalidArgumentError(f"the program has device tier {tier.name!r}, but no such device was given")
    return devices
