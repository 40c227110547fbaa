"""The A/B/C demo (``python -m mini_deepinfer.pipeline_demo``) as lessons 3, 4 and the walkthrough show it.

Scope: the demo's terminal output (synchronous, ``--pipeline``, and ``--toy``, which the lesson pages also run
in the browser), the one-line refusal without chunked prefill, and a table of the synchronous run, one row per
round, built from the engine's trace events and its pools after each round (the page's worker builds the same
rows for a reader's run with :class:`RoundSnapshots` and :func:`round_rows`). Non-scope: explaining any of it
(the pages do).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from mini_deepinfer.core.trace import Trace, TraceEvent, span
from site_scripts.build.common import run_module, run_shell

if TYPE_CHECKING:
    from mini_deepinfer.core.batch import BatchEngine

# Shown on lesson 4's page exactly like this; the doc test runs the page's copy and compares.
NO_CHUNKING = ("python -m mini_deepinfer.pipeline_demo --no-chunked-prefill 2>&1 >/dev/null "
               "|| echo \"exit code $?\"")


def _cells(events: list[TraceEvent]) -> tuple[str, str, str]:
    """What ran (request, phase, positions), what was committed, and who finished and gave slots back."""
    runs, commits, ends = [], [], []
    for e in events:
        if e.kind == "schedule":
            positions = span(e.data["start_pos"], len(e.data["inputs"]))
            runs.append(f"{e.request_id} {e.data['phase']} {positions}")
        elif e.kind == "commit":
            commits.append(f"{e.request_id} {', '.join(str(t) for t in e.data['tokens'])}")
        elif e.kind == "finish":
            ends.append(f"{e.request_id} {e.data['reason']}")
        elif e.kind == "free":
            state = "" if e.data.get("state_slot") is None else " + 1 state"
            ends.append(f"{e.request_id} frees {len(e.data['slots'])} KV{state}")
    return "; ".join(runs) or "—", "; ".join(commits) or "—", "; ".join(ends) or "—"


class RoundSnapshots:
    """Called after each ``step()`` of the demo (``drive``'s ``after_step``): the pools and the queue then."""

    def __init__(self, engine: BatchEngine) -> None:
        self.engine = engine
        self.after: dict[int, str] = {}

    def __call__(self) -> None:
        engine = self.engine
        kv, state = engine.kv_pool, engine.state_pool
        waiting = ", ".join(r.request_id for r in engine.waiting) or "—"
        self.after[engine.round_id] = (f"{kv.num_free}/{kv.capacity}, {kv.num_free - engine.reserved_kv()} "
                                       f"| {state.num_free}/{state.capacity} | {waiting}")


def round_rows(events: list[TraceEvent], after: dict[int, str]) -> list[str]:
    """The table's body rows: one per round, from the run's events and the snapshots after each round.

    Columns: round, what ran, tokens, commits, finishes and frees, KV free and unreserved after the round,
    state slots free after the round, requests still waiting.
    """
    by_round: dict[int, list[TraceEvent]] = defaultdict(list)
    for event in events:
        by_round[event.round_id].append(event)
    rows = []
    for r in sorted(after):
        runs, commits, ends = _cells(by_round[r])
        tokens = sum(len(e.data["inputs"]) for e in by_round[r] if e.kind == "schedule")
        rows.append(f"| {r} | {runs} | {tokens} | {commits} | {ends} | {after[r]} |")
    return rows


def rounds_table() -> str:
    """The body rows of a markdown table of the synchronous demo (the pages write the header)."""
    import torch

    from mini_deepinfer.pipeline_demo import DemoOptions, check_requests, demo_model, drive, make_engine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command does
    try:
        engine = make_engine(demo_model(), DemoOptions(), Trace())
        snapshots = RoundSnapshots(engine)
        drive(engine, check_requests(engine), after_step=snapshots)
    finally:
        torch.set_num_threads(threads)
    return "\n".join(round_rows(engine.trace.events, snapshots.after)) + "\n"


OUTPUTS = {
    "abc/demo.txt": lambda: run_module("mini_deepinfer.pipeline_demo"),
    "abc/pipeline.txt": lambda: run_module("mini_deepinfer.pipeline_demo", "--pipeline"),
    "abc/toy.txt": lambda: run_module("mini_deepinfer.pipeline_demo", "--toy"),
    "abc/no-chunking.txt": lambda: run_shell(NO_CHUNKING),
    "abc/rounds.md": rounds_table,
}
