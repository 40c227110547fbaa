"""From host integers to the model's batch: lay a round out on the host, upload it in one copy, view it.

Scope: ``SeqInput`` (one sequence's share of a round, as host integers), ``Staging`` (every host integer of a
round gathered into one buffer and sent to the device with one copy, through pinned memory and without waiting
on an accelerator), ``Padding`` and ``stage_round`` (lay a round out in a staging buffer, optionally padded to
a fixed shape so that a captured graph can replay it), and ``batch_from_views`` (the ``ForwardBatch`` as views
of the uploaded buffer). ``batch_from_sequences`` does all three for per-sequence lists (tests, site scripts,
the draft model).

Nothing here reads a device tensor back: every decision about the round's shape is made on the host, from host
integers, before the upload. That is what lets round N+1 be prepared while round N still runs on the device.

Non-scope: deciding what runs (the engine), turning a round plan into sequences and sampling (the model
runner), what the model reads (``models/forward_batch.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

import torch

from mini_deepinfer.models.forward_batch import ForwardBatch, RoundLayout

__all__ = ["Padding", "SeqInput", "Staging", "batch_from_inputs", "batch_from_sequences", "batch_from_views",
           "stage_round"]


@dataclass(frozen=True, kw_only=True)
class SeqInput:
    """One sequence's share of a round, as host integers.

    Attributes:
        token_ids: the new tokens. With ``in_flight_row`` set, ``token_ids[0]`` is only a placeholder.
        start: position of the first new token (tokens already in the cache).
        kv_slots: KV slots of positions ``0 .. start + len(token_ids) - 1`` (extra ones are ignored).
        state_slot: the sequence's state slot.
        in_flight_row: the host has not seen the first new token yet: it is this row of the previous
            round's sampled tokens, still on the device (cross-round execution). None: the token is here.
        snapshot: keep the linear-attention state after each new token (speculative verification).
        restore: prefix cache: load the state slot from this snapshot slot before the round.
        saves: prefix cache: ``(position, snapshot slot)``: keep the state after ``position`` tokens.
    """

    token_ids: Sequence[int]
    start: int
    kv_slots: Sequence[int]
    state_slot: int
    in_flight_row: int | None = None
    snapshot: bool = False
    restore: int | None = None
    saves: tuple[tuple[int, int], ...] = ()

    @property
    def context_len(self) -> int:
        return self.start + len(self.token_ids)

    def token_rows(self) -> list[int]:
        """For each new token, the previous round's row that holds it, or -1 when the host has it."""
        first = -1 if self.in_flight_row is None else self.in_flight_row
        return [first] + [-1] * (len(self.token_ids) - 1)


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


# --8<-- [start:stage_round]
def stage_round(seqs: Sequence[SeqInput], staging: Staging, logits_rows: Sequence[int],
                pad: Padding | None = None) -> RoundLayout:
    """Lay one round out in ``staging``: every index tensor the forward needs, decided on the host.

    Sequences with one new token (and no snapshots) form the decode group, batched in attention and in the
    recurrent update; the others run one by one. ``pad`` fixes the shape for a captured graph.
    """
    fresh = [s.state_slot for s in seqs if s.start == 0]  # their states are zeroed before the round
    if pad is not None:  # decodes only (none is fresh), then dummy rows
        seqs, logits_rows = _pad_decodes(seqs, pad)
    _check_sequences(seqs)
    query_lens = [len(s.token_ids) for s in seqs]
    row_offsets = [0, *accumulate(query_lens)][:-1]  # row of each sequence's first token
    snapshots = frozenset(b for b, s in enumerate(seqs) if s.snapshot)
    saves = tuple((b, p - s.start, slot) for b, s in enumerate(seqs) for p, slot in s.saves)
    decode = [b for b, n in enumerate(query_lens) if n == 1 and b not in snapshots and not seqs[b].saves]
    prefill = [b for b in range(len(seqs)) if b not in decode]
    staging.add("input_ids", [t for s in seqs for t in s.token_ids])
    staging.add("in_flight_rows", [row for s in seqs for row in s.token_rows()])
    staging.add("positions", [p for s in seqs for p in range(s.start, s.context_len)])
    staging.add("slot_mapping", [x for s in seqs for x in s.kv_slots[s.start : s.context_len]])
    staging.add("state_slots", [s.state_slot for s in seqs])
    staging.add("logits_indices", list(logits_rows))
    staging.add("fresh_slots", fresh)
    for b in prefill:
        staging.add(f"kv_slots.{b}", list(seqs[b].kv_slots[: seqs[b].context_len]))
    masked = _stage_decode_group(staging, [seqs[b] for b in decode], row_offsets, decode, pad)
    if pad is not None:  # every round of a bucket gets this one layout; real contexts are device data
        return RoundLayout(query_lens=query_lens, context_lens=[pad.context] * pad.rows,
                           row_offsets=row_offsets, decode_seqs=decode, prefill_seqs=[], masked=True,
                           in_flight=True)
    ids = tuple(s.state_slot for s in seqs)
    return RoundLayout(query_lens=query_lens, context_lens=[s.context_len for s in seqs],
                       row_offsets=row_offsets, decode_seqs=decode, prefill_seqs=prefill,
                       snapshot_seqs=snapshots, state_slot_ids=ids, fresh_count=len(fresh), masked=masked,
                       restores=tuple((s.state_slot, s.restore) for s in seqs if s.restore is not None),
                       saves=saves,
                       decode_state_range=_consecutive([ids[b] for b in decode]),
                       in_flight=any(s.in_flight_row is not None for s in seqs))
