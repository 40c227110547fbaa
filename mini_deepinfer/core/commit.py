"""Result processing: which sampled tokens become output, and when a request stops.

Scope: the two rules the engine applies to every token it reads back: tokens are committed in order, one at
a time, and the stop conditions (eos, length) are checked after every token; whatever was computed after a
stop is discarded. ``Delivery`` is what one request hands its caller in one round (a commit group).
Non-scope: the engine's bookkeeping around a commit (``Engine.commit_round`` in ``engine.py``: stale rounds,
finishing, giving back rejected KV slots, releasing), choosing what runs, and computing tokens (runners).
This module imports nothing outside the standard library and knows nothing of the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from .request import FinishReason, Request


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

