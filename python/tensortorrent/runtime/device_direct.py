"""The direct path on a device: a plan whose every region is resident on one accelerator
runs without the executor.

Its weights are held in the device's memory once, when the module is built (and copied
again where training changed them: runtime/held_weights.py). A call
copies its inputs to the device, runs the regions in order on the calling thread (their
kernels queue on the device as torch launches them, with no synchronisation between
regions) and copies the outputs back to host memory, as every other plan returns them.
After WARM_UP_CALLS calls, where the device's backend records graphs (CUDA), the
regions' kernels are captured once into a graph over fixed input tensors (an input that
is not a tensor, a flag such as `use_cache=False`, is a constant every call repeats, and
the graph fixes it too), and later calls copy their inputs into those, replay the graph
and copy its outputs out: one launch instead of one per kernel. A graph that cannot be
captured (a region that synchronizes with the host) leaves the path as it was, and
`describe()` says why.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..backends.interface import CapturedGraph, DeviceBackend
from .held_weights import HeldWeights
from .program_runner import ProgramRunner

WARM_UP_CALLS = 2  # calls run as launched before a graph is captured (lazy initialisations done)


class DeviceDirect:
    """Calls of a plan resident on device `index` of `backend`, run inline there."""

    def __init__(self, runner: ProgramRunner, backend: DeviceBackend, index: int, name: str) -> None:
        self._backend, self._index, self.name = backend, index, name
        self._device = backend.torch_device(index)
        self.held = HeldWeights()
        held = [self.held.hold(backend, index, v) if isinstance(v, torch.Tensor) else v for v in runner.bound_values]
        self._runner = runner.on(self._device, held)
        self._calls = 0
        self._graph: CapturedGraph | None = None
        self._graph_inputs: list[Any] = []
        self._graph_state = f"not captured yet (after {WARM_UP_CALLS} calls)"
        self._lock = threading.Lock()  # the graph's input and output tensors serve one call at a time

    def run(self, flat_inputs: list[Any]) -> Any:
        """One call: its outputs in host memory."""
        with torch.no_grad():
            if self._graph is None and self._calls >= WARM_UP_CALLS:
                with self._lock:
                    if self._graph is None and self._graph_state.startswith("not captured yet"):
                        self._capture(flat_inputs)
            if self._graph is not None:
                with self._lock:
                    return self._replay(flat_inputs)
            self._calls += 1
            outputs = self._runner.run_inline([self._there(value) for value in flat_inputs])
            return pytree.tree_map_only(torch.Tensor, lambda t: t.to("cpu"), outputs)

    def _there(self, value: Any) -> Any:
        return value.to(self._device) if isinstance(value, torch.Tensor) else value

    def _capture(self, flat_inputs: list[Any]) -> None:
        # Tensors get static copies the replays refill; any other input is a constant the
        # signature holds every call to (capture/signature.py), so the graph may fix it.
        inputs = [
            self._backend.empty_like(self._index, value).copy_(value) if isinstance(value, torch.Tensor) else value
            for value in flat_inputs
        ]
        try:
            graph = self._backend.capture(self._index, lambda: self._runner.run_inline(inputs))
        except Exception as error:  # a region the device cannot record: run as launched
            self._graph_state = f"not captured: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
            return
        if graph is None:
            self._graph_state = f"not captured: the {self._backend.kind} backend records no graphs"
            return
        self._graph, self._graph_inputs = graph, inputs
        self._graph_state = f"captured after {WARM_UP_CALLS} calls, replayed since"

    def _replay(self, flat_inputs: list[Any]) -> Any:
        for target, value in zip(self._graph_inputs, flat_inputs):
            if isinstance(target, torch.Tensor):
                target.copy_(value, non_blocking=True)
        self._graph.replay()
        # Copies, even in host memory: the next replay rewrites the graph's outputs.
        return pytree.tree_map_only(torch.Tensor, lambda t: t.to("cpu", copy=True), self._graph.outputs)

    def describe(self) -> str:
        return (
            f"every region resident on {self.name}: inputs copied there, the regions run in order on the "
            f"calling thread with no executor round trip, outputs copied back; graph: {self._graph_state}"
        )


def device_direct(runner: ProgramRunner, plan) -> DeviceDirect:
    """The direct path of `plan` (an ExecutionPlan whose regions are all resident on one accelerator)."""
    placement = plan.placement
    device = placement.machine.devices[placement.chosen.devices[0]]
    return DeviceDirect(runner, device.backend, device.index, device.name)
