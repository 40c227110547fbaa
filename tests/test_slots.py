"""The slot pool hands out the lowest free slots first and refuses a double free or an overdraft."""

from __future__ import annotations

import pytest

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
