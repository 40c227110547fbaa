"""The slot pool hands out the lowest free slots first, refuses a double free or an overdraft, and holds
memory for the slots in use only."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_deepinfer.core.slots import SlotPool, SlotPoolExhausted


def test_slots_are_handed_out_lowest_first_and_reused_lowest_first():
    pool = SlotPool(4)
    assert pool.allocate(3) == [0, 1, 2]
    pool.free([1, 0])
    assert pool.allocate(2) == [0, 1]
    assert pool.num_free == 1


def test_a_double_free_is_refused_and_changes_nothing():
    pool = SlotPool(2)
    slots = pool.allocate(1)
    pool.free(slots)
    with pytest.raises(ValueError, match="not in use"):
        pool.free(slots)
    assert pool.num_free == 2


def test_asking_for_more_slots_than_are_free_is_refused():
    pool = SlotPool(2)
    pool.allocate(2)
    with pytest.raises(SlotPoolExhausted):
        pool.allocate(1)


@pytest.mark.parametrize("capacity", [0, -1, 1.5])
def test_capacity_must_be_a_positive_integer(capacity):
    with pytest.raises(ValueError, match="capacity"):
        SlotPool(capacity)


def test_a_pool_of_a_trillion_slots_holds_only_the_slots_handed_out():
    tracemalloc.start()
    pool = SlotPool(10**12)
    assert pool.allocate(3) == [0, 1, 2]
    pool.free([1])
    assert pool.allocate(2) == [1, 3]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert pool.num_free == 10**12 - 4
    assert peak < 100_000, f"{peak} bytes for four slots in use"


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.booleans(), st.integers(0, 12)), max_size=40))
def test_any_sequence_of_allocations_and_frees_hands_out_the_lowest_free_slots(capacity, steps):
    pool, free = SlotPool(capacity), set(range(capacity))  # the model: the set of free slots
    in_use: list[int] = []
    for allocating, n in steps:
        if allocating and n <= len(free):
            slots = pool.allocate(n)
            assert slots == sorted(free)[:n]
            free -= set(slots)
            in_use += slots
        elif not allocating and in_use:
            given_back = in_use[n % len(in_use)::2]  # some of the slots in use, in no particular order
            pool.free(given_back)
            free |= set(given_back)
            in_use = [s for s in in_use if s not in given_back]
        assert pool.num_free == len(free)
