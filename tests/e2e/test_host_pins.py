"""Host memory for the devices' copies is registered with their backends once per program,
in place: the weights copied to a device on every call and the core's arenas, never per
call; a range a backend refuses stays pageable and is counted; everything registered is
released with the program. (A virtual device's backend keeps the ranges it was given in
`registered`, where a GPU's would page-lock them.)"""

from __future__ import annotations

import gc
import weakref

import torch
from e2e.test_virtual_devices import BATCH, WIDTH, Stack, compile_on, fast_small

from tensortorrent.backends.interface import PAGE
from tensortorrent.backends.virtual import VirtualBackend
from tensortorrent.runtime.host_pins import HostPins, page_spans


def covered(registered: dict[int, int], tensor: torch.Tensor) -> bool:
    start = tensor.untyped_storage().data_ptr()
    end = start + tensor.untyped_storage().nbytes()
    return any(address <= start and end <= address + nbytes for address, nbytes in registered.items())


def test_weights_copied_per_call_and_the_arenas_are_registered_once_and_released_with_the_program():
    torch.manual_seed(0)
    model = Stack().eval()
    compiled = compile_on(model, ["fast"], machine=[fast_small()])
    streamed = [r for r, resident in enumerate(compiled._plan.placement.chosen.resident) if not resident]
    assert streamed
    backend, _ = compiled._plane.devices["fast"]
    registered = backend.registered
    for region in streamed:
        for parameter in model.layers[region].parameters():
            assert covered(registered, parameter), f"layer {region}'s weights are not registered"
    x = torch.randn(BATCH, WIDTH)
    compiled(x)
    after_first = dict(registered)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), model(x))
    assert registered == after_first, "steady-state calls register nothing"
    assert len(compiled._plane.pins._owners) == 2, "the weights and the plane, kept once however many calls"
    plane = compiled._plane.plane
    memory = plane.begin_call(1.0)
    arenas = memory.host_arenas  # the resident arena and a pooled call arena, both used before
    plane.end_call(memory)
    del memory
    assert arenas and all(registered.get(address) == nbytes for address, nbytes in arenas)
    assert all(address % PAGE == 0 and nbytes % PAGE == 0 for address, nbytes in page_spans(model.parameters()))
    assert "page-locked in place" in compiled.explain()
    del compiled
    gc.collect()
    assert backend.registered == {}


def test_a_range_a_backend_refuses_is_counted_and_left_as_it_is():
    backend = VirtualBackend([fast_small()])
    weight = torch.randn(4096)
    ((address, nbytes),) = page_spans([weight])
    assert backend.register_host(address, nbytes)  # registered already, as by another program
    pins = HostPins([backend])
    pins.cover([(address, nbytes), (address, nbytes)], owner=weight)
    assert pins.refused_bytes == nbytes and pins.pinned_bytes == 0
    assert f"{nbytes} bytes refused by a backend" in pins.describe()
    del pins
    gc.collect()
    assert backend.registered == {address: nbytes}, "what it did not register, it does not release"


def test_pages_are_merged_where_storages_share_or_touch_them():
    block = torch.zeros(3 * PAGE, dtype=torch.uint8)
    a, b = block[:100], block[PAGE + 10 : PAGE + 20]  # views: one storage
    separate = torch.zeros(10, dtype=torch.uint8)
    spans = page_spans([a, b, separate])
    start = block.untyped_storage().data_ptr()
    assert any(s <= start and start + 3 * PAGE <= s + n for s, n in spans)
    assert len(spans) <= 2 and all(s % PAGE == 0 and n % PAGE == 0 for s, n in spans)


def test_only_the_pages_no_earlier_range_covered_are_registered():
    """As with a streaming plan's weights copied per call, which lie in the resident arena
    registered after them: CUDA refuses a page registered twice, and its refusal would
    surface as an error in later, unrelated kernels."""
    backend = VirtualBackend([fast_small()])
    block = torch.zeros(8 * PAGE, dtype=torch.uint8)
    ((start, _),) = page_spans([block])
    pins = HostPins([backend])
    pins.cover([(start + 2 * PAGE + 10, PAGE)], owner=block)  # a weight inside the arena: pages 2 and 3
    pins.cover([(start, 8 * PAGE)], owner=block)  # the arena: pages 0-1 and 4-7 are left
    assert sorted(backend.registered.items()) == [
        (start, 2 * PAGE),
        (start + 2 * PAGE, 2 * PAGE),
        (start + 4 * PAGE, 4 * PAGE),
    ]
    assert pins.refused_bytes == 0 and pins.pinned_bytes == 8 * PAGE
    assert not backend.register_host(start + 5 * PAGE + 1, 10), "the backend refuses a page registered already"


def test_memory_outlives_its_registration():
    """A program collected by reference counting drops its attributes in order: the pins
    keep each range's owner alive until the range is unregistered, so no range is unmapped
    (and its address reused) while still registered."""
    alive_at_release = []

    class Recording(VirtualBackend):
        def unregister_host(self, address: int) -> None:
            alive_at_release.append(owner_ref() is not None)
            super().unregister_host(address)

    backend = Recording([fast_small()])
    block = torch.zeros(4 * PAGE, dtype=torch.uint8)
    owner_ref = weakref.ref(block)
    pins = HostPins([backend])
    pins.cover(page_spans([block]), owner=block)
    del block
    assert owner_ref() is not None, "the pins hold the owner while its range is registered"
    del pins
    assert alive_at_release == [True] and owner_ref() is None and backend.registered == {}
