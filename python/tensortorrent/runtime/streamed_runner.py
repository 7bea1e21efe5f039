"""Runs a streaming plan on the native data plane: residents loaded once, the rest read on every call.

The core holds the weights: residents in its resident arena (loaded at build time through
the I/O engine), streamed ones in each call's arena, written by `Load` instructions while
other regions compute. Region kernels see them as zero-copy tensor views. Python is
entered only for Compute instructions.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _core
from ..planning.streaming import StreamingPlan, WeightsFile
from .program_runner import ProgramRunner


class StreamedProgram:
    """A streaming plan bound to its data plane and kernels; shared by concurrent calls
    (the core's ledger admits each only with room for its working set)."""

    def __init__(self, runner: ProgramRunner, plan: StreamingPlan, weights: WeightsFile, io: _core.IoEngine) -> None:
        self.runner = runner
        self.plan = plan
        self.weights = weights
        self.io = io
        self.plane = _core.DataPlane(plan.program, io, workers=max(1, plan.program.queues[0].capacity - 1))
        self.resident_tensors = self._load_residents()
        runner.rebind(self.bound_values())

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
