"""The prefix cache: prompts indexed by their tokens, so a prompt that starts the same way skips that part.

Scope: the bookkeeping, no tensors. A finished prefill leaves its prompt in an index of *blocks*: block ``k``
holds the KV slots of positions ``kB .. kB + B - 1`` (``B`` = ``EngineConfig.prefix_block``) and, for a model
with recurrent layers, a *snapshot slot*: a copy of the convolution window and recurrent state after its last
token. The block that ends a prompt is shorter (a *tail*) and has a snapshot too. A new request walks the
index block by block and reuses everything up to the deepest block end that has a snapshot (the attention
layers can reuse any prefix of KV, a Gated DeltaNet layer only a state that was saved): it shares those KV
slots (``SlotPool.share``), starts its state from that snapshot, and prefills only the rest. So ``B`` is the
snapshot interval: a smaller one reuses more of a prompt that diverges inside a block, at the cost of more
snapshots (the bytes of one snapshot are ``HybridCache.snapshot_bytes()``).

Rules that keep shared state safe:

- a KV slot or snapshot slot in the index is never written: requests write only slots they were given
  fresh from the pool, and a prompt enters the index only after the round that computed it has been read;
- a running request holds a reference on every block it reuses, so no block it reads is evicted;
- eviction takes the least recently used block that no request holds and that no longer block extends
  (a leaf), and gives back only the slots that nobody else holds.

Why hashed blocks and not a radix tree: each block is found by one dictionary lookup on
``(parent block id, its tokens)``, which names the whole prefix before it, so matching, inserting and evicting
are a loop over blocks, not splits and merges of tree nodes. The block size is needed anyway as the snapshot
interval, so a radix tree's token-level matching would find longer matches that a hybrid model cannot use
(without a snapshot there); a model without recurrent layers (Qwen2) loses at most ``B - 1`` tokens of reuse.

Non-scope: copying tensors (the runner saves and restores snapshots; ``models/cache.py``), indexing output
tokens (only prompts are indexed: a multi-turn chat reuses the previous turn's prompt), and deciding when to
index or evict (``engine.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import count

from .slots import SlotPool

ROOT = 0
"""The parent id of a first block."""


@dataclass(eq=False)
class Block:
    """One indexed block: ``tokens`` at positions ``end - len(tokens) .. end - 1`` after its parent's prefix.

    Attributes:
        block_id: its id (its children's keys name it).
        parent: the parent block's id (``ROOT`` for a first block).
        tokens: its tokens (``B`` of them, fewer for the tail that ends a prompt).
        end: the length of the prefix it completes.
        slots: the KV slots of its positions; the index holds one reference on each.
        snapshot: the snapshot slot of the state after position ``end - 1`` (None: none was kept).
        refs: running requests that reuse it. ``children``: blocks that extend it. Evictable when both are 0.
        last_used: the tick of the last request that found or inserted it (LRU).
    """

    block_id: int
    parent: int
    tokens: tuple[int, ...]
    end: int
    slots: tuple[int, ...]
    snapshot: int | None
    refs: int = 0
    children: int = 0
    last_used: int = 0

    @property
    def key(self) -> tuple[int, tuple[int, ...]]:
        return (self.parent, self.tokens)


@dataclass(frozen=True)
class Hit:
    """What a prompt can reuse: its first ``length`` tokens, from ``blocks`` (root first)."""

    length: int = 0
    blocks: tuple[Block, ...] = ()

    @property
    def slots(self) -> list[int]:
        return [slot for block in self.blocks for slot in block.slots]

    @property
    def snapshot(self) -> int | None:
        """The snapshot slot to start the state from (None: no hit, or no recurrent state)."""
        return self.blocks[-1].snapshot if self.blocks else None


@dataclass
class Hold:
    """What one admitted request holds in the cache: the blocks it reuses, and the snapshot slots it was given
    for its own prompt (position -> slot) that are not indexed yet."""

    hit: Hit
    saves: dict[int, int] = field(default_factory=dict)


# --8<-- [start:prefix_cache]
class PrefixCache:
    """The index of cached prompt blocks, and the references requests hold on them.

    Args:
        kv_pool: the engine's KV slot pool (the index shares slots with the requests that wrote them).
        snapshot_pool: snapshot slots; None when the model keeps no recurrent state (any block end is then
            a reuse point, and nothing is saved).
        block: tokens per block, the snapshot interval.
    """

    def __init__(self, kv_pool: SlotPool, snapshot_pool: SlotPool | None, block: int) -> None:
        self.kv_pool, self.snapshot_pool, self.block = kv_pool, snapshot_pool, block
        self.blocks: dict[tuple[int, tuple[int, ...]], Block] = {}
        self.by_id: dict[int, Block] = {}
        self.holds: dict[str, Hold] = {}
        self._ids = count(ROOT + 1)
        self._clock = 0

    def usable(self, block: Block) -> bool:
        """A block end is a reuse point if the state there was saved (or there is no state to save)."""
        return self.snapshot_pool is None or block.snapshot is not None

    def match(self, tokens: Sequence[int]) -> Hit:
        """The longest reusable prefix of ``tokens``, leaving at least one token to compute (its logits)."""
        path, best, parent, pos = [], Hit(), ROOT, 0
        while pos + self.block < len(tokens):  # whole blocks, while one token is left after them
            block = self.blocks.get((parent, tuple(tokens[pos : pos + self.block])))
            if block is None:
                break
            path.append(block)
            parent, pos = block.block_id, block.end
            if self.usable(block):
                best = Hit(pos, tuple(path))
        for size in range(min(self.block - 1, len(tokens) - pos - 1), 0, -1):  # the tail of a cached prompt
            tail = self.blocks.get((parent, tuple(tokens[pos : pos + size])))
            if tail is not None and self.usable(tail):
                return Hit(tail.end, (*path, tail))
        return best
# --8<-- [end:prefix_cache]

    # --8<-- [start:acquire]
    def acquire(self, request_id: str, tokens: Sequence[int]) -> Hit:
        """Admit a request: reference the blocks it reuses and share their KV slots with it."""
        hit = self.match(tokens)
        self._clock += 1
        for block in hit.blocks:
            block.refs += 1
            block.last_used = self._clock
        self.kv_pool.share(hit.slots)  # the request gives them back like its own slots when it is released
        self.holds[request_id] = Hold(hit)
        return hit

    def save_points(self, request_id: str, start: int, end: int,
                    prompt_len: int) -> tuple[tuple[int, int], ...]:
        """Snapshot slots for the block ends (and the prompt's end) among positions ``start + 1 .. end``:
        ``(position, slot)`` pairs, the state after ``position`` tokens. Empty without recurrent state; a
        point is skipped when no slot is free even after evicting."""
        if self.snapshot_pool is None:
            return ()
        points = [p for p in range(start + 1, end + 1) if p % self.block == 0 or p == prompt_len]
        saves = self.holds[request_id].saves
        for position in points:
            if self.snapshot_pool.num_free == 0 and not self.evict_until(lambda: self.snapshot_pool.num_free):
                break
            saves[position] = self.snapshot_pool.allocate(1)[0]
        return tuple((p, saves[p]) for p in points if p in saves)
    # --8<-- [end:acquire]

    # --8<-- [start:insert]
    def insert(self, request_id: str, tokens: Sequence[int], slots: Sequence[int], computed: int) -> None:
        """Index the blocks of a prompt whose first ``computed`` tokens are in the cache (read back).

        A block already in the index (another request computed the same prefix) is kept, and this request's
        snapshot of it is given back; a new block takes a reference on its KV slots and the snapshot.
        """
        hold, parent, pos = self.holds[request_id], ROOT, 0
        self._clock += 1
        while pos < len(tokens):
            end = min(pos + self.block, len(tokens))
            if end > computed:
                break
            block = self.blocks.get((parent, tuple(tokens[pos:end])))
            snapshot = hold.saves.pop(end, None)
            if block is None:
                block = self._add(parent, tuple(tokens[pos:end]), end, tuple(slots[pos:end]), snapshot)
            elif snapshot is not None and block.snapshot is None:
                block.snapshot = snapshot
            elif snapshot is not None:
                self.snapshot_pool.free([snapshot])  # the index already has this state
            block.last_used = self._clock
            parent, pos = block.block_id, end

    def _add(self, parent: int, tokens: tuple[int, ...], end: int, slots: tuple[int, ...],
             snapshot: int | None) -> Block:
        block = Block(next(self._ids), parent, tokens, end, slots, snapshot)
        self.kv_pool.share(list(slots))
        self.blocks[block.key], self.by_id[block.block_id] = block, block
        if parent != ROOT:
            self.by_id[parent].children += 1
        return block
    # --8<-- [end:insert]

    # --8<-- [start:release_evict]
    def release(self, request_id: str) -> None:
        """A request is gone: drop its references, give back the snapshot slots it never indexed."""
        hold = self.holds.pop(request_id, None)
        if hold is None:
            return
        for block in hold.hit.blocks:
            block.refs -= 1
        if hold.saves:
            self.snapshot_pool.free(list(hold.saves.values()))

    def evict_until(self, enough: Callable[[], object], keep: Sequence[Block] = ()) -> bool:
        """Evict least recently used leaves that no request holds (nor ``keep``, a hit about to be taken)
        until ``enough()`` is true; False if it never is."""
        while not enough():
            leaves = [b for b in self.blocks.values() if b.refs == 0 and b.children == 0 and b not in keep]
            if not leaves:
                return False
            self._evict(min(leaves, key=lambda b: b.last_used))
        return True

    def _evict(self, block: Block) -> None:
        del self.blocks[block.key], self.by_id[block.block_id]
        if block.parent != ROOT:
            self.by_id[block.parent].children -= 1
        self.kv_pool.free(list(block.slots))  # returns to the pool only the slots no request still holds
        if block.snapshot is not None:
            self.snapshot_pool.free([block.snapshot])
    # --8<-- [end:release_evict]

    def clear(self) -> None:
        """Evict every block no request holds (with nothing running: the whole index)."""
        self.evict_until(lambda: False)

    def cached_slots(self) -> int:
        """KV slots the index holds (a slot shared by several blocks counts once)."""
        return len({slot for block in self.blocks.values() for slot in block.slots})
