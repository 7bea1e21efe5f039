"""The timing harness every benchmark shares: the order of interleaved samples and the
paired ratio's confidence interval (no time is asserted)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return importlib.import_module("harness")


def test_each_round_runs_every_system_once_in_a_new_order(harness):
    order = []
    systems = {name: (lambda name=name: order.append(name)) for name in "ABC"}
    settings = harness.Settings(runs=30, sample_ns=1, warmup_ns=0)
    timings = harness.compare(systems, settings)
    del order[: len(order) - 90]  # the warm-up's calls
    rounds = [order[i : i + 3] for i in range(0, 90, 3)]
    assert all(sorted(r) == list("ABC") for r in rounds)
    # No system keeps its predecessor or its place, as a rotated fixed order would.
    for name in "ABC":
        assert {r[r.index(name) - 1] for r in rounds if r.index(name) > 0} == set("ABC") - {name}
        assert {r.index(name) for r in rounds} == {0, 1, 2}
    assert all(len(t["samples_us"]) == 30 for t in timings.values())
    # Seeded: a rerun times them in the same order.
    again = []
    harness.compare({name: (lambda name=name: again.append(name)) for name in "ABC"}, settings)
    assert again[-90:] == order


def test_the_paired_ratio_pairs_samples_of_the_same_round(harness):
    # Drift that hits both systems alike cancels: every round's ratio is 0.9.
    reference = [100.0, 200.0, 150.0, 300.0, 120.0]
    ratio = harness.paired_ratio([0.9 * r for r in reference], reference)
    assert ratio["median"] == pytest.approx(0.9)
    assert ratio["low"] == pytest.approx(0.9) and ratio["high"] == pytest.approx(0.9)


@pytest.mark.parametrize(("n", "rank"), [(5, 1), (21, 6), (41, 14)])
def test_the_interval_is_that_of_the_median_by_order_statistics(harness, n, rank):
    """Ranks from the binomial distribution: for 21 samples the 95% interval of the median
    runs from the 6th to the 16th smallest (tables of nonparametric statistics); with 5
    samples no narrower interval than the whole range has 95% coverage."""
    ratio = harness.paired_ratio([float(i) for i in range(1, n + 1)], [1.0] * n)
    assert (ratio["low"], ratio["high"]) == (rank, n + 1 - rank)
    assert ratio["median"] == (n + 1) / 2


def test_samples_of_unequal_counts_are_an_error(harness):
    with pytest.raises(ValueError):
        harness.paired_ratio([1.0, 2.0], [1.0])
