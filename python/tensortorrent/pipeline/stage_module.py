"""One pipeline stage as an nn.Module: a run of a program's regions over their weights."""

from __future__ import annotations

from typing import Any

from torch import fx, nn

from .cuts import Stage


class RegionStep(nn.Module):
    """One region's kernel with its weights as its own parameters and buffers (the same
    tensors, not copies, named after the model's), called with its other inputs."""

    def __init__(
        self, kernel: fx.GraphModule, reads: tuple[int, ...], weights: dict[int, tuple[str, Any, str]]
    ) -> None:
        super().__init__()
        self.kernel = kernel
        self._reads = reads
        self._weights: dict[int, str] = {}  # slot -> attribute name
        self.model_names: dict[str, str] = {}  # attribute name -> the weight's name in the model
        for slot in reads:
            if slot in weights and slot not in self._weights:
                name, tensor, kind = weights[slot]
                attribute = "weight__" + name.replace(".", "__")
                if kind == "parameter":
                    self.register_parameter(attribute, nn.Parameter(tensor, requires_grad=tensor.requires_grad))
                else:
                    self.register_buffer(attribute, tensor)
                self._weights[slot] = attribute
                self.model_names[attribute] = name
        self.activations = tuple(slot for slot in reads if slot not in weights)

    def forward(self, *activations: Any) -> tuple:
        values = dict(zip(self.activations, activations))
        values.update((slot, getattr(self, name)) for slot, name in self._weights.items())
        return self.kernel(*[values[slot] for slot in self._reads])


class StageModule(nn.Module):
    """Runs regions [stage.first, stage.end) of `runner`: takes the stage's input values
    (in stage.inputs order), returns its output values (in stage.outputs order). Each
    region is `regions.<k>`, a layer holding its weights, so a compile of this module
    cuts its regions where the program's were, and each streams its own weights."""

    def __init__(self, runner, stage: Stage, weights: dict[int, tuple[str, Any, str]]) -> None:
        """`weights`: per bound slot its regions read, (name in the model, tensor, kind)."""
        super().__init__()
        kernels = runner.kernels[stage.first : stage.end]
        self.regions = nn.ModuleList(RegionStep(k.module, k.in_slots, weights) for k in kernels)
        self._writes = [kernel.out_slots for kernel in kernels]
        self._inputs, self._outputs = stage.inputs, stage.outputs

    def forward(self, *inputs: Any) -> tuple:
        env: dict[int, Any] = dict(zip(self._inputs, inputs))
        for region, writes in zip(self.regions, self._writes):
            env.update(zip(writes, region(*[env[slot] for slot in region.activations])))
        return tuple(env[slot] for slot in self._outputs)

    def weight_names(self) -> dict[str, str]:
        """Each weight's name here (in the stage's artifact) -> its name in the model."""
        names = {}
        for index, region in enumerate(self.regions):
            for attribute, model_name in region.model_names.items():
                names.setdefault(f"regions.{index}.{attribute}", model_name)
        return names

    @property
    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.parameters(), *self.buffers()))
