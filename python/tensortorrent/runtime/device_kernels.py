"""A region's kernels on accelerators, under CompileConfig.region_backend.

On the CPU a region runs what compile_regions chose before planning
(runtime/region_backends.py). On an accelerator it runs its captured graph retargeted to
that device (partition/region_module.on_device) or, where the mode asks, inductor's code
compiled for that device from the same graph: "inductor" always, "auto" where that code
ran faster than the graph on the device, the two timed side by side there on random
values of the region's shapes. oneDNN's products are the CPU's and never run on a device.

Which devices a region runs on is known only once the plan is made, so each device's
kernel is made the first time it is asked for, and kept: tt.compile makes them while it
builds the module, under the progress display. The plan itself weighed each device
region at its eager graph's measured time (hardware/accelerator.profiled): a region
inductor speeds up there is predicted slower than it runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import fx

from ..partition.region_module import on_device
from .region_backends import AUTO, EAGER, RegionChoice, compile_graph, example_inputs, faster_of


class DeviceKernels:
    """One region's kernel per accelerator it runs on, and the choice behind each."""

    def __init__(self, module: fx.GraphModule, in_nodes: Sequence[fx.Node], mode: str, index: int) -> None:
        self._module, self._in_nodes, self._mode, self._index = module, tuple(in_nodes), mode, index
        self._forwards: dict[str, Callable[..., tuple]] = {}
        self.choices: dict[str, RegionChoice] = {}  # per device ("cuda:0"), what the region runs there

    def forward(self, device: torch.device) -> Callable[..., tuple]:
        """The region's kernel on `device` (an accelerator), made on first use."""
        key = str(device)
        if key not in self._forwards:
            self.choices[key], self._forwards[key] = self._make(device)
        return self._forwards[key]

    def _make(self, device: torch.device) -> tuple[RegionChoice, Callable[..., tuple]]:
        module = on_device(self._module, device)
        if self._mode == EAGER:
            return RegionChoice(EAGER), module.forward
        choice, compiled = compile_graph(module, self._in_nodes, device, self._index)
        if compiled is None:
            return choice, module.forward
        if self._mode == AUTO:
            with torch.no_grad():
                args = example_inputs(self._in_nodes, device)
                choice = faster_of(choice, module.forward, compiled, args, sync=lambda: _synchronize(device))
        return choice, compiled if choice.backend != EAGER else module.forward


def accelerator_regions(placement) -> list[tuple[int, torch.device]]:
    """(region, torch device) for each region a placement (planning/placement.py) runs on a
    device with memory of its own: those whose kernels device_kernels makes."""
    found = []
    for region, chosen in enumerate(placement.chosen.devices):
        device = placement.machine.devices[chosen]
        if device.measured and device.own_memory:
            found.append((region, device.backend.torch_device(device.index)))
    return found


def _synchronize(device: torch.device) -> None:
    """Waits for the work queued on `device` (torch.cuda.synchronize for a CUDA one; a
    device type torch has no such module for computes as it is called)."""
    module = getattr(torch, device.type, None)
    if module is not None:
        module.synchronize(device)


def describe_device_kernels(kernels: Sequence[DeviceKernels]) -> list[str]:
    """explain()'s lines for the regions whose backend was chosen on an accelerator."""
    rows = [(index, device, choice) for index, k in enumerate(kernels) for device, choice in k.choices.items()]
    if all(choice == RegionChoice(EAGER) for _, _, choice in rows):  # eager asked for: nothing chosen
        return []
    lines = ["  On accelerators:"]
    for index, device, choice in rows:
        compile_s = "" if choice.compile_s is None else f", compiled in {choice.compile_s:.2f} s"
        times = (
            f" (eager {choice.eager_s * 1e3:.3f} ms, inductor {choice.inductor_s * 1e3:.3f} ms)"
            if choice.eager_s is not None and choice.inductor_s is not None
            else ""
        )
        note = f"  {choice.note}" if choice.note else ""
        lines.append(f"  r{index:<7} on {device}: {choice.backend}{compile_s}{times}{note}")
    return lines
