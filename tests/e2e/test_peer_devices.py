"""Several devices: a plan spread over them, values crossing between two peers over their
direct link (one Copy on "a->b"), between others staged through RAM (d2h, then h2d);
the planner counts the peer link, explain() shows it, and bad peer declarations are named."""

from __future__ import annotations

import pytest
import torch
from e2e.test_peaks import simulated_peaks
from e2e.test_virtual_devices import BATCH, LAYER_BYTES, WIDTH, Stack

import tensortorrent as tt
from conftest import assert_parity

ACTIVATION_BYTES = BATCH * WIDTH * 4
HOST_LINK = 2e6  # bytes/s: slow, so that staging through RAM costs what a test can see
PEER_LINK = 1e9


def device(name: str, layers: float, **extra) -> tt.VirtualDevice:
    """A device with room for about `layers` resident layers besides its streaming room."""
    return tt.VirtualDevice(name, memory_bytes=int(layers * LAYER_BYTES), flops=1e9, link_bandwidth=HOST_LINK, **extra)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Stack().eval()


def run_on(model, machine, devices):
    x = torch.randn(BATCH, WIDTH)
    compiled = assert_parity(model, (x,), devices=devices, machine=machine)
    compiled(x)
    copies = [(r.device, r.bytes) for r in compiled.last_report.records if r.kind == "copy"]
    return compiled, copies


def test_values_between_peers_cross_their_link_and_others_are_staged_through_ram(model):
    # Each device holds two layers: the model spreads over all three, resident. Orders with
    # the peers side by side tie (the same copies), so which one the planner picks is free.
    machine = [device("a", 3.2, peers={"b": PEER_LINK}), device("b", 3.2), device("c", 3.2)]
    compiled, copies = run_on(model, machine, ["a", "b", "c"])
    order = compiled.region_devices[::2]
    assert compiled.region_devices == [name for name in order for _ in range(2)]
    assert sorted(order) == ["a", "b", "c"] and abs(order.index("a") - order.index("b")) == 1
    assert all(compiled._plan.placement.chosen.resident)
    expected = [(f"{order[0]}.h2d", ACTIVATION_BYTES)]  # the input
    for left, right in zip(order, order[1:]):
        if {left, right} == {"a", "b"}:
            expected.append((f"{left}->{right}", ACTIVATION_BYTES))  # peers: one copy over their own link
        else:
            expected += [(f"{left}.d2h", ACTIVATION_BYTES), (f"{right}.h2d", ACTIVATION_BYTES)]  # through RAM
    expected.append((f"{order[-1]}.d2h", ACTIVATION_BYTES))  # the output
    assert copies == expected
    assert list(compiled.last_peak_bytes.values()) == simulated_peaks(compiled)[:4]
    explained = compiled.explain()
    assert "peer link a <-> b: 1 GB/s each way" in explained
    assert "peer link b <-> c" not in explained and "peer link a <-> c" not in explained


def test_a_peer_link_declared_on_either_side_joins_both_ways(model):
    torch.manual_seed(1)
    reversed_model = Stack(layers=4).eval()
    # b declares a; the values go b -> a when the planner starts on b, a -> b otherwise.
    machine = [device("a", 3.2), device("b", 3.2, peers={"a": PEER_LINK})]
    compiled, copies = run_on(reversed_model, machine, ["a", "b"])
    assert set(compiled.region_devices) == {"a", "b"}
    crossing = [name for name, _ in copies if name in ("a->b", "b->a")]
    assert len(crossing) == 1 and not any(name in ("a.d2h", "b.h2d") for name, _ in copies[1:-1])


def test_the_planner_counts_the_peer_link(model):
    peered = [device("a", 4.5, peers={"b": PEER_LINK}), device("b", 4.5)]
    staged = [device("a", 4.5), device("b", 4.5)]
    with_peers, _ = run_on(model, peered, ["a", "b"])
    without, copies = run_on(model, staged, ["a", "b"])
    assert {"a", "b"} <= set(with_peers.region_devices) and {"a", "b"} <= set(without.region_devices)
    assert ("a.d2h", ACTIVATION_BYTES) in copies
    # Staging one activation through RAM takes two host-link copies where the peer link takes one.
    saved = without._plane.predicted_s() - with_peers._plane.predicted_s()
    assert saved == pytest.approx(2 * ACTIVATION_BYTES / HOST_LINK - ACTIVATION_BYTES / PEER_LINK, rel=0.02)


def test_bad_peer_declarations_are_named(model):
    with pytest.raises(tt.ConfigValueError, match=r"VirtualDevice\('a'\).peers: a device is not its own peer"):
        device("a", 2, peers={"a": 1e9})
    with pytest.raises(tt.ConfigValueError, match=r"VirtualDevice\('a'\).peers\['b'\]: expected a finite number > 0"):
        device("a", 2, peers={"b": 0})
    with pytest.raises(tt.ConfigTypeError, match=r"peers: expected a mapping of device names to bytes/s, got 'b'"):
        device("a", 2, peers="b")
    with pytest.raises(tt.InvalidArgumentError, match=r"'a' declares peers \['z'\] that the machine does not declare"):
        tt.compile(model, (torch.randn(BATCH, WIDTH),), devices=["a"], machine=[device("a", 8, peers={"z": 1e9})])
    assert device("a", 2, peers={"c": 2e9, "b": 1e9}).peers == (("b", 1e9), ("c", 2e9))
