"""The A/B/C demo (``python -m mini_deepinfer.pipeline_demo``) as lessons 3, 4 and the walkthrough show it.

Scope: the demo's terminal output (synchronous and ``--pipeline``), the one-line refusal without chunked
prefill, and a table of the synchronous run, one row per round, built from the engine's trace events and its
pools after each round. Non-scope: explaining any of it (the pages do).
"""

from __future__ import annotations

from collections import defaultdict

from mini_deepinfer.core.trace import Trace, TraceEvent, span
from site_scripts.common import run_module, run_shell

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


def rounds_table() -> str:
    """The body rows of a markdown table of the synchronous demo (the pages write the header).

    Columns: round, what ran, tokens, commits, finishes and frees, KV free and unreserved after the round,
    state slots free after the round, requests still waiting.
    """
    import torch

    from mini_deepinfer.pipeline_demo import DemoOptions, check_requests, demo_model, drive, make_engine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command does
    try:
        engine = make_engine(demo_model(), DemoOptions(), Trace())
        after: dict[int, str] = {}

        def snapshot() -> None:
            kv, state = engine.kv_pool, engine.state_pool
            waiting = ", ".join(r.request_id for r in engine.waiting) or "—"
            after[engine.round_id] = (f"{kv.num_free}/{kv.capacity}, {kv.num_free - engine.reserved_kv()} "
                                      f"| {state.num_free}/{state.capacity} | {waiting}")

        drive(engine, check_requests(engine), after_step=snapshot)
    finally:
        torch.set_num_threads(threads)
    by_round: dict[int, list[TraceEvent]] = defaultdict(list)
    for event in engine.trace.events:
        by_round[event.round_id].append(event)
    rows = []
    for r in sorted(after):
        runs, commits, ends = _cells(by_round[r])
        tokens = sum(len(e.data["inputs"]) for e in by_round[r] if e.kind == "schedule")
        rows.append(f"| {r} | {runs} | {tokens} | {commits} | {ends} | {after[r]} |")
    return "\n".join(rows) + "\n"


OUTPUTS = {
    "abc/demo.txt": lambda: run_module("mini_deepinfer.pipeline_demo"),
    "abc/pipeline.txt": lambda: run_module("mini_deepinfer.pipeline_demo", "--pipeline"),
    "abc/no-chunking.txt": lambda: run_shell(NO_CHUNKING),
    "abc/rounds.md": rounds_table,
}
