"""One engine round as the model reads it: the flat batch, the round's layout, and the forward context.

Scope: ``ForwardBatch`` (the round's tensors, sequences concatenated in order), ``RoundLayout`` (which rows
form the batched decode group and how each decode gathers its keys: host integers decided before the upload,
and the device views the layers index with) and ``ForwardContext`` (what every layer reads besides its hidden
states). Every tensor here is already on the model's device.

Non-scope: how a round gets here. Laying a round out on the host, padding it for a captured graph and sending
it to the device in one copy is the runner's job (``runtime/staging.py``); deciding what runs is the engine's;
the layers themselves are ``layers.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from mini_deepinfer.models.cache import HybridCache


# --8<-- [start:round_layout]
@dataclass(frozen=True, kw_only=True)
class RoundLayout:
    """The round's shape, shared by every layer of one forward.

    Sequences with one new token form the *decode group*: their attention and recurrent updates run as one
    batched computation. Sequences with more tokens run one at a time (chunked algorithms over their tokens),
    and so do sequences whose per-position states are kept (``snapshot_seqs``), whatever their length.
    The host fields are decided before the upload and compare equal for every round of one padded shape; the
    tensor fields (``compare=False``) are views of the round's upload.

    Attributes:
        query_lens: new tokens of each sequence.
        context_lens: keys of each sequence after the round (cached + new).
        row_offsets: row of each sequence's first token in the round's ``[T]`` rows.
        decode_seqs: sequences of the decode group, in order; ``prefill_seqs``: the others.
        snapshot_seqs: sequences whose linear-attention state is kept after every position.
        state_slot_ids: each sequence's state slot, as a host integer.
        fresh_count: how many state slots are zeroed before the round (``ForwardBatch.fresh_slots``).
        masked: the decode group's keys are padded and need ``decode_kv_mask``.
        decode_state_range: the group's state slots as a slice, when they are consecutive.
        in_flight: some input tokens come from the previous round's sampled tokens.
        restores: prefix cache: ``(state slot, snapshot slot)`` pairs loaded before the round.
        saves: prefix cache: ``(sequence, tokens, snapshot slot)``: keep the sequence's state after that many
            of its new tokens (such sequences run outside the decode group).
    """

    query_lens: list[int]
    context_lens: list[int]
    row_offsets: list[int]
    decode_seqs: list[int]
    prefill_seqs: list[int]
    snapshot_seqs: frozenset[int] = frozenset()
    state_slot_ids: tuple[int, ...] = ()
    fresh_count: int = 0
    masked: bool = False
    decode_state_range: slice | None = None
    in_flight: bool = False
    restores: tuple[tuple[int, int], ...] = ()
    saves: tuple[tuple[int, int, int], ...] = ()
    decode_rows: torch.Tensor | None = field(default=None, compare=False)  # [D] rows of the group
    decode_state_slots: torch.Tensor | None = field(default=None, compare=False)  # [D]
    decode_kv_index: torch.Tensor | None = field(default=None, compare=False)  # [D, L] KV slots per key
    decode_kv_mask: torch.Tensor | None = field(default=None, compare=False)  # [D, 1, 1, L] real keys
# --8<-- [end:round_layout]

    def saves_of(self, b: int) -> list[tuple[int, int]]:
        """Sequence ``b``'s prefix snapshots: ``(tokens into its chunk, snapshot slot)``, in order."""
        return [(n, slot) for seq, n, slot in self.saves if seq == b]

    @property
    def all_decode(self) -> bool:
        """Every sequence of the round is in the decode group."""
        return len(self.decode_seqs) == len(self.query_lens)

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


# --8<-- [start:forward_batch]
@dataclass(kw_only=True)
class ForwardBatch:
    """The tokens of one round, sequences concatenated in order; every tensor is a view of one upload.

    Attributes:
        input_ids: ``[T]`` int64, all new tokens of the round.
        positions: ``[T]`` int64, absolute position of each token within its sequence.
        slot_mapping: ``[T]`` int64, KV slot that each new token's key and value are written to.
        state_slots: ``[B]`` int64, state slot of each sequence (Qwen2 ignores it).
        logits_indices: ``[S]`` int64, rows of the T tokens whose logits are returned, in increasing order.
        fresh_slots: ``[F]`` int64, state slots zeroed before the round (sequences that start at position 0).
        kv_slots: sequence index -> ``[context]`` int64 KV slots of positions 0..context-1, for the sequences
            outside the decode group (the group reads ``layout.decode_kv_index``).
        layout: the round's shape (``RoundLayout``).
        in_flight_rows: ``[T]`` int64, only when ``layout.in_flight``: for a token the host has not seen, the
            row of the previous round's sampled tokens that holds it, else -1 (the token is in ``input_ids``).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    state_slots: torch.Tensor
    logits_indices: torch.Tensor
    fresh_slots: torch.Tensor
    kv_slots: dict[int, torch.Tensor]
    layout: RoundLayout
    in_flight_rows: torch.Tensor | None = None
# --8<-- [end:forward_batch]

    # --8<-- [start:with_in_flight]
    def with_in_flight(self, previous: torch.Tensor) -> ForwardBatch:
        """The batch with its in-flight tokens taken from ``previous`` (the last round's sampled tokens, still
        on the device): one gather, no host read. Tokens the host already had are kept."""
        if self.in_flight_rows is None:
            return self
        gathered = previous.index_select(0, self.in_flight_rows.clamp(min=0))
        ids = torch.where(self.in_flight_rows >= 0, gathered, self.input_ids)
        return replace(self, input_ids=ids)
    # --8<-- [end:with_in_flight]

    @property
    def query_lens(self) -> list[int]:
        return self.layout.query_lens

    @property
    def context_lens(self) -> list[int]:
        return self.layout.context_lens


@dataclass(kw_only=True)
class ForwardContext:
    """What every layer of one forward reads besides its hidden states."""

    batch: ForwardBatch
    cache: HybridCache
    cos: torch.Tensor
    sin: torch.Tensor

    @property
    def layout(self) -> RoundLayout:
        """The round's layout (``batch.layout``)."""
        return self.batch.layout
