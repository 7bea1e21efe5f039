"""Copies between memories in a call that autograd records.

A copy's backward sends the gradient back over the reverse link, so it lands where the
copied value came from (a parameter in RAM gets the gradient of its copy on a device).
A weight copied to a device for one region is not kept there until backward: what the
region saves of it is packed as "copy it again", and backward copies it over the link
once more when it needs it, so a device holds the streamed weights of one region at a
time in backward as in forward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .device_copies import DeviceLink


class CopyOverLink(torch.autograd.Function):
    """A copy over a link whose backward sends the gradient back over `back` (d2h for an
    h2d copy, b->a for a->b)."""

    @staticmethod
    def forward(ctx, source: torch.Tensor, link: DeviceLink, back: DeviceLink) -> torch.Tensor:
        ctx.back = back
        return start_copy(link, source)  # completes for the executor when the link's event does

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return copied_now(ctx.back, grad), None, None


def start_copy(link: DeviceLink, value: torch.Tensor) -> torch.Tensor:
    """Enqueues a copy of `value` over `link`; returns its target."""
    target = link.empty_like(value)
    link.queue.copy(target, value)
    return target


def copied_now(link: DeviceLink, value: torch.Tensor) -> torch.Tensor:
    """A copy of `value` over `link`, complete when this returns. The kernels backward
    queued on both devices' current streams are waited for first: the link's queue does
    not wait for them, and they may still read the value (a gradient just computed) or the
    memory the caching allocator hands the copy's target (a weight copy backward freed
    while its kernels were still queued)."""
    for backend, index in {link.owner, link.target} - {None}:
        backend.synchronize(index)
    target = start_copy(link, value)
    link.queue.record().wait()
    return target


@dataclass(frozen=True)
class CopyAgain:
    """A saved view of a weight's device copy, as backward makes it again."""

    source: torch.Tensor  # the weight, where it lives
    link: DeviceLink
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int

    def unpack(self) -> torch.Tensor:
        return copied_now(self.link, self.source).as_strided(self.size, self.stride, self.offset)


class WeightCopies:
    """The device copies of weights one call made (buffer -> where each came from)."""

    def __init__(self) -> None:
        self._sources: dict[int, tuple[torch.Tensor, DeviceLink]] = {}

    def copied(self, buffer: int, source: torch.Tensor, link: DeviceLink) -> None:
        self._sources[buffer] = (source, link)

    @contextlib.contextmanager
    def saved_as_copies(self, reads: tuple[int, ...], values: list) -> Iterator[None]:
        """A block computing a region over `values` (its inputs, by buffer in `reads`) in
        which autograd saves its weight copies as CopyAgain. The copies are alive during
        the block, so their addresses name them."""
        copies = {
            value.untyped_storage().data_ptr(): self._sources[buffer]
            for buffer, value in zip(reads, values)
            if buffer in self._sources
        }
        if not copies:
            yield
            return

        def pack(tensor: torch.Tensor):
            found = copies.get(tensor.untyped_storage().data_ptr())
            if found is None:
                return tensor
            return CopyAgain(*found, tuple(tensor.size()), tuple(tensor.stride()), tensor.storage_offset())

        def unpack(saved):
            return saved.unpack() if isinstance(saved, CopyAgain) else saved

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield
