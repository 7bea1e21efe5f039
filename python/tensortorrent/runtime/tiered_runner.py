"""Runs a lowered plan whose regions live on several memory tiers (virtual devices).

Every value has a slot and a tier. A transfer copies tensors into new slots (real bytes
copied) and then waits out the rest of its link's declared time; a computation on a
virtual device runs the region's kernel on the CPU and waits out the rest of the
device's declared time. Each virtual device's memory is accounted: a step takes room for
what it writes when it starts, a value gives it back after its last reader, and going
over the capacity raises MemoryCapacityError. Resident parameters are the host tensors
themselves, counted once against the device; streamed ones are copied on every call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..errors import MemoryCapacityError
from ..observe.units import format_bytes
from ..planning.lowering import LoweredPlan
from ..planning.machine import RAM
from .program_runner import ProgramRunner, detach_outputs


class DeviceMemory:
    """One virtual device's memory: what it holds now, its peak, and its capacity."""

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self.held = 0
        self.peak = 0
        self._lock = threading.Lock()

    def allocate(self, nbytes: int, what: str) -> None:
        with self._lock:
            if self.held + nbytes > self.capacity:
                raise MemoryCapacityError(
                    f"virtual device {self.name}: {what} needs {nbytes} bytes ({format_bytes(nbytes)}) but "
                    f"{self.held} of its {self.capacity} bytes ({format_bytes(self.capacity)}) are in use"
                )
            self.held += nbytes
            self.peak = max(self.peak, self.held)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.held -= nbytes

    def reset_peak(self) -> None:
        with self._lock:
            self.peak = self.held


class TieredProgram:
    """A lowered plan bound to its kernels and device memories; shared by the calls,
    which run one at a time (a device's memory holds one call's working set)."""

    def __init__(self, runner: ProgramRunner, lowered: LoweredPlan, tier_names, tier_capacities) -> None:
        self.runner = runner
        self.lowered = lowered
        self.call_lock = threading.Lock()
        self.memories = {
            tier: DeviceMemory(tier_names[tier], tier_capacities[tier]) for tier in range(1, len(tier_names))
        }
        for alias, _ in lowered.aliases:
            tier = lowered.slot_tier[alias]
            self.memories[tier].allocate(lowered.slot_bytes[alias], "keeping parameters resident")

    def new_call(self, flat_inputs: list[Any]) -> TieredCall:
        for memory in self.memories.values():
            memory.reset_peak()
        return TieredCall(self, flat_inputs)

    def peaks(self) -> dict[str, int]:
        """Each device's peak bytes during the last call (resident parameters included)."""
        return {memory.name: memory.peak for memory in self.memories.values()}


class TieredCall:
    """One call's values. Its steps may run on several threads."""

    def __init__(self, program: TieredProgram, flat_inputs: list[Any]) -> None:
        lowered, runner = program.lowered, program.runner
        env: list[Any] = runner.new_call(flat_inputs).env
        env.extend([None] * (lowered.slot_count - len(env)))
        for alias, bound in lowered.aliases:
            env[alias] = env[bound]
        self._program = program
        self.env = env
        self._readers_left = list(lowered.readers)
        self._held: set[int] = set()  # slots on a device whose bytes are counted
        self._lock = threading.Lock()
        self._running = 0  # steps in progress
        self._on_idle: Callable[[], None] | None = None  # set by end() while steps still run

    def run_step(self, step_id: int) -> None:
        """Runs step `step_id` on a thread of the executor; its inputs must be ready."""
        with self._lock:
            self._running += 1
        try:
            self._run_step(step_id)
        finally:
            with self._lock:
                self._running -= 1
                on_idle = self._on_idle if self._running == 0 else None
                if on_idle is not None:
                    self._on_idle = None
            if on_idle is not None:
                on_idle()

    def _run_step(self, step_id: int) -> None:
        torch.set_grad_enabled(False)  # grad mode is per thread
        start = time.perf_counter()
        program, env = self._program, self.env
        lowered = program.lowered
        step = lowered.steps[step_id]
        if step.tier != RAM:
            nbytes = sum(lowered.slot_bytes[s] for s in step.dst_slots)
            program.memories[step.tier].allocate(nbytes, step.label)
            with self._lock:
                self._held.update(step.dst_slots)
        if step.kind == "compute":
            outputs = program.runner.kernels[step.region].forward(*[env[s] for s in step.src_slots])
            for slot, value in zip(step.dst_slots, outputs):
                env[slot] = value
        else:
            for source, target in zip(step.src_slots, step.dst_slots):
                value = env[source]
                env[target] = value.clone() if isinstance(value, torch.Tensor) else value
        remaining = step.declared_s - (time.perf_counter() - start)
        if remaining > 0:
            time.sleep(remaining)  # the declared device or link is slower than the CPU
        self._release(step.src_slots)

    def _release(self, slots: tuple[int, ...]) -> None:
        lowered = self._program.lowered
        with self._lock:
            for slot in slots:
                self._readers_left[slot] -= 1
                if self._readers_left[slot] == 0 and lowered.freeable[slot]:
                    self.env[slot] = None
                    self._give_back(slot)

    def _give_back(self, slot: int) -> None:
        """Returns a slot's bytes to its device (the caller holds the lock)."""
        if slot in self._held:
            self._held.discard(slot)
            lowered = self._program.lowered
            self._program.memories[lowered.slot_tier[slot]].release(lowered.slot_bytes[slot])

    def finish(self) -> Any:
        """Applies buffer mutations and assembles the user's output structure from RAM."""
        lowered, env = self._program.lowered, self.env
        for slot, buffer in lowered.mutations:
            buffer.copy_(env[slot])
        flat = [env[slot] if slot is not None else constant for slot, constant in lowered.outputs]
        return detach_outputs(pytree.tree_unflatten(flat, self._program.runner.out_spec))

    def end(self, release: Callable[[], None], steps_may_run: bool) -> None:
        """Ends the call: gives back the device memory it still holds, then calls `release`
        (which lets the next call start). With `steps_may_run` (after a stall), both wait
        until the last step still running returns, so no two calls ever share a device."""

        def finish() -> None:
            with self._lock:
                for slot in list(self._held):
                    self._give_back(slot)
            release()

        with self._lock:
            if steps_may_run and self._running:
                self._on_idle = finish
                return
        finish()
