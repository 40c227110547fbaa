"""Result processing: which sampled tokens become output, when a request stops, when slots return.

Scope: reading a round's sampled tokens back into requests. Tokens are committed in order, one at a
time, and the stop conditions (eos, length) are checked after every token; whatever was computed after
a stop is discarded. A finished request's slots are released only when no launched round still uses them.
After a speculative round (a group of accepted drafts plus one token) a running request's KV is trimmed to
its committed prefix (``Engine.rollback``).
Non-scope: choosing what runs (``engine.py``, ``batch.py``) and computing tokens (runners).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .plan import RoundPlan, RoundResult
from .request import FinishReason, Request

if TYPE_CHECKING:
    from .engine import Engine


@dataclass(frozen=True)
class Delivery:
    """Tokens handed to the user for one request in one round (a commit group)."""

    request_id: str
    tokens: tuple[int, ...]
    finish_reason: FinishReason | None = None


# --8<-- [start:stop_check]
def stop_reason(req: Request) -> FinishReason | None:
    """The stop check, run after every committed token: eos first, then length."""
    params = req.params
    if not params.ignore_eos and req.output_token_ids[-1] in params.eos_token_ids:
        return FinishReason.EOS
    if len(req.output_token_ids) >= params.max_new_tokens:
        return FinishReason.LENGTH
    return None
# --8<-- [end:stop_check]


# --8<-- [start:commit_tokens]
def commit_tokens(req: Request, tokens: list[int]) -> tuple[list[int], list[int], FinishReason | None]:
    """Append ``tokens`` one at a time; stop at the first stop condition.

    Returns the committed tokens, the discarded rest, and the finish reason (None if still running).
    """
    for i, token in enumerate(tokens):
        req.output_token_ids.append(token)
        reason = stop_reason(req)
        if reason is not None:
            return tokens[: i + 1], tokens[i + 1 :], reason
    return list(tokens), [], None
# --8<-- [end:commit_tokens]


# --8<-- [start:commit_round]
def commit_round(engine: Engine, plan: RoundPlan, result: RoundResult) -> list[Delivery]:
    """Process one round that the CPU has just read. Returns what each request delivered."""
    deliveries: list[Delivery] = []
    for seq in plan.seqs:
        req = engine.requests[seq.request_id]
        req.rounds_in_flight -= 1
        if seq.sample:
            req.samples_in_flight -= 1
            tokens = result.tokens.get(seq.request_id, [])
            if req.finished:  # it stopped in an earlier round (or was cancelled): this work is stale
                engine.trace.emit(engine.round_id, "discard", req.request_id, tokens=tokens,
                                  round=plan.round_id, why=f"already finished: {req.finish_reason.value}")
            else:
                _trace_verify(engine, req, result)
                deliveries.append(_commit_sampled(engine, plan.round_id, req, tokens))
                if seq.spec_width and not req.finished:
                    engine.rollback(req)  # free the KV slots of rejected draft positions
        engine.release_if_idle(req)
    return deliveries
# --8<-- [end:commit_round]


def _trace_verify(engine: Engine, req: Request, result: RoundResult) -> None:
    """Speculative rounds: record what the draft proposed and how many drafts the target accepted."""
    verified = result.extra.get("verify", {}).get(req.request_id)
    if verified is not None:
        engine.trace.emit(engine.round_id, "verify", req.request_id, **verified)


def _commit_sampled(engine: Engine, round_id: int, req: Request, tokens: list[int]) -> Delivery:
    kept, dropped, reason = commit_tokens(req, tokens)
    if kept:
        if req.first_token_at is None:
            req.first_token_at = time.perf_counter()
        req.committed_groups.append(list(kept))
        engine.trace.emit(engine.round_id, "commit", req.request_id, tokens=kept, round=round_id,
                          output=list(req.output_token_ids))
    if dropped:
        engine.trace.emit(engine.round_id, "discard", req.request_id, tokens=dropped, round=round_id,
                          why=f"after {reason.value}")
    if reason is not None:
        engine.finish(req, reason)
    return Delivery(req.request_id, tuple(kept), reason)
