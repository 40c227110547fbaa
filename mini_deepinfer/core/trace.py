"""Structured trace events: what happened in each round, in the order it happened.

Scope: one small record per event (schedule, launch, read, commit, discard, finish, free, ...), a
``Trace`` that collects them, and the plain-text formatting the demos print. The site's scripts and
pictures read the same events, so what a lesson shows is what the engine did.
Non-scope: deciding anything; the engine emits events, nothing reads them back to make decisions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TraceEvent:
    """One thing the engine did. ``data`` holds the event's details (token ids, slots, reasons)."""

    round_id: int
    kind: str
    request_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trace:
    """Collects events; optionally prints each one as it happens."""

    events: list[TraceEvent] = field(default_factory=list)
    listener: Callable[[TraceEvent], None] | None = None

    def emit(self, round_id: int, kind: str, request_id: str | None = None, **data: Any) -> None:
        event = TraceEvent(round_id, kind, request_id, data)
        self.events.append(event)
        if self.listener is not None:
            self.listener(event)

    def of_kind(self, *kinds: str) -> list[TraceEvent]:
        return [e for e in self.events if e.kind in kinds]


def _ids(tokens: object) -> str:
    if isinstance(tokens, (list, tuple)):
        return "[" + ", ".join("?" if t is None else str(t) for t in tokens) + "]"
    return str(tokens)


def span(start: int, n: int) -> str:
    """Positions ``start .. start + n - 1`` as text: ``"7"`` for one, ``"7..10"`` for four."""
    return str(start) if n == 1 else f"{start}..{start + n - 1}"


def format_event(event: TraceEvent) -> str:
    """One line of plain text for an event, as the demos print it."""
    d = event.data
    head = f"[round {event.round_id}] {event.kind:<8} {event.request_id or ''}".rstrip()
    if event.kind == "submit":
        eos = f" eos={_ids(d['eos'])}" if d.get("eos") else ""
        return f"{head} prompt={_ids(d['prompt'])} max_new_tokens={d['max_new_tokens']}{eos}"
    if event.kind == "schedule":
        return (f"{head} {d['phase']:<7} inputs={_ids(d['inputs'])} "
                f"positions={span(d['start_pos'], len(d['inputs']))} slots={_ids(d['slots'])}")
    late = f" (from round {d['round']})" if d.get("round", event.round_id) != event.round_id else ""
    if event.kind == "commit":
        return f"{head} +{_ids(d['tokens'])}{late} -> output {_ids(d['output'])}"
    if event.kind == "discard":
        return f"{head} {_ids(d['tokens'])}{late} ({d['why']})"
    if event.kind == "launch":
        return f"{head} round {d['round']}: {', '.join(d['requests'])} ({d['tokens']} tokens)"
    if event.kind == "read":
        return f"{head} round {d['round']}"
    if event.kind == "finish":
        return f"{head} {d['reason']}"
    if event.kind == "free":
        state = f" state slot {d['state_slot']}" if d.get("state_slot") is not None else ""
        return f"{head} slots={_ids(d['slots'])}{state} (free {d['free']}/{d['capacity']})"
    details = " ".join(f"{k}={_ids(v)}" for k, v in d.items())
    return f"{head} {details}".rstrip()
