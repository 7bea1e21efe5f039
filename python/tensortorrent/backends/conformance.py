"""The conformance checks every device backend passes: run them on a backend with
`check_backend(backend)` (a third party's test suite can call it as it is).

Each check exercises one promise of interface.py on every device of the backend, and a
failure raises ConformanceError naming the check, the device, what was expected and what
happened. Nothing is timed: the checks hold on a loaded machine.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch

from .interface import DeviceBackend, DeviceInfo, Event, MemoryUse

CHECK_BYTES = 1 << 20


class ConformanceError(AssertionError):
    pass


def _expect(condition: bool, check: str, device: str, message: str) -> None:
    if not condition:
        raise ConformanceError(f"{check} on {device}: {message}")


def _pattern(nbytes: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def check_discovery(backend: DeviceBackend, index: int, info: DeviceInfo) -> None:
    check, name = "discovery", info.name
    _expect(isinstance(info, DeviceInfo), check, name, f"devices() gave a {type(info).__name__}")
    _expect(info.kind == backend.kind, check, name, f"kind {info.kind!r}, its backend's is {backend.kind!r}")
    quiet = backend.devices(live=False)
    _expect(len(quiet) > index and quiet[index].name == name, check, name, "devices(live=False) lists other devices")
    for figure in (info.total_bytes, info.free_bytes):
        _expect(figure is None or (isinstance(figure, int) and figure >= 0), check, name, f"memory figure {figure!r}")


def check_memory(backend: DeviceBackend, index: int, info: DeviceInfo) -> None:
    check, name = "memory", info.name
    gc.collect()
    backend.reset_peak(index)
    before = backend.memory(index)
    _expect(isinstance(before, MemoryUse), check, name, f"memory() gave a {type(before).__name__}")
    _expect(before.peak == before.allocated, check, name, f"after reset_peak, peak {before.peak} != {before}")
    buffer = backend.allocate(index, CHECK_BYTES)
    _expect(buffer.dtype == torch.uint8 and buffer.numel() == CHECK_BYTES, check, name, f"allocate gave {buffer}")
    _expect(buffer.device == backend.torch_device(index), check, name, f"allocated on {buffer.device}")
    during = backend.memory(index)
    grown = during.allocated - before.allocated
    _expect(grown >= CHECK_BYTES, check, name, f"allocating {CHECK_BYTES} bytes grew `allocated` by {grown}")
    _expect(during.peak >= during.allocated, check, name, f"peak {during.peak} below allocated {during.allocated}")
    if during.total is not None:
        _expect(during.allocated <= during.total, check, name, f"{during.allocated} allocated of {during.total}")
    del buffer
    gc.collect()
    after = backend.memory(index)
    _expect(after.allocated == before.allocated, check, name, f"freed, `allocated` is {after.allocated}, was {before}")
    _expect(after.peak >= during.allocated, check, name, f"the peak forgot the allocation: {after}")


def check_pinned_host(backend: DeviceBackend, index: int, info: DeviceInfo) -> None:
    check, name = "pinned host memory", info.name
    host = backend.pinned_host(CHECK_BYTES)
    _expect(host.device.type == "cpu" and host.dtype == torch.uint8, check, name, f"pinned_host gave {host}")
    _expect(host.numel() == CHECK_BYTES, check, name, f"{host.numel()} bytes, asked for {CHECK_BYTES}")
    if backend.torch_device(index).type != "cpu":
        _expect(host.is_pinned(), check, name, "the host memory of a device that is not the CPU is not page-locked")


def check_round_trip(backend: DeviceBackend, index: int, info: DeviceInfo) -> None:
    """Host -> device on one queue, device -> host on another that waits for its event."""
    check, name = "copies and events", info.name
    source, target = backend.pinned_host(CHECK_BYTES), backend.pinned_host(CHECK_BYTES)
    source.copy_(_pattern(CHECK_BYTES, 1))
    target.zero_()
    on_device = backend.allocate(index, CHECK_BYTES)
    up, down = backend.queue(index), backend.queue(index)
    up.copy(on_device, source)
    arrived = up.record()
    _expect(isinstance(arrived, Event), check, name, f"record() gave a {type(arrived).__name__}")
    down.wait_for(arrived)
    down.copy(target, on_device)
    back = down.record()
    back.wait()
    _expect(back.done() and arrived.done(), check, name, "an event waited for is not done")
    _expect(torch.equal(target, source), check, name, "the bytes copied there and back differ")


def check_queue_order(backend: DeviceBackend, index: int, info: DeviceInfo) -> None:
    """Copies on one queue run in the order they were enqueued."""
    check, name = "queue order", info.name
    first, second = backend.pinned_host(CHECK_BYTES), backend.pinned_host(CHECK_BYTES)
    first.copy_(_pattern(CHECK_BYTES, 2))
    second.copy_(_pattern(CHECK_BYTES, 3))
    target = backend.pinned_host(CHECK_BYTES)
    on_device = backend.allocate(index, CHECK_BYTES)
    queue = backend.queue(index)
    queue.copy(on_device, first)
    queue.copy(on_device, second)
    queue.copy(target, on_device)
    queue.record().wait()
    _expect(torch.equal(target, second), check, name, "the last copy enqueued did not win")


def check_hold(backend: DeviceBackend, index: int, info: DeviceInfo) -> None:
    """A weight held in the device's memory keeps its values, and is a copy exactly where the
    device has memory of its own; holding what is there already changes nothing."""
    check, name = "hold", info.name
    weight = torch.arange(CHECK_BYTES // 4, dtype=torch.float32).reshape(16, -1)
    held = backend.hold(index, weight)
    device = backend.torch_device(index)
    _expect(held.device == device, check, name, f"the held tensor is on {held.device}, not {device}")
    _expect(torch.equal(held.cpu(), weight), check, name, "the held tensor's values differ")
    own = backend.has_own_memory(index)
    _expect(
        (held is not weight) == own,
        check,
        name,
        f"has_own_memory() is {own}, but holding a host tensor {'kept it' if held is weight else 'copied it'}",
    )
    _expect(backend.hold(index, held) is held, check, name, "holding a held tensor again made another copy")
    _expect(
        backend.one_off_queue(index) is backend.one_off_queue(index),
        check,
        name,
        "one_off_queue() made a new queue on a second call (holds would use up the device's streams)",
    )


def check_host_registration(backend: DeviceBackend, index: int, info: DeviceInfo) -> None:
    """Host memory registered in place is copied to the device whole (page-locked where the
    device is not the CPU and the backend says it registered it), and unregistered after."""
    check, name = "host registration", info.name
    host = _pattern(CHECK_BYTES, 5)
    registered = backend.register_host(host.data_ptr(), CHECK_BYTES)
    _expect(isinstance(registered, bool), check, name, f"register_host gave {registered!r}, expected a bool")
    try:
        if registered and backend.torch_device(index).type != "cpu":
            _expect(host.is_pinned(), check, name, "registered host memory is not page-locked")
        on_device = backend.allocate(index, CHECK_BYTES)
        queue = backend.queue(index)
        queue.copy(on_device, host)
        queue.record().wait()
        _expect(torch.equal(on_device.cpu(), host), check, name, "the bytes copied from registered memory differ")
    finally:
        if registered:
            backend.unregister_host(host.data_ptr())


def check_peer_copies(backend: DeviceBackend, index: int, info: DeviceInfo) -> None:
    """Each device it lists as a peer is one of the backend's, and a copy there on this
    device's queue arrives whole."""
    check, name = "peer copies", info.name
    names = [device.name for device in backend.devices(live=False)]
    for peer in info.peers:
        _expect(peer in names, check, name, f"peer {peer!r} is not one of its backend's devices {names}")
        source, target = backend.allocate(index, CHECK_BYTES), backend.allocate(names.index(peer), CHECK_BYTES)
        pattern = _pattern(CHECK_BYTES, 4)
        source.copy_(pattern)
        queue = backend.queue(index)
        queue.copy(target, source)
        queue.record().wait()
        _expect(torch.equal(target.cpu(), pattern), check, name, f"the bytes copied to peer {peer} differ")


