"""One pipeline stage as an nn.Module: a run of a program's regions over their weights."""

from __future__ import annotations

from typing import Any

from torch import nn

from .cuts import Stage


class StageModule(nn.Module):
    """Runs regions [stage.first, stage.end) of `runner`: takes the stage's input values
    (in stage.inputs order), returns its output values (in stage.outputs order).

    The regions' weights are its own parameters and buffers (the same tensors, not
    copies), named after the model's; the regions are `regions.0`, `regions.1`..., so a
    compile of this module cuts its regions where the program's were.
    """

    def __init__(self, runner, stage: Stage, bound_names: list[str], bound_kinds: list[str]) -> None:
        super().__init__()
        kernels = runner.kernels[stage.first : stage.end]
        self.regions = nn.ModuleList(kernel.module for kernel in kernels)
        self._reads = [kernel.in_slots for kernel in kernels]
        self._writes = [kernel.out_slots for kernel in kernels]
        self._inputs, self._outputs = stage.inputs, stage.outputs
        self._weights: dict[int, str] = {}  # slot -> attribute name
        for slot in sorted({s for reads in self._reads for s in reads if s < runner.bound_count}):
            name = "weight__" + bound_names[slot].replace(".", "__")
            tensor = runner.bound_values[slot]
            if bound_kinds[slot] == "parameter":
                self.register_parameter(name, nn.Parameter(tensor, requires_grad=tensor.requires_grad))
            else:
                self.register_buffer(name, tensor)
            self._weights[slot] = name

    def forward(self, *inputs: Any) -> tuple:
        env: dict[int, Any] = dict(zip(self._inputs, inputs))
        env.update((slot, getattr(self, name)) for slot, name in self._weights.items())
        for region, reads, writes in zip(self.regions, self._reads, self._writes):
            env.update(zip(writes, region(*[env[slot] for slot in reads])))
        return tuple(env[slot] for slot in self._outputs)

    @property
    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.parameters(), *self.buffers()))
