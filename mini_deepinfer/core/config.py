"""The numbers that size an engine, checked once when they are made.

Scope: ``EngineConfig`` (capacities, batching limits, and the modes: cross-round execution, speculative
decoding, the prefix cache) and ``MAX_SPEC_WIDTH``. Non-scope: acting on them (``engine.py``, ``batch.py``,
``speculative.py``).
This module imports nothing outside the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_SPEC_WIDTH = 16
"""The largest ``spec_width`` (draft tokens per round) an engine accepts."""


# --8<-- [start:config]
@dataclass(frozen=True)
class EngineConfig:
    """The numbers that size an engine. They are checked here, once, when the config is made.

    Attributes:
        kv_capacity: KV slots (one per cached token position, across all requests).
        state_capacity: state slots (one per running request) for models with recurrent layers; None for
            runners that keep no per-request state (the toy).
        max_num_seqs: ``BatchEngine``: most requests running at once.
        max_batched_tokens: ``BatchEngine``: the token budget of one round (decode + prefill tokens).
        chunked_prefill: ``BatchEngine``: split a prompt that does not fit the remaining budget across rounds.
        pipeline: launch round N+1 before reading round N (cross-round execution).
        spec_width: draft tokens verified per decode round (speculative decoding; 0 = off). Read by the
            speculative engines (``speculative.py``), whose runner proposes and verifies them
            (``runtime.speculative.SpeculativeRunner``); ``Engine`` and ``BatchEngine`` plan one position per
            decode whatever it says (``runtime.factory.build_engine`` picks the engine that reads it).
        prefix_cache: keep finished prompts' KV slots (and state snapshots) to reuse for prompts that start
            with the same tokens (``prefix_cache.py``).
        prefix_block: tokens per block of the prefix index, which is also the snapshot interval: a cached
            prefix can be reused up to a block end or up to the end of a cached prompt.
        prefix_snapshots: snapshot slots (state copies) for the prefix cache; None when the model keeps no
            recurrent state (Qwen2, the toy), where every block end is a reuse point without a snapshot.
            ``build_engine`` sizes it for a hybrid model.
    """

    kv_capacity: int
    state_capacity: int | None = None
    max_num_seqs: int = 8
    max_batched_tokens: int = 256
    chunked_prefill: bool = False
    pipeline: bool = False
    spec_width: int = 0
    prefix_cache: bool = False
    prefix_block: int = 64
    prefix_snapshots: int | None = None

    def __post_init__(self) -> None:
        for name in ("kv_capacity", "max_num_seqs", "max_batched_tokens"):
            _check_int(name, getattr(self, name), 1)
        if self.state_capacity is not None:
            _check_int("state_capacity", self.state_capacity, 1)
        _check_int("spec_width", self.spec_width, 0, MAX_SPEC_WIDTH)
        _check_int("prefix_block", self.prefix_block, 1)
        if self.prefix_snapshots is not None:
            _check_int("prefix_snapshots", self.prefix_snapshots, 1)
        if self.spec_width and self.pipeline:
            raise ValueError("pipeline cannot be combined with speculative decoding (a speculative round "
                             "reads its tokens before the next round is planned)")
# --8<-- [end:config]


def _check_int(name: str, value: object, low: int, high: int | None = None) -> None:
    """Raise ValueError unless ``value`` is an int (not a bool) in ``low..high``; no upper bound if None."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if not (is_int and value >= low and (high is None or value <= high)):
        bounds = f"in {low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an integer {bounds}, got {value!r}")
