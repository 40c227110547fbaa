"""The slot pool: which cache rows are free.

Scope: bookkeeping of integer slots (a KV slot holds one token position of one request; a state slot
holds one request's convolution window and recurrent state). Allocation is per token (KV) or per
request (state), lowest numbers first, so traces are easy to follow.
A slot can have more than one holder: the prefix cache (``prefix_cache.py``) shares the KV slots of a
cached prompt with every request that reuses it (``share``); the slot is free again when its last holder
gives it back. Non-scope: the tensors behind the slots (``cache.py``), and when a slot may be given back
(the engine decides: only after no launched round still reads or writes it).
"""

from __future__ import annotations

import heapq


class SlotPoolExhausted(RuntimeError):
    """Raised when more slots are asked for than are free (the scheduler checks first)."""


# --8<-- [start:slot_pool]
class SlotPool:
    """A fixed number of slots, handed out lowest-number first and returned exactly once per holder.

    Its memory follows the slots handed out, not the capacity: the slots never handed out are the range
    from ``_next_unused`` to ``capacity``, so a pool of 10**12 slots costs nothing until it is used.
    """

    def __init__(self, capacity: int, name: str = "kv") -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"{name} slot capacity must be an integer >= 1, got {capacity!r}")
        self.name = name
        self.capacity = capacity
        self._returned: list[int] = []  # a heap of slots given back, all below ``_next_unused``
        self._next_unused = 0
        self._in_use: dict[int, int] = {}  # slot -> holders (1 unless shared)

    @property
    def num_free(self) -> int:
        return len(self._returned) + self.capacity - self._next_unused

    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise SlotPoolExhausted(f"{self.name}: asked for {n} slots, {self.num_free} free")
        slots = [self._take_lowest() for _ in range(n)]
        self._in_use.update(dict.fromkeys(slots, 1))
        return slots

    def _take_lowest(self) -> int:
        if self._returned:  # every slot given back is below the never-used ones
            return heapq.heappop(self._returned)
        self._next_unused += 1
        return self._next_unused - 1

    def free(self, slots: list[int]) -> None:
        for slot in slots:
            if slot not in self._in_use:  # a double free would hand one slot to two requests
                raise ValueError(f"{self.name}: slot {slot} is not in use")
            self._in_use[slot] -= 1
            if self._in_use[slot] == 0:  # its last holder gave it back
                del self._in_use[slot]
                heapq.heappush(self._returned, slot)
# --8<-- [end:slot_pool]

    def share(self, slots: list[int]) -> None:
        """Add a holder to slots in use (the prefix cache, or a request reusing a cached prefix)."""
        for slot in slots:
            if slot not in self._in_use:
                raise ValueError(f"{self.name}: slot {slot} is not in use, so it cannot be shared")
            self._in_use[slot] += 1

    def holders(self, slot: int) -> int:
        """How many holders a slot has (0: free). A slot with more than one is never written."""
        return self._in_use.get(slot, 0)

    def __repr__(self) -> str:
        return f"SlotPool({self.name}: {self.num_free}/{self.capacity} free)"
