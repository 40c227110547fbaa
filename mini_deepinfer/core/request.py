"""Requests and their sampling parameters: what a user submits and what the engine tracks.

Scope: the data a request carries through its life (prompt, sampling parameters, committed output,
status, finish reason, the cache slots it holds) and the validation of user input.
Non-scope: scheduling (``engine.py``, ``batch.py``), the decision to stop (``commit.py``),
tensors of any kind (this module imports nothing outside the standard library). The checks here are the only
checks of sampling parameters: sampling relies on them.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field

MIN_TEMPERATURE = 1e-5
"""The smallest temperature other than 0. Much smaller ones turn the scaled logits into infinities, and one
below float32's range (1e-320) becomes 0, so sampling would divide by zero. DeepInfer clamps a smaller
temperature up to this floor (its ``SAMPLING_EPS``); here it is refused instead of silently changed."""

MAX_SEED = 2**64 - 1
"""The largest seed a torch generator takes."""


class FinishReason(str, enum.Enum):
    """Why a request stopped. The string values appear in traces and run records."""

    LENGTH = "length"  # max_new_tokens committed
    EOS = "eos"  # an end-of-sequence token was committed
    CANCELLED = "cancelled"  # Engine.cancel() was called
    ERROR = "error"  # the runner failed while the request was in a round


class RequestStatus(enum.Enum):
    """Where a request is in its life."""

    WAITING = "waiting"  # submitted, holds no slots yet
    RUNNING = "running"  # admitted: holds slots, being prefilled or decoded
    FINISHED = "finished"  # stopped; its slots return once no launched round still uses them


@dataclass(frozen=True)
class SamplingParams:
    """How to choose output tokens and when to stop.

    Attributes:
        max_new_tokens: stop after committing this many tokens (0 finishes at submit).
        eos_token_ids: committing any of these stops the request (the token is kept in the output).
        ignore_eos: keep going past eos tokens (benchmarks use this for fixed-length runs).
        temperature: 0.0 means greedy (argmax); otherwise logits are divided by it before sampling
            (at least ``MIN_TEMPERATURE``, finite).
        top_k: keep only the k most likely tokens (0 = off).
        top_p: keep the smallest set of tokens whose probability reaches top_p (1.0 = off).
        seed: seed of this request's own random generator, so its samples do not depend on its neighbours
            (0..``MAX_SEED``).
    """

    max_new_tokens: int = 16
    eos_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        if not (self.temperature == 0 or MIN_TEMPERATURE <= self.temperature < math.inf):  # NaN fails too
            raise ValueError(f"temperature must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:g}, "
                             f"got {self.temperature}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not (isinstance(self.seed, int) and 0 <= self.seed <= MAX_SEED):
            raise ValueError(f"seed must be an integer in 0..2**64-1, got {self.seed!r}")
        object.__setattr__(self, "eos_token_ids", tuple(self.eos_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class Request:
    """One request as the engine sees it.

    The cache invariant: once a request is decoding, its cache holds ``prompt + output[:-1]``
    (``num_computed`` positions) and ``output[-1]`` is the input of its next round.
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    output_token_ids: list[int] = field(default_factory=list)
    committed_groups: list[list[int]] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: FinishReason | None = None
    error: str | None = None
    kv_slots: list[int] = field(default_factory=list)
    state_slot: int | None = None
    num_computed: int = 0  # positions launched into the cache (committed or still in flight)
    cached_prompt_tokens: int = 0  # prompt positions reused from the prefix cache, never computed here
    rounds_in_flight: int = 0  # launched rounds that include this request and are not read yet
    samples_in_flight: int = 0  # launched, unread rounds that sample this request's next token
    slots_released: bool = False
    arrival_round: int = 0
    submitted_at: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    finished_at: float | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def prefill_done(self) -> bool:
        return self.num_computed >= self.prompt_len

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    # --8<-- [start:max_cache_tokens]
    def max_cache_tokens(self) -> int:
        """KV slots this request may need at most: prompt + max_new_tokens.

        A synchronous run needs one fewer (the last output never enters the cache); a cross-round
        run may compute one token after the stop, so the engine reserves the larger number.
        """
        return self.prompt_len + self.params.max_new_tokens
    # --8<-- [end:max_cache_tokens]


def validate_prompt(request_id: str, prompt_token_ids: object) -> tuple[int, ...]:
    """Return the prompt as a tuple of ints, or raise ValueError with one clear line."""
    if not isinstance(request_id, str) or not request_id:
        raise ValueError(f"request id must be a non-empty string, got {request_id!r}")
    try:
        tokens = tuple(prompt_token_ids)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{request_id}: prompt must be a sequence of token ids") from None
    if not tokens:
        raise ValueError(f"{request_id}: prompt is empty")
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
        raise ValueError(f"{request_id}: prompt token ids must be integers >= 0")
    return tokens
