"""The order that spreads a generative module's resident weights over the call."""

from tensortorrent.generation.shared_residents import spread_order


def test_every_prefix_of_the_spread_order_is_spread_evenly():
    order = spread_order(list(range(8)))
    assert sorted(order) == list(range(8))
    assert order[:2] == [0, 4]
    assert sorted(order[:4]) == [0, 2, 4, 6]  # every other one, not the first half


def test_counts_that_are_not_powers_of_two_keep_every_item_once():
    for count in (0, 1, 3, 5, 6, 36):
        order = spread_order(list(range(10, 10 + count)))
        assert sorted(order) == list(range(10, 10 + count))
    # Half of 12 layers' 36 same-sized weights (a Llama's MLPs): every other one.
    assert sorted(spread_order(list(range(36)))[:18]) == list(range(0, 36, 2))
