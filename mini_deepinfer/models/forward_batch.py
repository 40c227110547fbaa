"""One engine round as the model sees it: the flat batch and the index tensors every layer shares.

Scope: ``ForwardBatch`` (the tokens of one round, sequences concatenated, with their positions, KV slots and
state slots), ``RoundLayout`` (the index tensors derived from it once per forward: which rows form the batched
decode group, how each decode gathers its keys) and ``ForwardContext`` (what every layer reads besides its
hidden states).

Non-scope: deciding what runs (the engine), turning a round plan into a batch (the model runner), and the
layers themselves (``layers.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from mini_deepinfer.models.cache import HybridCache


# --8<-- [start:forward_batch]
@dataclass
class ForwardBatch:
    """The tokens of one round, sequences concatenated in order.

    Attributes:
        input_ids: ``[T]`` int64, all new tokens of the round.
        positions: ``[T]`` int64, absolute position of each token within its sequence.
        query_lens: ``[B]`` new tokens per sequence (sum == T).
        context_lens: ``[B]`` tokens in the cache after this round = start position + query_len.
        slot_mapping: ``[T]`` int64, KV slot that each new token's key and value are written to.
        kv_slots: ``[B]`` int64 tensors of length ``context_lens[b]``: KV slots of positions 0..context_len-1.
        state_slots: ``[B]`` int64, state slot of each sequence (Qwen2 ignores it).
        fresh_state: ``[B]`` True when the sequence starts at position 0: its convolution window and recurrent
            state are zeroed before this round.
        logits_indices: ``[S]`` int64, rows of the T tokens whose logits are returned.
        capture_states: ``[B]`` or None. True: record this sequence's linear-attention state after each of
            its new tokens in ``cache.captured`` (speculative verification); it then runs token by token.
        state_slot_ids: ``state_slots`` as host integers, or None. With them the model sees, without reading
            a device tensor back, when the decode group's state slots are consecutive (then it updates them
            in place instead of gathering and scattering copies).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    query_lens: list[int]
    context_lens: list[int]
    slot_mapping: torch.Tensor
    kv_slots: list[torch.Tensor]
    state_slots: torch.Tensor
    fresh_state: list[bool]
    logits_indices: torch.Tensor
    capture_states: list[bool] | None = None
    state_slot_ids: tuple[int, ...] | None = None
# --8<-- [end:forward_batch]

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
        query_lens = [len(t) for t in new_tokens]
        context_lens = [s + n for s, n in zip(start_positions, query_lens)]
        if any(n < 1 for n in query_lens):
            raise ValueError("every sequence in a round needs at least one new token")
        if any(len(slots) < c for slots, c in zip(kv_slots, context_lens)):
            raise ValueError("a sequence has fewer KV slots than its context length")
        positions = [p for s, n in zip(start_positions, query_lens) for p in range(s, s + n)]
        mapping = [x for slots, s, c in zip(kv_slots, start_positions, context_lens) for x in slots[s:c]]
        ends = torch.tensor(query_lens).cumsum(0) - 1
        logits_rows = torch.arange(sum(query_lens)) if all_logits else ends

        def tensor(values: Sequence[int]) -> torch.Tensor:
            return torch.tensor(list(values), dtype=torch.int64, device=device)

        return cls(
            input_ids=tensor([t for seq in new_tokens for t in seq]),
            positions=tensor(positions),
            query_lens=query_lens,
            context_lens=context_lens,
            slot_mapping=tensor(mapping),
            kv_slots=[tensor(slots[:c]) for slots, c in zip(kv_slots, context_lens)],
            state_slots=tensor(state_slots),
            fresh_state=[s == 0 for s in start_positions],
            logits_indices=logits_rows.to(device),
            state_slot_ids=tuple(state_slots),
        )


@dataclass
class RoundLayout:
    """Index tensors derived from a ``ForwardBatch`` once and shared by every layer of one forward.

    Sequences with one new token form the *decode group*: their attention and recurrent updates run as one
    batched computation. Sequences with more tokens run one at a time (chunked algorithms over their tokens),
    and so do sequences whose states are captured, whatever their length.
    """

    starts: list[int]
    decode_seqs: list[int]
    prefill_seqs: list[int]
    all_decode: bool
    decode_rows: torch.Tensor
    decode_state_slots: torch.Tensor
    decode_kv_index: torch.Tensor | None
    decode_kv_mask: torch.Tensor | None
    captured: frozenset[int] = frozenset()
    decode_state_range: slice | None = None  # the decode group's state slots, when they are consecutive

    @classmethod
    def build(cls, batch: ForwardBatch) -> RoundLayout:
        lens = batch.query_lens
        if sum(lens) != batch.input_ids.shape[0] or len(batch.context_lens) != len(lens):
            raise ValueError("query_lens and context_lens do not match the batch")
        starts = [0]
        for n in lens[:-1]:
            starts.append(starts[-1] + n)
        captured = frozenset(b for b, c in enumerate(batch.capture_states or ()) if c)
        decode = [b for b, n in enumerate(lens) if n == 1 and b not in captured]
        device = batch.input_ids.device
        rows = torch.tensor([starts[b] for b in decode], dtype=torch.int64, device=device)
        decode_index = torch.tensor(decode, dtype=torch.int64, device=device)
        kv_index, kv_mask = None, None
        if decode:
            kv_index = pad_sequence([batch.kv_slots[b] for b in decode], batch_first=True)
            contexts = [batch.context_lens[b] for b in decode]
            if min(contexts) != max(contexts):
                ctx = torch.tensor(contexts, device=device)
                kv_mask = torch.arange(kv_index.shape[1], device=device)[None, :] < ctx[:, None]
                kv_mask = kv_mask[:, None, None, :]
        ids, state_range = batch.state_slot_ids, None
        if decode and ids is not None:
            first = ids[decode[0]]
            if [ids[b] for b in decode] == list(range(first, first + len(decode))):
                state_range = slice(first, first + len(decode))
        return cls(
            starts=starts,
            decode_seqs=decode,
            prefill_seqs=[b for b in range(len(lens)) if b not in decode],
            all_decode=len(decode) == len(lens),
            decode_rows=rows,
            decode_state_slots=batch.state_slots.index_select(0, decode_index),
            decode_kv_index=kv_index,
            decode_kv_mask=kv_mask,
            captured=captured,
            decode_state_range=state_range,
        )

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
