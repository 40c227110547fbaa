"""The slot pool: which cache rows are free.

Scope: bookkeeping of integer slots (a KV slot holds one token position of one request; a state slot
holds one request's convolution window and recurrent state). Allocation is per token (KV) or per
request (state), lowest numbers first, so traces are easy to follow.
Non-scope: the tensors behind the slots (``cache.py``), and when a slot may be given back
(the engine decides: only after no launched round still reads or writes it).
"""

from __future__ import annotations

import heapq


class SlotPoolExhausted(RuntimeError):
    """Raised when more slots are asked for than are free (the scheduler checks first)."""


# --8<-- [start:slot_pool]
class SlotPool:
    """A fixed number of slots, handed out lowest-number first and returned exactly once."""

    def __init__(self, capacity: int, name: str = "kv") -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"{name} slot capacity must be an integer >= 1, got {capacity!r}")
        self.name = name
        self.capacity = capacity
        self._free = list(range(capacity))  # a heap: the smallest free slot comes out first
        self._in_use: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise SlotPoolExhausted(f"{self.name}: asked for {n} slots, {len(self._free)} free")
        slots = [heapq.heappop(self._free) for _ in range(n)]
        self._in_use.update(slots)
        return slots

    def free(self, slots: list[int]) -> None:
        for slot in slots:
            if slot not in self._in_use:  # a double free would hand one slot to two requests
                raise ValueError(f"{self.name}: slot {slot} is not in use")
            self._in_use.remove(slot)
            heapq.heappush(self._free, slot)
# --8<-- [end:slot_pool]

    def __repr__(self) -> str:
        return f"SlotPool({self.name}: {self.num_free}/{self.capacity} free)"
