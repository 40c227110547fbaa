"""The run of the graph-execution note: which rounds run on static buffers, in which bucket, with what tokens.

Scope: a random tiny Qwen3.5 on the CPU, three greedy requests through a cross-round ``BatchEngine`` built
with ``use_graphs=True``, printed one line per round: what the round held, whether it ran eagerly or on a
bucket's static buffers (every bucket is laid out when the engine is built, and on a GPU its graph is
captured then), and what it committed. Then the same requests eagerly, and whether the tokens agree. On a
CPU nothing is captured: the static-buffer step runs as it is.
Non-scope: timing (``python -m mini_deepinfer.bench.rounds``, ``python -m mini_deepinfer.bench.gpu``).
"""

from __future__ import annotations

import torch

from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.models import build_model
from mini_deepinfer.models.presets import qwen3_5_config
from site_scripts.build.common import run_module

REQUESTS = {"A": (list(range(3, 59)), 12), "B": ([7, 8, 9], 4), "C": (list(range(60, 66)), 7)}
# four state slots for three requests: the first decode rounds are padded to the bucket of 4 rows
CONFIG = EngineConfig(kv_capacity=128, max_num_seqs=4, max_batched_tokens=64, pipeline=True)


def run_engine(model: torch.nn.Module, graphs: bool) -> tuple[dict[str, list[int]], list[str]]:
    """Run the requests; return each one's tokens and, with graphs, one line per round."""
    from mini_deepinfer.runtime.factory import build_engine

    engine = build_engine(model, CONFIG, use_graphs=graphs)
    for rid, (prompt, new) in REQUESTS.items():
        engine.submit(rid, prompt, SamplingParams(max_new_tokens=new))
    lines = []
    while engine.has_unfinished():
        before = dict(engine.runner.rounds_by_mode)
        known = set(engine.runner.graphs.buckets) if graphs else set()
        first = len(engine.trace.events)
        engine.step()
        lines.append(round_line(engine, engine.trace.events[first:], before, known))
    return {rid: r.output_token_ids for rid, r in engine.requests.items()}, lines


def round_line(engine, events, before: dict[str, int], known: set) -> str:
    """``round N  decode A, B, C  static buffers: 3 rows x 64 keys (new)  A+[..] ...``."""
    scheduled = [e for e in events if e.kind == "schedule"]
    phases = sorted({e.data["phase"] for e in scheduled})
    held = f"{'+'.join(phases) or '-':<14} {', '.join(e.request_id for e in scheduled) or '-':<8}"
    runner = engine.runner
    if runner.rounds_by_mode["graph"] > before["graph"]:
        new = set(runner.graphs.buckets) - known
        rows, context = runner.graphs.last
        shape = f"{rows} row{'s' if rows > 1 else ''} x {context} keys"
        how = f"static buffers: {shape}" + (" (new)" if new else "")
    elif runner.rounds_by_mode["eager"] > before["eager"]:
        how = "eager"
    else:
        how = "-"
    committed = " ".join(f"{e.request_id}+{e.data['tokens']}" for e in events if e.kind == "commit")
    return f"round {engine.round_id:>2}  {held}  {how:<38} {committed}".rstrip()


def run() -> str:
    torch.set_num_threads(1)  # one thread: the same sums, hence the same greedy tokens, on any machine
    model = build_model(qwen3_5_config("tiny", initializer_range=0.1), torch.float32, "cpu", seed=0)
    static, lines = run_engine(model, graphs=True)
    eager, _ = run_engine(model, graphs=False)
    verdict = "the same" if static == eager else "DIFFERENT"
    return "\n".join([*lines, f"tokens with graphs and eagerly: {verdict}"]) + "\n"


OUTPUTS = {"graphs/rounds.txt": lambda: run_module("site_scripts.notes.gen_graphs")}

if __name__ == "__main__":
    print(run(), end="")
