"""What a training program's regions leave for backward: the bytes autograd saves.

A call that autograd records keeps, until backward, the tensors each region's operations
save (a linear's input, an activation's output, a dropout's mask). They are part of the
call's memory like its activations, so the lowering gives each region a buffer of that
size on the region's tier, written by its Compute and held to the end of the call.
Weights and the call's inputs are not counted: they are held anyway (or, for a weight
copied to a device, copied again when backward needs it: runtime/autograd_copies.py).
Values saved by several regions, or also held as the program's buffers, are counted
each time: the figure is at most what autograd holds, never less.
"""

from __future__ import annotations

from typing import Any

import torch


def saved_bytes(runner, flat_inputs: list[Any]) -> tuple[int, ...]:
    """Per region of `runner`, the bytes autograd saves when it runs on `flat_inputs`
    with grad enabled (measured once, in host memory, leaving the caller's seed alone)."""
    held = {
        value.untyped_storage().data_ptr()
        for value in runner.bound_values + list(flat_inputs)
        if isinstance(value, torch.Tensor)
    }
    storages: dict[int, int] = {}  # the region running now's: address -> bytes

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in held:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    sizes = []
    with torch.random.fork_rng(), torch.enable_grad():
        call = runner.new_call(flat_inputs, grad=True)
        for index in range(len(runner.kernels)):
            storages.clear()
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
                call.run_region(index)
            sizes.append(sum(storages.values()))
    return tuple(sizes)
