"""Speculative decoding as lessons 12-14, the two-model walkthrough and the performance page show it.

Scope: the CPU demo's three examples (``python -m mini_deepinfer.model_draft_demo``), a table of the rejection
example with one row per round (built from the runner's per-round details and the engine's trace), the
one-line refusal of a bad draft width, ``generate --speculative --stream --cancel-after-tokens`` on a random
tiny checkpoint and its perturbed copy (written to a temporary folder; the output names no path), and the
Markdown table of the committed cost benchmark. The benchmark is never run here: its timings change on every
run, so ``snippets/bench/speculative-cpu.json`` is committed as measured and only its table is rendered.
Non-scope: explaining any of it (the pages do).
"""

from __future__ import annotations

import tempfile

from mini_deepinfer.core.trace import span
from site_scripts.build.common import SNIPPETS, phrases, read_json, run_module, run_shell
from site_scripts.performance.zh_tables import translate

BENCH_JSON = SNIPPETS / "bench" / "speculative-cpu.json"
DEMO = "mini_deepinfer.model_draft_demo"
STREAM_CANCEL_ARGS = ("--speculative --device cpu --dtype float32 --prompt 'The capital of France is' --raw "
                      "--max-new-tokens 10 --cache-capacity 128 --draft-width 3 --stream "
                      "--cancel-after-tokens 2 --check-greedy")
# Shown on the walkthrough page (over two lines); the doc test runs the page's copy and compares.
BAD_WIDTH = ("python -m mini_deepinfer.generate --model weights/tiny --draft-model weights/tiny-draft "
             "--speculative --prompt hi --draft-width 0 2>&1 >/dev/null || echo \"exit code $?\"")


def stream_cancel() -> str:
    """The walkthrough's commands, with both checkpoints in a temporary folder instead of ``weights/``."""
    with tempfile.TemporaryDirectory() as folder:
        target, draft = f"{folder}/tiny", f"{folder}/tiny-draft"
        return run_shell(f"python -m mini_deepinfer.random_checkpoint --preset tiny --force {target} "
                         "> /dev/null\n"
                         f"python -m {DEMO} --write-draft {target} {draft} --force > /dev/null\n"
                         f"python -m mini_deepinfer.generate --model {target} --draft-model {draft} "
                         f"{STREAM_CANCEL_ARGS}")


def rounds_table() -> str:
    """Body rows of a Markdown table of the rejection example (the pages write the header).

    Columns: round, the draft's inputs (positions), its proposals, the target's verify inputs (positions),
    the target's argmax there, what was committed, the KV slots given back, the draft cache (computed ->
    kept), KV slots free after the round.
    """
    import torch

    from mini_deepinfer.core.request import SamplingParams
    from mini_deepinfer.core.trace import Trace
    from mini_deepinfer.model_draft_demo import EXAMPLES, MAX_NEW_TOKENS, PROMPT, demo_target, make_engine
    from mini_deepinfer.tools.checkpoints import perturbed_copy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command does
    try:
        example = EXAMPLES["rejection"]
        target = demo_target()
        engine = make_engine(target, perturbed_copy(target, example.noise, example.noise_seed), 3, Trace())
        engine.submit("A", list(PROMPT), SamplingParams(max_new_tokens=MAX_NEW_TOKENS))
        rows = []
        while engine.has_unfinished():
            engine.step()
            rows.append(_row(engine))
    finally:
        torch.set_num_threads(threads)
    return "".join(rows)