def check_kernel_device(backend: DeviceBackend, index: int, info: DeviceInfo) -> None:
    check, name = "kernel device", info.name
    device = backend.torch_device(index)
    x = torch.arange(16, dtype=torch.float32, device=device)
    got = float((x * 2).sum().cpu())
    _expect(got == 240.0, check, name, f"a kernel on {device} computed {got}, expected 240.0")
    queue = backend.queue(index)
    with queue.launching():  # on the queue, then complete once an event after it is
        doubled = x * 2
    queue.record().wait()
    got = float(doubled.sum().cpu())
    _expect(got == 240.0, check, name, f"a kernel launched on a queue of {device} computed {got}, expected 240.0")


CHECKS: tuple[Callable[[DeviceBackend, int, DeviceInfo], None], ...] = (
    check_discovery,
    check_memory,
    check_pinned_host,
    check_round_trip,
    check_queue_order,
    check_hold,
    check_host_registration,
    check_peer_copies,
    check_kernel_device,
)


def check_backend(backend: DeviceBackend) -> list[str]:
    """Runs every check on every device of `backend`; returns "check: device" for each
    passed. Raises ConformanceError at the first failure, or when it has no devices."""
    if not isinstance(backend, DeviceBackend):
        raise ConformanceError(f"expected a tensortorrent DeviceBackend, got {type(backend).__name__}")
    devices = backend.devices()
    if not devices:
        raise ConformanceError(f"backend {backend.kind!r} has no devices to check")
    passed = []
    for index, info in enumerate(devices):
        for check in CHECKS:
            check(backend, index, info)
            passed.append(f"{check.__name__}: {info.name}")
    return passed
