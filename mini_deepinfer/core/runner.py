"""The runner protocol: the three calls the engine makes on whatever computes its rounds.

Scope: ``Runner``, what the engine asks of a runner. ``launch`` starts a round and must not wait for it;
``read`` waits for the round's sampled tokens; ``release`` forgets a finished request. A synchronous engine
calls ``launch`` and ``read`` back to back; a cross-round engine launches round N+1 before it reads round N.
(A runner that drafts also goes back to a committed length: ``speculative.DraftingRunner``.)
Non-scope: any implementation. The toy runner (``core/toy.py``) needs only the standard library; the model
runners (``runtime/``) need PyTorch.
"""

from __future__ import annotations

from typing import Protocol

from .plan import RoundPlan, RoundResult


# --8<-- [start:runner]
class Runner(Protocol):
    """Turns round plans into sampled tokens."""

    def launch(self, plan: RoundPlan) -> object:
        """Start computing ``plan``; return a handle. Must not wait for the results."""
        ...

    def read(self, handle: object) -> RoundResult:
        """Wait for the round behind ``handle`` and return its sampled tokens."""
        ...

    def release(self, request_id: str) -> None:
        """Forget a finished request (its generator, its device-side last token, its snapshots)."""
        ...
# --8<-- [end:runner]
