"""One engine round as the model sees it: the flat batch, and how its index tensors reach the device.

Scope: ``SeqInput`` (one sequence's share of a round, as host integers), ``Staging`` (every host integer of a
round gathered into one buffer and sent to the device with one copy, through pinned memory and without waiting
on an accelerator), ``stage_round`` (lays a round out in a staging buffer, optionally padded to a fixed shape
so that a captured graph can replay it), ``ForwardBatch`` (the round's tensors, all views of the uploaded
buffer), ``RoundLayout`` (which rows form the batched decode group, how each decode gathers its keys) and
``ForwardContext`` (what every layer reads besides its hidden states).

Nothing here reads a device tensor back: every decision about the round's shape is made on the host, from host
integers, before the upload. That is what lets round N+1 be prepared while round N still runs on the device.

Non-scope: deciding what runs (the engine), turning a round plan into sequences and sampling (the model
runner), and the layers themselves (``layers.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from mini_deepinfer.models.cache import HybridCache


@dataclass(frozen=True)
class SeqInput:
    """One sequence's share of a round, as host integers.

    Attributes:
        token_ids: the new tokens. A negative value ``-(i + 1)`` marks a token the host has not seen: it
            is row ``i`` of the previous round's sampled tokens, still on the device (cross-round execution).
        start: position of the first new token (tokens already in the cache).
        kv_slots: KV slots of positions ``0 .. start + len(token_ids) - 1`` (extra ones are ignored).
        state_slot: the sequence's state slot.
        capture: record the linear-attention state after each new token (speculative verification).
    """

    token_ids: Sequence[int]
    start: int
    kv_slots: Sequence[int]
    state_slot: int
    capture: bool = False

    @property
    def context_len(self) -> int:
        return self.start + len(self.token_ids)


# --8<-- [start:staging]
class Staging:
    """The host integers of one round, sent to the device in one copy.

    Segments are added by name; ``upload`` concatenates them into one int64 buffer and copies it to the device
    once. On an accelerator the buffer is pinned (page-locked) host memory and the copy is asynchronous, so
    the host goes on preparing while the device still computes the round before. Float segments (the sampling
    uniforms) travel as the bit patterns of their float64 values and are viewed back as float64 on arrival.
    """

    def __init__(self) -> None:
        self._segments: list[tuple[str, torch.Tensor, bool]] = []  # name, int64 values, holds floats

    def add(self, name: str, values: Sequence[int] | torch.Tensor) -> None:
        self._segments.append((name, torch.as_tensor(values, dtype=torch.int64).reshape(-1), False))

    def add_floats(self, name: str, values: Sequence[float]) -> None:
        as_bits = torch.as_tensor(values, dtype=torch.float64).reshape(-1).view(torch.int64)
        self._segments.append((name, as_bits, True))

    def segments(self) -> list[tuple[str, int, bool]]:
        """The layout: (name, length, holds floats) of every segment, in order."""
        return [(name, values.numel(), floats) for name, values, floats in self._segments]

    @staticmethod
    def views(segments: list[tuple[str, int, bool]], buffer: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named views of a buffer laid out as ``segments``."""
        views, offset = {}, 0
        for name, length, floats in segments:
            view = buffer[offset : offset + length]
            views[name] = view.view(torch.float64) if floats else view
            offset += length
        return views

    def host(self, pin: bool) -> torch.Tensor:
        """The whole buffer on the host, pinned when ``pin`` (only possible where an accelerator exists)."""
        empty = torch.empty(0, dtype=torch.int64)
        buffer = torch.cat([values for _, values, _ in self._segments]) if self._segments else empty
        return buffer.pin_memory() if pin else buffer

    def upload(self, device: torch.device, into: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Copy the buffer to ``device`` (into the preallocated ``into`` when given); return named views.

        The copy is non-blocking on an accelerator: the views are valid for work queued after it on the same
        stream, which is the only way they are used.
        """
        accelerator = device.type != "cpu"
        buffer = self.host(pin=accelerator)
        if into is not None:
            into.copy_(buffer, non_blocking=accelerator)
            buffer = into
        elif accelerator:
            buffer = buffer.to(device, non_blocking=True)
        return self.views(self.segments(), buffer)
# --8<-- [end:staging]


@dataclass(frozen=True)
class Padding:
    """A fixed round shape for a captured decode graph: ``rows`` decode sequences, ``context`` keys each.

    Rows beyond the real ones, and keys beyond a sequence's context, point at a reserved dummy KV slot and
    dummy state slot (``HybridCache.dummy_kv_slot``, ``dummy_state_slot``) that no request ever holds, so
    whatever the padding computes lands where nobody reads.
    """

    rows: int
    context: int
    dummy_kv_slot: int
    dummy_state_slot: int


@dataclass
class RoundShape:
    """What the host decided about a round's layout before uploading it (host integers only)."""

    query_lens: list[int]
    context_lens: list[int]
    starts: list[int]
    decode_seqs: list[int]
    prefill_seqs: list[int]
    captured: frozenset[int]
    state_slot_ids: tuple[int, ...]
    fresh_slots: int  # how many state slots are zeroed before the round
    masked: bool  # the decode group's keys need a padding mask
    decode_state_range: slice | None
    in_flight: bool  # some input tokens come from the previous round's sampled tokens


# --8<-- [start:stage_round]
def stage_round(seqs: Sequence[SeqInput], staging: Staging, logits_rows: Sequence[int],
                pad: Padding | None = None) -> RoundShape:
    """Lay one round out in ``staging``: every index tensor the forward needs, decided on the host.

    Sequences with one new token (and no capture) form the decode group, batched in attention and in the
    recurrent update; the others run one by one. ``pad`` fixes the shape for a captured graph (decode rounds
    only): dummy rows are appended and every decode reads ``pad.context`` keys under a mask.
    """
    fresh = [s.state_slot for s in seqs if s.start == 0]  # their states are zeroed before the round
    if pad is not None:  # a graph's decode round: the host lengths describe the bucket, not the requests
        if fresh or any(len(s.token_ids) != 1 or s.capture for s in seqs):
            raise ValueError("a padded round holds decodes only")
        dummy = SeqInput((0,), 0, (pad.dummy_kv_slot,), pad.dummy_state_slot)
        seqs = list(seqs) + [dummy] * (pad.rows - len(seqs))
        logits_rows = list(range(pad.rows))
    query_lens = [len(s.token_ids) for s in seqs]
    if min(query_lens, default=1) < 1:
        raise ValueError("every sequence in a round needs at least one new token")
    if any(len(s.kv_slots) < s.context_len for s in seqs):
        raise ValueError("a sequence has fewer KV slots than its context length")
    starts = [sum(query_lens[:b]) for b in range(len(seqs))]
    captured = frozenset(b for b, s in enumerate(seqs) if s.capture)
    decode = [b for b, n in enumerate(query_lens) if n == 1 and b not in captured]
    tokens = [t for s in seqs for t in s.token_ids]
    staging.add("input_ids", [max(t, 0) for t in tokens])
    staging.add("in_flight", [-t - 1 for t in tokens])  # the previous round's row, or -1: the token is here
    staging.add("positions", [p for s in seqs for p in range(s.start, s.context_len)])
    staging.add("slot_mapping", [x for s in seqs for x in s.kv_slots[s.start : s.context_len]])
    staging.add("state_slots", [s.state_slot for s in seqs])
    staging.add("logits_indices", list(logits_rows))
    staging.add("fresh_slots", fresh)
    for b in range(len(seqs)):
        if b not in decode:
            staging.add(f"kv_slots.{b}", list(seqs[b].kv_slots[: seqs[b].context_len]))
    masked = _stage_decode_group(staging, [seqs[b] for b in decode], starts, decode, pad)
    if pad is not None:  # every round of a bucket gets this one shape; real contexts are device data
        return RoundShape(query_lens, [pad.context] * pad.rows, starts, decode, [], frozenset(), (), 0,
                          masked=True, decode_state_range=None, in_flight=True)
    ids = tuple(s.state_slot for s in seqs)
    return RoundShape(query_lens, [s.context_len for s in seqs], starts, decode,
                      [b for b in range(len(seqs)) if b not in decode], captured, ids, len(fresh), masked,
                      _consecutive([ids[b] for b in decode]), any(t < 0 for t in tokens))
# --8<-- [end:stage_round]


def _stage_decode_group(staging: Staging, group: list[SeqInput], starts: list[int], decode: list[int],
                        pad: Padding | None) -> bool:
    """The decode group's rows, state slots and keys: ``[D, L]`` slots, each row padded (under a mask) with
    the dummy slot in a graph, else with its own first slot."""
    contexts = [s.context_len for s in group]
    width = pad.context if pad is not None else max(contexts, default=0)
    if pad is not None and max(contexts, default=0) > width:
        raise ValueError(f"a context of {max(contexts)} keys does not fit the padding of {width}")
    staging.add("decode_rows", [starts[b] for b in decode])
    staging.add("decode_state_slots", [s.state_slot for s in group])
    staging.add("decode_context", contexts)
    filler = [pad.dummy_kv_slot if pad is not None else s.kv_slots[0] for s in group]
    index = [list(s.kv_slots[: s.context_len]) + [f] * (width - s.context_len) for s, f in zip(group, filler)]
    staging.add("decode_kv_index", [x for row in index for x in row])
    return pad is not None or min(contexts, default=0) != max(contexts, default=0)


def _consecutive(slots: list[int]) -> slice | None:
    """The slots as a slice when they are consecutive (a decode step may then update them in place)."""
    if slots and slots == list(range(slots[0], slots[0] + len(slots))):
        return slice(slots[0], slots[0] + len(slots))
    return None


# --8<-- [start:forward_batch]
@dataclass
class ForwardBatch:
    """The tokens of one round, sequences concatenated in order; every tensor is a view of one upload.

    Attributes:
        input_ids: ``[T]`` int64, all new tokens of the round.
        positions: ``[T]`` int64, absolute position of each token within its sequence.
        slot_mapping: ``[T]`` int64, KV slot that each new token's key and value are written to.
        state_slots: ``[B]`` int64, state slot of each sequence (Qwen2 ignores it).
        logits_indices: ``[S]`` int64, rows of the T tokens whose logits are returned.
        fresh_slots: ``[F]`` int64, state slots zeroed before the round (sequences that start at position 0).
        kv_slots: sequence index -> ``[context]`` int64 KV slots of positions 0..context-1, for the sequences
            outside the decode group (the group reads ``layout.decode_kv_index``).
        layout: the round's shape, decided on the host (``RoundLayout``).
        in_flight: ``[T]`` int64: for a token the host has not seen, the row of the previous round's sampled
            tokens that holds it, else -1 (the model runner fills those tokens in on the device).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    state_slots: torch.Tensor
    logits_indices: torch.Tensor
    fresh_slots: torch.Tensor
    kv_slots: dict[int, torch.Tensor]
    layout: RoundLayout
    in_flight: torch.Tensor | None = None
# --8<-- [end:forward_batch]

    # --8<-- [start:with_in_flight]
    def with_in_flight(self, previous: torch.Tensor) -> ForwardBatch:
        """The batch with its in-flight tokens taken from ``previous`` (the last round's sampled tokens, still
        on the device): one gather, no host read. Tokens the host already had are kept."""
        if self.in_flight is None:
            return self
        gathered = previous.index_select(0, self.in_flight.clamp(min=0))
        ids = torch.where(self.in_flight >= 0, gathered, self.input_ids)
        return replace(self, input_ids=ids)
    # --8<-- [end:with_in_flight]

    @property
    def query_lens(self) -> list[int]:
        return self.layout.query_lens

    @property
    def context_lens(self) -> list[int]:
        return self.layout.context_lens

    @classmethod
    def from_staged(cls, shape: RoundShape, views: dict[str, torch.Tensor]) -> ForwardBatch:
        """The batch as views of an uploaded ``Staging`` buffer laid out by ``stage_round``."""
        kv = {b: views[f"kv_slots.{b}"] for b in shape.prefill_seqs}
        return cls(views["input_ids"], views["positions"], views["slot_mapping"], views["state_slots"],
                   views["logits_indices"], views["fresh_slots"], kv, RoundLayout.from_staged(shape, views),
                   views["in_flight"] if shape.in_flight else None)

    @classmethod
    def from_sequences(
        cls,
        new_tokens: Sequence[Sequence[int]],
        start_positions: Sequence[int],
        kv_slots: Sequence[Sequence[int]],
        state_slots: Sequence[int],
        device: torch.device | str = "cpu",
        all_logits: bool = False,
    ) -> ForwardBatch:
        """Lay out one round from per-sequence lists.

        Args:
            new_tokens: The new token ids of each sequence (a prefill chunk or one decode token).
            start_positions: Position of each sequence's first new token (tokens already in the cache).
            kv_slots: KV slots of each sequence, at least ``start + len(new)`` of them (extra ones ignored).
            state_slots: State slot of each sequence.
            device: Device of the returned tensors.
            all_logits: Return logits for every token instead of each sequence's last token.
        """
        seqs = [SeqInput(tuple(t), s, tuple(k), slot)
                for t, s, k, slot in zip(new_tokens, start_positions, kv_slots, state_slots)]
        lens = [len(s.token_ids) for s in seqs]
        ends = [sum(lens[: b + 1]) - 1 for b in range(len(seqs))]
        rows = list(range(sum(lens))) if all_logits else ends
        staging = Staging()
        shape = stage_round(seqs, staging, rows)
        return cls.from_staged(shape, staging.upload(torch.device(device)))


@dataclass
class RoundLayout:
    """The round's shape, shared by every layer of one forward.

    Sequences with one new token form the *decode group*: their attention and recurrent updates run as one
    batched computation. Sequences with more tokens run one at a time (chunked algorithms over their tokens),
    and so do sequences whose states are captured, whatever their length. Lists are host integers; tensors are
    views of the round's upload.
    """

    query_lens: list[int]
    context_lens: list[int]
    starts: list[int]
    decode_seqs: list[int]
    prefill_seqs: list[int]
    all_decode: bool
    decode_rows: torch.Tensor
    decode_state_slots: torch.Tensor
    decode_kv_index: torch.Tensor | None
    decode_kv_mask: torch.Tensor | None
    captured: frozenset[int] = frozenset()
    state_slot_ids: tuple[int, ...] = ()
    fresh_count: int = 0
    decode_state_range: slice | None = field(default=None)  # the group's state slots, when consecutive

    @classmethod
    def from_staged(cls, shape: RoundShape, views: dict[str, torch.Tensor]) -> RoundLayout:
        decode = shape.decode_seqs
        kv_index, mask = None, None
        if decode:
            kv_index = views["decode_kv_index"].view(len(decode), -1)
            if shape.masked:  # key j of row b is real when j < context[b]: computed on the device
                columns = torch.arange(kv_index.shape[1], device=kv_index.device)
                mask = (columns[None, :] < views["decode_context"][:, None])[:, None, None, :]
        return cls(shape.query_lens, shape.context_lens, shape.starts, decode, shape.prefill_seqs,
                   len(decode) == len(shape.query_lens), views["decode_rows"], views["decode_state_slots"],
                   kv_index, mask, shape.captured, shape.state_slot_ids, shape.fresh_slots,
                   shape.decode_state_range)

    def decode_part(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of ``x`` (first dim = tokens) that belong to the decode group, in group order."""
        return x if self.all_decode else x.index_select(0, self.decode_rows)

    # --8<-- [start:decode_states]
    def decode_states(self, states: torch.Tensor) -> torch.Tensor:
        """The decode group's rows of a per-slot state tensor: a view when the slots are consecutive (a
        step may then update them in place), else a gathered copy."""
        if self.decode_state_range is not None:
            return states[self.decode_state_range]
        return states.index_select(0, self.decode_state_slots)

    def store_decode_states(self, states: torch.Tensor, new: torch.Tensor) -> None:
        """Write the decode group's new rows into the per-slot tensor ``states``."""
        if self.decode_state_range is None:
            states.index_copy_(0, self.decode_state_slots, new)
            return
        rows = states[self.decode_state_range]
        if new.data_ptr() != rows.data_ptr():  # nothing to do after a step that updated the view in place
            rows.copy_(new)
    # --8<-- [end:decode_states]


@dataclass
class ForwardContext:
    """What every layer of one forward reads besides its hidden states."""

    batch: ForwardBatch
    cache: HybridCache
    layout: RoundLayout
    cos: torch.Tensor
    sin: torch.Tensor
