"""Weights held on a device with memory of its own follow the model's tensors when they change."""

from __future__ import annotations

import torch

from tensortorrent.backends.host_memory import HostMemoryBackend
from tensortorrent.runtime.held_weights import HeldWeights, bring_back


class Copying(HostMemoryBackend):
    """One device whose held weights are copies, as a GPU's are."""

    kind = "copying"

    def __init__(self) -> None:
        super().__init__([None])

    def devices(self, live: bool = True):
        return []

    def hold(self, index: int, tensor: torch.Tensor) -> torch.Tensor:
        return self.empty_like(index, tensor).copy_(tensor)


def test_only_the_weights_changed_in_place_are_copied_again_where_they_are():
    backend, held = Copying(), HeldWeights()
    stepped, frozen = torch.zeros(4), torch.ones(8)
    copies = [held.hold(backend, 0, t) for t in (stepped, frozen)]
    addresses = [c.data_ptr() for c in copies]
    assert held.refresh() == 0, "nothing changed"
    with torch.no_grad():
        stepped.add_(2.0)  # as an optimizer step does
    assert held.refresh() == stepped.numel() * 4
    torch.testing.assert_close(copies[0], stepped)
    assert [c.data_ptr() for c in copies] == addresses, "copied in place: a captured graph still reads them"
    assert held.refresh() == 0


def test_a_weight_a_device_keeps_as_it_is_is_not_tracked():
    from tensortorrent.backends.cpu import CpuBackend

    held, weight = HeldWeights(), torch.ones(3)
    assert held.hold(CpuBackend(), 0, weight) is weight
    weight.add_(1.0)
    assert held.refresh() == 0


def test_programs_holding_one_tensor_share_its_copy_and_one_that_writes_it_is_brought_back_for_ram():
    backend, cache = Copying(), torch.zeros(4)
    writer, reader = HeldWeights(), HeldWeights()
    copy = writer.hold(backend, 0, cache, written=True)
    assert reader.hold(backend, 0, cache) is copy, "one copy per device"
    assert bring_back([cache]) == 0, "no call has written it yet"
    writer.refresh()  # a call of the program that writes it starts: the copy is the newer from now on
    copy.fill_(3.0)
    assert bring_back([torch.zeros(4)]) == 0 and not cache.any(), "only the tensors asked for"
    assert bring_back([cache]) == cache.nbytes and bool((cache == 3.0).all())
    assert reader.refresh() == 0, "the two agree: nothing to copy again"
    cache.add_(1.0)  # a program in RAM writes it: the device's copy follows before the next call there
    assert writer.refresh() == cache.nbytes and bool((copy == 4.0).all())
