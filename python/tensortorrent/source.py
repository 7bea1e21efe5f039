"""Source: what a build starts from, however the model arrived.

Four cases give one: a model's own tensors (tt.compile), those tensors written to the
weights cache to stream under a RAM budget, a checkpoint's files read in place, and a
saved artifact's weights file (read whole, or left on disk under a budget) or the files
it references. Each is a normalized program, the module tree its weights' names come
from, inputs of the compiled shapes, and where its weights are."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from .capture import InputSignature
from .capture.program import NormalizedProgram
from .errors import InvalidArgumentError
from .hardware.budgets import Budgets
from .planning.weights_on_disk import WeightsOnDisk
from .runtime.streamed_weights import weights_in_cache


@dataclass(frozen=True)
class Source:
    model: nn.Module  # the module tree the weights' names come from (holding them, where in RAM)
    model_name: str
    program: NormalizedProgram
    signature: InputSignature
    args: tuple  # inputs of the compiled shapes, run to time the regions
    kwargs: dict
    # The inputs were made up for their shapes (an artifact holds none): regions are timed
    # on them only where the placement depends on their times (devices to choose between).
    stand_in_inputs: bool = False
    layers: frozenset[str] = frozenset()  # module paths partitioning cuts at
    # Where the weights stay and stream from on every call; None: in RAM for the whole call.
    on_disk: WeightsOnDisk | None = None
    # The program's bound tensors hold the weights' values (not meta placeholders), so
    # regions can be timed with them.
    values_in_ram: bool = True
    model_forward: bool = False  # the model's own forward computes the program (an nn.Module given)
    checksum: bool = False  # read the files once first to record each range's CRC-32C (a checkpoint)
    verify: bool = False  # check the weights file's chunk digests before streaming (an artifact)
    origin: str = ""  # explain()'s line on where the module came from; "" for a model compiled here
    # Bound slots whose tensors other programs of the same model hold too (a generative
    # module's programs share one resident set): bound in RAM, never read from disk. A
    # program sharing (even an empty set) holds no weights of its own: the rest stream.
    shared_slots: frozenset[int] | None = None

    @property
    def streams(self) -> bool:
        return self.on_disk is not None

    def flat_inputs(self) -> list:
        return self.signature.flatten(self.args, self.kwargs)

    def cached(self, config, budgets: Budgets) -> Source:
        """This source with its weights written to (or found in) the weights cache, to
        stream from there (but the shared ones); the model keeps its own tensors."""
        on_disk = weights_in_cache(self.program, config, budgets.disk.amount, self.shared_slots or frozenset())
        return replace(self, on_disk=on_disk)

    def sharing(self, shared: dict[str, torch.Tensor] | None) -> Source:
        """This source with the weights named in `shared` bound to those tensors (held in
        RAM by whoever shares them), no longer read from disk; None: shares nothing."""
        if shared is None:
            return self
        bound, slots = list(self.program.bound), set()
        for index, tensor in enumerate(bound):
            value = next((shared[name] for name in tensor.names if name in shared), None)
            if value is None:
                continue
            if value.shape != tensor.tensor.shape or value.dtype != tensor.tensor.dtype:
                raise InvalidArgumentError(
                    f"shared weight {tensor.names[0]!r}: expected {tuple(tensor.tensor.shape)} {tensor.tensor.dtype}, "
                    f"got {tuple(value.shape)} {value.dtype}"
                )
            bound[index] = replace(tensor, tensor=value)
            slots.add(tensor.slot)
        on_disk = self.on_disk
        if on_disk is not None:
            on_disk = replace(on_disk, ranges={s: r for s, r in on_disk.ranges.items() if s not in slots})
        return replace(self, program=replace(self.program, bound=bound), on_disk=on_disk, shared_slots=frozenset(slots))