def _row(engine) -> str:
    events = [e for e in engine.trace.events if e.round_id == engine.round_id]
    commits = [e.data["tokens"] for e in events if e.kind == "commit"]
    freed = [s for e in events if e.kind == "rollback" for s in e.data["slots"]]
    free = f"{engine.kv_pool.num_free}/{engine.kv_pool.capacity}"
    committed = ", ".join(str(t) for t in commits[0]) if commits else "—"
    detail = engine.runner.details.get("A") if any(e.kind == "verify" for e in events) else None
    if detail is None:  # the prefill round
        (schedule,) = [e for e in events if e.kind == "schedule"]
        inputs = schedule.data["inputs"]
        return (f"| {engine.round_id} | — | — | prefill {inputs} ({span(0, len(inputs))}) | — | {committed} "
                f"| — | — | {free} |\n")
    prop, n = detail.proposal, detail.start
    topup = prop.inputs[0]
    draft_inputs = f"{topup} ({span(prop.topup_start, len(topup))})"
    if len(prop.inputs) > 1:
        draft_inputs += " + " + ", ".join(str(i[0]) for i in prop.inputs[1:])
    k = len(prop.drafts)
    return (f"| {engine.round_id} | {draft_inputs} | {prop.drafts} | {detail.target_inputs} "
            f"({span(n, k + 1)}) | {detail.target_choice} | {committed} | {freed or '—'} "
            f"| {detail.draft.computed} → {detail.draft.kept} | {free} |\n")


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def capture_memory_table() -> str:
    """Body rows of a Markdown table: what keeping per-position states costs, for the released shapes.

    Columns: preset, linear-attention layers, one sequence's state (conv windows + recurrent states, float32),
    the target's capture during one verify at k = 3 (k + 1 states), the draft's snapshots at k = 3 (k - 1
    states), and the KV of one token (full-attention layers, float32) for comparison.
    """
    from mini_deepinfer.models.config import config_from_hf_dict
    from mini_deepinfer.tools.checkpoints import preset

    rows = []
    for name in ("qwen3.5-0.8b", "qwen3.5-2b"):
        c = config = config_from_hf_dict(preset(name).config)
        conv = config.linear_conv_dim * (config.linear_conv_kernel_dim - 1) * 4
        recurrent = c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim * 4
        state = len(config.linear_attention_layers) * (conv + recurrent)
        kv = len(config.full_attention_layers) * 2 * config.num_key_value_heads * config.head_dim * 4
        rows.append(f"| `{name}` | {len(config.linear_attention_layers)} | {_mib(state)} | {_mib(4 * state)} "
                    f"| {_mib(2 * state)} | {kv / 2**10:.0f} KiB |\n")
    return "".join(rows)


def bench_table() -> str:
    """The committed CPU cost benchmark as a Markdown table."""
    from mini_deepinfer.bench.speculative import format_markdown

    return format_markdown(read_json(BENCH_JSON))


# the paragraph under the CPU cost table, in each language (``bench_reading``)
SPEC_READING = phrases(__name__)["spec_reading"]
SPECULATION = phrases(__name__)["speculation"]
SPEC_VERDICTS = phrases(__name__)["spec_verdicts"]


def bench_reading(lang: str) -> str:
    """What the CPU cost table says, made from its numbers (the performance page's paragraph under it)."""
    results = read_json(BENCH_JSON)["results"]
    spec = {name: r for name, r in results.items() if name != "plain"}
    forwards = [r["target_forward_vs_plain"] for r in spec.values()]
    drafts = [r["draft_share"] for r in spec.values()]
    best = min(spec, key=lambda name: spec[name]["wall_vs_plain"])
    faster = [name for name, r in spec.items() if r["wall_vs_plain"] < 1]
    verdict = SPEC_VERDICTS[lang]["faster" if faster else "slower"].format(
        speculation=SPECULATION[lang], best=best, ratio=f"{spec[best]['wall_vs_plain']:.2f}",
        faster=", ".join(f"`{name}`" for name in faster))
    return SPEC_READING[lang].format(forward_lo=f"{min(forwards):.2f}", forward_hi=f"{max(forwards):.2f}",
                                     draft_lo=f"{min(drafts):.0%}", draft_hi=f"{max(drafts):.0%}",
                                     verdict=verdict)


OUTPUTS = {
    "speculative/acceptance.txt": lambda: run_module(DEMO, "--cpu-example", "acceptance", "--trace-rounds"),
    "speculative/rejection.txt": lambda: run_module(DEMO, "--cpu-example", "rejection", "--trace-rounds",
                                                    "--width", "3"),
    "speculative/sampling.txt": lambda: run_module(DEMO, "--cpu-example", "sampling", "--trace-rounds"),
    "speculative/rejection-rounds.md": rounds_table,
    "speculative/capture-memory.md": capture_memory_table,
    "speculative/stream-cancel.txt": stream_cancel,
    "speculative/bad-width.txt": lambda: run_shell(BAD_WIDTH),
    "bench/speculative-cpu.md": bench_table,
    "bench/speculative-cpu.zh.md": lambda: translate(bench_table()),
    "performance/speculative-cpu.md": lambda: bench_reading("en"),
    "performance/speculative-cpu.zh.md": lambda: bench_reading("zh"),
}