# --8<-- [end:stage_round]


def _pad_decodes(seqs: Sequence[SeqInput], pad: Padding) -> tuple[list[SeqInput], list[int]]:
    """A graph's decode round: dummy rows appended up to ``pad.rows``, logits for every row."""
    if any(s.start == 0 or len(s.token_ids) != 1 or s.snapshot for s in seqs):
        raise ValueError("a padded round holds decodes only")
    dummy = SeqInput(token_ids=(0,), start=0, kv_slots=(pad.dummy_kv_slot,), state_slot=pad.dummy_state_slot)
    return list(seqs) + [dummy] * (pad.rows - len(seqs)), list(range(pad.rows))


def _check_sequences(seqs: Sequence[SeqInput]) -> None:
    if any(len(s.token_ids) < 1 for s in seqs):
        raise ValueError("every sequence in a round needs at least one new token")
    if any(len(s.kv_slots) < s.context_len for s in seqs):
        raise ValueError("a sequence has fewer KV slots than its context length")


def _stage_decode_group(staging: Staging, group: list[SeqInput], row_offsets: list[int], decode: list[int],
                        pad: Padding | None) -> bool:
    """The decode group's rows, state slots and keys: ``[D, L]`` slots, each row padded (under a mask) with
    the dummy slot in a graph, else with its own first slot. Returns whether the keys need a mask."""
    contexts = [s.context_len for s in group]
    width = pad.context if pad is not None else max(contexts, default=0)
    if pad is not None and max(contexts, default=0) > width:
        raise ValueError(f"a context of {max(contexts)} keys does not fit the padding of {width}")
    staging.add("decode_rows", [row_offsets[b] for b in decode])
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


# --8<-- [start:batch_from_views]
def batch_from_views(layout: RoundLayout, views: dict[str, torch.Tensor]) -> ForwardBatch:
    """The batch as views of an uploaded ``Staging`` buffer laid out by ``stage_round``."""
    kv_index = mask = None
    if layout.decode_seqs:
        kv_index = views["decode_kv_index"].view(len(layout.decode_seqs), -1)
        if layout.masked:  # key j of row b is real when j < context[b]: computed on the device
            columns = torch.arange(kv_index.shape[1], device=kv_index.device)
            mask = (columns[None, :] < views["decode_context"][:, None])[:, None, None, :]
    layout = replace(layout, decode_rows=views["decode_rows"], decode_state_slots=views["decode_state_slots"],
                     decode_kv_index=kv_index, decode_kv_mask=mask)
    return ForwardBatch(
        input_ids=views["input_ids"], positions=views["positions"], slot_mapping=views["slot_mapping"],
        state_slots=views["state_slots"], logits_indices=views["logits_indices"],
        fresh_slots=views["fresh_slots"], kv_slots={b: views[f"kv_slots.{b}"] for b in layout.prefill_seqs},
        layout=layout, in_flight_rows=views["in_flight_rows"] if layout.in_flight else None)
# --8<-- [end:batch_from_views]


def batch_from_sequences(
    new_tokens: Sequence[Sequence[int]],
    start_positions: Sequence[int],
    kv_slots: Sequence[Sequence[int]],
    state_slots: Sequence[int],
    device: torch.device | str = "cpu",
    all_logits: bool = False,
) -> ForwardBatch:
    """Lay out one round from per-sequence lists, upload it, and return its batch.

    Args:
        new_tokens: The new token ids of each sequence (a prefill chunk or one decode token).
        start_positions: Position of each sequence's first new token (tokens already in the cache).
        kv_slots: KV slots of each sequence, at least ``start + len(new)`` of them (extra ones ignored).
        state_slots: State slot of each sequence.
        device: Device of the returned tensors.
        all_logits: Return logits for every token instead of each sequence's last token.
    """
    seqs = [SeqInput(token_ids=tuple(t), start=s, kv_slots=tuple(k), state_slot=slot)
            for t, s, k, slot in zip(new_tokens, start_positions, kv_slots, state_slots)]
    return batch_from_inputs(seqs, device, all_logits)


def batch_from_inputs(seqs: Sequence[SeqInput], device: torch.device | str = "cpu",
                      all_logits: bool = False) -> ForwardBatch:
    """``batch_from_sequences`` for sequences already made (with restores or saves, for one)."""
    ends = [end - 1 for end in accumulate(len(s.token_ids) for s in seqs)]
    rows = list(range(sum(len(s.token_ids) for s in seqs))) if all_logits else ends
    staging = Staging()
    layout = stage_round(seqs, staging, rows)
    return batch_from_views(layout, staging.upload(torch.device(device)))
