"""The toy demo (``python -m mini_deepinfer``) as the home page, the quick start and lessons 1, 2, 10 show it.

Scope: the demo's terminal output in its three modes (plain, cancelled, cross-round), the one-line refusal
of a cache that is too small, and a table of the plain demo's rounds (inputs, slots, what the cache holds,
what is committed) built from the engine's own trace events. Non-scope: explaining any of it (the pages do).
"""

from __future__ import annotations

from mini_deepinfer.__main__ import parse_args, run_demo
from mini_deepinfer.core.trace import TraceEvent
from site_scripts.build.common import run_module, run_shell

# Shown on lesson 2's page exactly like this; the doc test runs the page's copy and compares.
TOO_SMALL = "python -m mini_deepinfer --slots 4 2>&1 >/dev/null || echo \"exit code $?\""


def _ids(tokens: list[int]) -> str:
    return ", ".join(str(t) for t in tokens)


def _round_rows(events: list[TraceEvent]) -> list[str]:
    """One table row per scheduled request per round: what went in, where, and what came out."""
    written: dict[str, list[int]] = {}
    rows = []
    for event in events:
        if event.kind != "schedule":
            continue
        rid, r = event.request_id, event.round_id
        written.setdefault(rid, []).extend(event.data["inputs"])
        same_round = [e for e in events if e.round_id == r and e.request_id == rid]
        output = next(e.data["output"] for e in same_round if e.kind == "commit")
        reason = next((e.data["reason"] for e in same_round if e.kind == "finish"), None)
        next_input = f"— ({reason})" if reason else str(output[-1])
        rows.append(f"| {r} | `{rid}` | {_ids(event.data['inputs'])} | {_ids(event.data['slots'])} "
                    f"| {_ids(written[rid])} | {_ids(output)} | {next_input} |")
    return rows


def demo_rounds_table() -> str:
    """The body rows of a markdown table of the plain demo, one per round (the pages write the header)."""
    engine = run_demo(parse_args([]), print_line=lambda line: None)
    return "\n".join(_round_rows(engine.trace.events)) + "\n"


OUTPUTS = {
    "toy/demo.txt": lambda: run_module("mini_deepinfer"),
    "toy/demo-rounds.md": demo_rounds_table,
    "toy/cancel.txt": lambda: run_module("mini_deepinfer", "--cancel", "req-0", "--cancel-after-round", "2"),
    "toy/too-small.txt": lambda: run_shell(TOO_SMALL),
    "toy/pipeline.txt": lambda: run_module("mini_deepinfer", "--pipeline"),
}
