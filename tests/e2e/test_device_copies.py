"""Copies to and from devices on the devices' own queues (runtime/device_copies.py): they
complete from their link's waiter thread, a failure on a device fails the call and
leaves nothing held, and a device's memory as its backend counts it follows the plan."""

from __future__ import annotations

import gc
import threading

import pytest
import torch
from e2e.test_virtual_devices import LAYER_BYTES, Stack

import tensortorrent as tt
from tensortorrent.backends.host_memory import SyncQueue
from tensortorrent.runtime.device_copies import LinkWaiter


class LateEvent:
    """An event that completes when the test says so (a copy still in flight on a device)."""

    def __init__(self, failure: BaseException | None = None) -> None:
        self.released = threading.Event()
        self.failure = failure

    def done(self) -> bool:
        return self.released.is_set()

    def wait(self) -> None:
        self.released.wait(10)
        if self.failure is not None:
            raise self.failure


def test_a_link_waiter_completes_in_order_from_its_own_thread_and_ends_with_its_program():
    waiter = LinkWaiter("acc.h2d")
    first, second = LateEvent(), LateEvent(RuntimeError("device lost"))
    seen, threads, finished = [], set(), threading.Event()

    def record(name):
        def then(error):
            seen.append((name, error))
            threads.add(threading.current_thread().name)
            if len(seen) == 2:
                finished.set()

        return then

    waiter.after(first, record("first"))
    waiter.after(second, record("second"))
    second.released.set()  # done first, but its queue completes in order
    first.released.set()
    assert finished.wait(10)
    assert [name for name, _ in seen] == ["first", "second"]
    assert seen[0][1] is None and isinstance(seen[1][1], RuntimeError)
    assert threads == {"tt-acc.h2d"}
    thread = waiter._thread
    del waiter
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()


def small_device() -> tt.VirtualDevice:
    return tt.VirtualDevice("acc", memory_bytes=int(2.5 * LAYER_BYTES), flops=1e12, link_bandwidth=1e10)


@pytest.fixture
def streaming():
    torch.manual_seed(0)
    model = Stack(layers=4).eval()
    x = torch.randn(8, 256)
    compiled = tt.compile(model, (x,), devices=["acc"], machine=small_device())
    assert not all(compiled._plan.placement.chosen.resident)  # some weights are copied on every call
    return model, x, compiled


def device_allocated(compiled) -> int:
    backend, index = compiled._plane.devices["acc"]
    return backend.memory(index).allocated


def test_copies_complete_from_their_links_threads_and_give_the_devices_memory_back(streaming, monkeypatch):
    model, x, compiled = streaming
    completing = set()
    after = LinkWaiter.after

    def noting(self, event, then):
        def noted(error):
            completing.add(threading.current_thread().name)
            then(error)

        after(self, event, noted)

    monkeypatch.setattr(LinkWaiter, "after", noting)
    torch.testing.assert_close(compiled(x), model(x))
    copies = [r for r in compiled.last_report.records if r.kind == "copy"]
    assert copies and all(r.bytes > 0 for r in copies)
    assert completing and all(name.startswith("tt-acc.") for name in completing), completing
    # Between calls the backend holds no per-call copy, and a virtual device's residents are
    # the host tensors themselves: nothing is allocated.
    gc.collect()
    assert device_allocated(compiled) == 0


def test_a_copy_that_fails_on_its_device_fails_the_call_and_the_next_call_runs(streaming, monkeypatch):
    model, x, compiled = streaming
    plane = compiled._plane.plane
    resident = compiled._plane.plan.program.memory_plan.resident_bytes[1]
    failed = LateEvent(RuntimeError("device lost"))
    failed.released.set()
    monkeypatch.setattr(SyncQueue, "record", lambda self: failed)
    with pytest.raises(RuntimeError, match="device lost"):
        compiled(x)
    assert plane.held(1) == resident
    monkeypatch.undo()
    torch.testing.assert_close(compiled(x), model(x))
    gc.collect()
    assert device_allocated(compiled) == 0


def test_an_allocation_the_device_refuses_fails_the_call_naming_it(streaming, monkeypatch):
    model, x, compiled = streaming
    backend, _ = compiled._plane.devices["acc"]

    def refuse(index, nbytes):
        raise tt.MemoryCapacityError(f"acc: cannot allocate {nbytes} bytes")

    monkeypatch.setattr(backend, "allocate", refuse)
    with pytest.raises(tt.MemoryCapacityError, match="acc: cannot allocate"):
        compiled(x)
    monkeypatch.undo()
    torch.testing.assert_close(compiled(x), model(x))
