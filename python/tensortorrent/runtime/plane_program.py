"""Runs a CPU plan's Program on the native data plane; Python is entered only for Compute.

With weights on disk (a streaming plan), the core holds them: residents in its resident
arena (read once through the I/O engine), streamed ones in each call's arena, written by
`Load` instructions while other regions compute; region kernels see them as zero-copy
tensor views. With weights in memory, the model's own tensors are used in place and the
program counts them, with the activations, against the RAM budget.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _core
from ..observe.units import format_bytes
from ..planning.streaming import StreamingPlan, WeightsFile
from .program_runner import ProgramRunner


class PlaneProgram:
    """A CPU plan's Program bound to its data plane and kernels; shared by concurrent calls
    (the core's ledger admits each only with room for its working set)."""

    def __init__(
        self,
        runner: ProgramRunner,
        plan: StreamingPlan,
        weights: WeightsFile | None = None,
        io: _core.IoEngine | None = None,
        reads: str = "",
    ) -> None:
        """`weights` and `io`: the file the weights stream from and the engine reading it
        (`reads` says how it reads, for explain()); None when the weights are the model's
        own tensors in memory."""
        self.runner = runner
        self.plan = plan
        self.weights = weights
        self.io = io
        self.reads = reads
        self.plane = _core.DataPlane(plan.program, io, workers=max(1, plan.program.queues[0].capacity - 1))
        if weights is not None:
            self.resident_tensors = self._load_residents()
            runner.rebind(self.bound_values())

    def predicted_s(self) -> float:
        """The simulated duration of one call (0 when the program carries no predictions)."""
        return max((i.predicted_end_us for i in self.plan.program.schedule.instructions), default=0.0) / 1e6

    @property
    def streams(self) -> bool:
        return self.weights is not None

    def _load_residents(self) -> dict[int, torch.Tensor]:
        """Reads every resident weight into the resident arena, once; returns their views."""
        memory = self.plane.resident_memory()
        tensors = {}
        for slot, buffer in self.plan.resident.items():
            place = self.weights.ranges[slot]
            view = self.plane.view(memory, buffer)
            if place.nbytes:
                self.io.read_into(self.weights.path, place.offset, view)
            tensors[slot] = view.view(place.dtype).reshape(place.shape)
        return tensors

    def describe(self) -> list[str]:
        """explain()'s lines: what streams, the prefetch distance, the memory plan and the program."""
        plan, program = self.plan, self.plan.program
        memory = program.memory_plan
        if self.weights is None:
            return [
                f"Data plane (ram budget {format_bytes(plan.budget_bytes)}): the model's own weights used in place; "
                f"{format_bytes(memory.arena_bytes[0])} at most, {format_bytes(memory.peak_bytes[0])} live at the "
                "peak in plan order",
                "",
                *self._program_lines(),
            ]
        resident = sum(self.weights.ranges[slot].nbytes for slot in plan.resident)
        lines = [
            f"Weights streamed from disk (ram_budget_bytes={plan.budget_bytes}, {format_bytes(plan.budget_bytes)})",
            f"  file: {self.weights.path}",
            f"  prefetch distance: {plan.prefetch} (the largest of 2, 1, 0 that fits, or as configured); "
            f"loads in flight: {program.queues[1].capacity}; reads: {self.reads}",
            f"  predicted per call: {self.predicted_s() * 1e3:.2f} ms (the simulator; regions at their roofline "
            "from a measured GEMM rate and memory bandwidth, loads at the measured read speed)",
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
        return lines + ["", *self._program_lines()]

    def _program_lines(self) -> list[str]:
        lines = ["Schedule: the data plane's program (instruction, queue, kind, label, deps)"]
        for instruction in self.plan.program.schedule.instructions:
            deps = ",".join(str(d) for d in instruction.deps) or "-"
            lines.append(
                f"  {instruction.id:>4} {instruction.device:<4} {str(instruction.kind).split('.')[-1]:<8} "
                f"{instruction.label:<40} after {deps}"
            )
        return lines

    def bound_values(self) -> list[torch.Tensor | None]:
        """The program's bound slots: resident views, None where a weight streams."""
        return [self.resident_tensors.get(slot) for slot in range(self.runner.bound_count)]

    def run(self, flat_inputs: list[Any], token: _core.CancelToken, stall_timeout_s: float, timeout_s: float):
        """One call: returns (outputs, run report, per-tier peak bytes)."""
        plane, plan = self.plane, self.plan
        memory = plane.begin_call(timeout_s)
        try:
            call = self.runner.new_call(flat_inputs)
            env = call.env

            def compute(instruction_id: int) -> None:
                torch.set_grad_enabled(False)  # grad mode is per thread
                region = plan.region_of[instruction_id]
                weights = plan.streamed.get(region, ())
                arenas = []
                for weight in weights:
                    view = plane.view(memory, weight.buffer)
                    arenas.append((view.data_ptr(), view.data_ptr() + view.numel()))
                    env[weight.slot] = view.view(weight.dtype).reshape(weight.shape)
                call.run_region(region)
                for weight in weights:
                    env[weight.slot] = None
                if arenas:
                    _copy_out_aliases(env, self.runner.kernels[region].out_slots, arenas)

            with torch.no_grad():  # the caller's thread computes too; its grad mode comes back after
                report = plane.run(memory, compute, stall_timeout_s=stall_timeout_s, cancel=token)
            outputs = call.finish()
            return outputs, report, list(memory.peak_bytes)
        finally:
            plane.end_call(memory)


def _copy_out_aliases(env: list, out_slots: tuple[int, ...], arenas: list[tuple[int, int]]) -> None:
    """A region output that views a streamed weight (a transpose, a reshape, the weight
    itself) is copied out: the weight's bytes are reused by a later load."""
    for slot in out_slots:
        value = env[slot]
        if isinstance(value, torch.Tensor) and value.numel():
            address = value.untyped_storage().data_ptr()
            if any(begin <= address < end for begin, end in arenas):
                env[slot] = value.clone()
