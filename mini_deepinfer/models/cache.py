"""The hybrid cache: KV slots for full-attention layers, state slots for linear-attention layers.

Scope: the tensors, indexed by slot number. A *KV slot* is one row of every full-attention layer's key and
value tensors and holds one token position of one sequence ("paged attention with block size 1"). A *state
slot* is one row of every linear-attention (Gated DeltaNet) layer's convolution window and recurrent state and
holds one sequence's whole past, whatever its length. The model reads and writes these rows during
``forward``; this class also resets state slots and keeps *snapshots*: the per-position states of sequences
whose forward asked for them (``SeqInput.snapshot``), so that speculative decoding can set a state slot back
to the state after any verified position. ("Capture" in this package means CUDA-graph capture only.)
*Prefix snapshots* are another thing: ``snapshot_capacity`` rows per linear-attention layer, each a copy of
one sequence's convolution window and recurrent state after a given prompt position, kept for the prefix
cache (``core/prefix_cache.py``) and copied back into a state slot when a new request reuses that prefix.

Non-scope: slot accounting. Which slots are free, and when a slot may be released, is decided by the engine's
``SlotPool``; the cache never allocates or frees slots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from mini_deepinfer.models.config import ModelConfig


class HybridCache:
    """KV slots for the full-attention layers, state slots for the linear-attention layers.

    Per full-attention layer ``i``: ``key_cache[i]`` and ``value_cache[i]`` of shape
    ``[kv_capacity, num_kv_heads, head_dim]`` in the model dtype (keys after norm and rotary embedding).
    Per linear-attention layer ``i``: ``conv_state[i]`` of shape ``[state_capacity, conv_dim, kernel - 1]``
    (the last pre-convolution inputs, model dtype) and ``recurrent_state[i]`` of shape
    ``[state_capacity, Hv, dk, dv]``, always float32.

    Args:
        config: The model configuration.
        kv_capacity: Number of KV slots (token positions over all sequences).
        state_capacity: Number of state slots (sequences whose linear-attention state is kept).
        dtype: Model dtype for keys, values and convolution windows.
        device: Where the tensors live.
        dummy_slots: add one more KV slot and one more state slot that no request ever holds
            (``dummy_kv_slot``, ``dummy_state_slot``): the padding rows of captured decode graphs write there.
        snapshot_capacity: prefix snapshots (``prefix_conv``, ``prefix_recurrent``: rows shaped like a state
            slot's, ``snapshot_bytes()`` each), indexed by the engine's snapshot slots.
    """

    # --8<-- [start:tensors]
    def __init__(
        self,
        config: ModelConfig,
        kv_capacity: int,
        state_capacity: int,
        dtype: torch.dtype,
        device: torch.device | str,
        dummy_slots: bool = False,
        snapshot_capacity: int = 0,
    ) -> None:
        if kv_capacity < 1 or state_capacity < 0:
            raise ValueError(f"invalid cache capacity: kv {kv_capacity}, state {state_capacity}")
        self.kv_capacity = kv_capacity
        self.state_capacity = state_capacity
        self.dtype = dtype
        self.device = torch.device(device)
        self.dummy_kv_slot = kv_capacity if dummy_slots else None
        self.dummy_state_slot = state_capacity if dummy_slots else None
        kv_rows, state_rows = kv_capacity + dummy_slots, state_capacity + dummy_slots
        kv_shape = (kv_rows, config.num_key_value_heads, config.head_dim)
        self.key_cache: dict[int, torch.Tensor] = {}
        self.value_cache: dict[int, torch.Tensor] = {}
        for i in config.full_attention_layers:
            self.key_cache[i] = torch.zeros(kv_shape, dtype=dtype, device=self.device)
            self.value_cache[i] = torch.zeros(kv_shape, dtype=dtype, device=self.device)
        self.conv_state: dict[int, torch.Tensor] = {}
        self.recurrent_state: dict[int, torch.Tensor] = {}
        for i in config.linear_attention_layers:
            conv_shape = (state_rows, config.linear_conv_dim, config.linear_conv_kernel_dim - 1)
            rec_shape = (
                state_rows,
                config.linear_num_value_heads,
                config.linear_key_head_dim,
                config.linear_value_head_dim,
            )
            self.conv_state[i] = torch.zeros(conv_shape, dtype=dtype, device=self.device)
            self.recurrent_state[i] = torch.zeros(rec_shape, dtype=torch.float32, device=self.device)
        # state slot -> "conv" / "recurrent" -> layer -> [positions, ...]: the state after each position
        self.snapshots: dict[int, dict[str, dict[int, torch.Tensor]]] = {}
        self.snapshot_capacity = snapshot_capacity
        self.prefix_conv = {i: t.new_zeros((snapshot_capacity, *t.shape[1:]))
                            for i, t in self.conv_state.items()}
        self.prefix_recurrent = {i: t.new_zeros((snapshot_capacity, *t.shape[1:]))
                                 for i, t in self.recurrent_state.items()}
    # --8<-- [end:tensors]

    def _state_tensors(self) -> list[torch.Tensor]:
        return list(self.conv_state.values()) + list(self.recurrent_state.values())

    def reset_states(self, slots: torch.Tensor) -> None:
        """Zero several state slots at once; ``slots`` is an int64 tensor on the cache's device."""
        for t in self._state_tensors():
            t.index_fill_(0, slots, 0)

    def read_state(self, slot: int) -> dict[str, list[torch.Tensor]]:
        """Return clones of one state slot: ``{"conv": [...], "recurrent": [...]}``, in layer order."""
        return {
            "conv": [self.conv_state[i][slot].clone() for i in sorted(self.conv_state)],
            "recurrent": [self.recurrent_state[i][slot].clone() for i in sorted(self.recurrent_state)],
        }

    # --8<-- [start:snapshots]
    def record_snapshots(self, kind: str, layer: int, slot: int, states: torch.Tensor) -> None:
        """Append states of one sequence, one row per position, to the snapshots of slot ``slot``.

        Args:
            kind: ``"conv"`` (windows ``[n, conv_dim, kernel - 1]``) or ``"recurrent"`` (``[n, Hv, dk, dv]``).
            layer: the linear-attention layer.
            slot: the sequence's state slot.
            states: the state after each of ``n`` consecutive positions, oldest first.
        """
        held = self.snapshots.setdefault(slot, {}).setdefault(kind, {})
        held[layer] = torch.cat([held[layer], states]) if layer in held else states

    def snapshot_current(self, slots: list[int]) -> None:
        """Append each slot's current state to its snapshots (the state after a one-token step)."""
        for i in self.conv_state:
            for slot in slots:
                self.record_snapshots("conv", i, slot, self.conv_state[i][slot][None].clone())
                self.record_snapshots("recurrent", i, slot, self.recurrent_state[i][slot][None].clone())

    def restore_snapshot(self, slot: int, index: int) -> None:
        """Set state slot ``slot`` to its snapshot number ``index`` in every layer; drop the rest."""
        held = self.snapshots.pop(slot, {})
        for i in self.conv_state:
            self.conv_state[i][slot].copy_(held["conv"][i][index])
            self.recurrent_state[i][slot].copy_(held["recurrent"][i][index])

    def drop_snapshots(self, slot: int) -> None:
        """Forget the snapshots of slot ``slot`` (its current state is the one to keep)."""
        self.snapshots.pop(slot, None)
    # --8<-- [end:snapshots]

    # --8<-- [start:prefix_snapshots]
    def keep_prefix_state(self, kind: str, layer: int, snapshot: int, state: torch.Tensor) -> None:
        """Copy one layer's state of one sequence (``"conv"`` window or ``"recurrent"`` state) into a prefix
        snapshot slot. Only a request's own, not yet indexed snapshot slots are ever written."""
        held = self.prefix_conv if kind == "conv" else self.prefix_recurrent
        held[layer][snapshot].copy_(state)

    def load_prefix_states(self, pairs: tuple[tuple[int, int], ...]) -> None:
        """For each ``(state slot, snapshot slot)``: the state slot takes the snapshot, in every layer."""
        for i in self.conv_state:
            for slot, snapshot in pairs:
                self.conv_state[i][slot].copy_(self.prefix_conv[i][snapshot])
                self.recurrent_state[i][slot].copy_(self.prefix_recurrent[i][snapshot])

    def snapshot_bytes(self) -> int:
        """Bytes of one prefix snapshot: one convolution window and one recurrent state per linear layer."""
        rows = list(self.conv_state.values()) + list(self.recurrent_state.values())
        return sum(t[0].numel() * t.element_size() for t in rows)
    # --8<-- [end:prefix_snapshots]

    def read_kv(self, slots: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        """Return clones of the keys and values at ``slots``: ``{"key": [...], "value": [...]}``."""
        return {
            "key": [self.key_cache[i].index_select(0, slots) for i in sorted(self.key_cache)],
            "value": [self.value_cache[i].index_select(0, slots) for i in sorted(self.value_cache)],
        }

    def nbytes(self) -> int:
        """Total bytes held by the cache tensors."""
        tensors = list(self.key_cache.values()) + list(self.value_cache.values()) + self._state_tensors()
        tensors += list(self.prefix_conv.values()) + list(self.prefix_recurrent.values())
        return sum(t.numel() * t.element_size() for t in tensors)
