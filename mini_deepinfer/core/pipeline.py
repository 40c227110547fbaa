"""In-flight state for cross-round execution: the round launched but not read yet.

Scope: ``StoppingDecodePipeline`` holds at most one launched round. Each ``Engine.step()`` launches
round N+1 and then swaps it in, getting round N back to read and commit. A request that stopped in
round N is already part of round N+1; its token there is discarded at commit and its slots return only
after round N+1 is read (the engine's ``release_if_idle``). On CPU nothing overlaps, yet the protocol is
the same: launch, then read one round later.
Non-scope: device streams and events (the model runner), scheduling.
"""

from __future__ import annotations

from .plan import RoundPlan

Launched = tuple[RoundPlan, object]  # a round plan and the runner's handle for it


# --8<-- [start:pipeline]
class StoppingDecodePipeline:
    """Holds the one round whose tokens the CPU has not read yet."""

    def __init__(self) -> None:
        self._pending: Launched | None = None

    def swap(self, launched: Launched | None) -> Launched | None:
        """Put round N+1 in flight; return round N, which the caller reads and commits now."""
        previous, self._pending = self._pending, launched
        return previous
# --8<-- [end:pipeline]

    @property
    def in_flight(self) -> bool:
        """True while a launched round has not been handed back for reading."""
        return self._pending is not None

    def drop(self) -> None:
        """Forget the round in flight without reading it (after a runner failure)."""
        self._pending = None
