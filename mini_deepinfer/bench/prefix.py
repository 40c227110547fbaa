"""``python -m mini_deepinfer.bench.prefix``: what the prefix cache saves, and costs when nothing is shared.

Scope: eight greedy requests on a random Qwen3.5 built in code (``--preset``, default ``small``), arriving one
round apart in a ``BatchEngine`` whose budget holds a whole prompt, in two workloads measured side by side:

* ``shared``: every prompt is one system prompt (``--system-tokens``, default 1,024 random token ids) followed
  by its own 32 tokens, as a chat service prepends one system prompt to every user message;
* ``unshared``: every prompt has its own random first ``--system-tokens`` tokens: nothing can be reused, and
  the cache only costs (snapshots kept, blocks indexed).

Each workload runs with the prefix cache off and on, cases interleaved over ``--repeats`` runs. It reports the
time to first token (submission to first token; median over requests, and request 1 vs the others), the
prompt tokens computed (prefill work) and reused, the run's wall time, and checks that the cache changes no
token and leaks no slot (free + cached == capacity, and free == capacity once the cache is cleared).
It also gives the bytes of one snapshot and of one token's KV, for this preset and for Qwen3.5-0.8B.

Non-scope: real weights, sampling, speculative decoding, devices it did not run on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mini_deepinfer.bench import common
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.tools.cli import OneLineParser, run_command
from mini_deepinfer.tools.records import write_record

if TYPE_CHECKING:
    from mini_deepinfer.models.layers import CausalLM

REQUESTS = 8
OWN_TOKENS = 32
BLOCK = 64
SEED = 0


@dataclass
class CaseRun:
    """One run of one workload with the cache off or on."""

    first_token_s: list[float]
    computed: int  # prompt tokens the model computed
    reused: int  # prompt tokens taken from the cache
    wall_s: float
    outputs: list[list[int]]
    slots_ok: bool


def prompts(workload: str, system_tokens: int, vocab: int) -> list[list[int]]:
    """The eight prompts: one shared system prompt, or eight different ones, each with its own 32 tokens."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    def draw(n: int) -> list[int]:
        return torch.randint(0, vocab, (n,), generator=gen).tolist()
    system = draw(system_tokens)
    return [(system if workload == "shared" else draw(system_tokens)) + draw(OWN_TOKENS)
            for _ in range(REQUESTS)]


# --8<-- [start:run_case]
def run_case(model: CausalLM, prompt_list: list[list[int]], cache_on: bool, new_tokens: int) -> CaseRun:
    """The requests arrive one round apart; with the cache, each finds what the ones before it indexed."""
    from mini_deepinfer.runtime.factory import build_engine

    longest = max(len(p) for p in prompt_list)
    config = EngineConfig(kv_capacity=REQUESTS * (longest + new_tokens), max_num_seqs=REQUESTS,
                          max_batched_tokens=longest + REQUESTS, prefix_cache=cache_on, prefix_block=BLOCK)
    engine = build_engine(model, config)
    start = time.perf_counter()
    for i, prompt in enumerate(prompt_list):
        engine.submit(f"r{i}", prompt, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
        engine.step()
    engine.run()
    wall = time.perf_counter() - start
    reqs = list(engine.requests.values())
    cached = engine.prefix_cache.cached_slots() if cache_on else 0
    slots_ok = engine.kv_pool.num_free + cached == engine.kv_pool.capacity
    engine.clear_prefix_cache()
    slots_ok = slots_ok and engine.kv_pool.num_free == engine.kv_pool.capacity
    return CaseRun([r.first_token_at - r.submitted_at for r in reqs],
                   sum(r.prompt_len - r.cached_prompt_tokens for r in reqs),
                   sum(r.cached_prompt_tokens for r in reqs), wall, [r.output_token_ids for r in reqs],
                   slots_ok)
# --8<-- [end:run_case]


def memory_per_snapshot(preset: str) -> dict[str, int]:
    """Bytes of one prefix snapshot (float32 states) and of one token's KV (float32), from the shapes."""
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.tools.memory import cache_bytes

    one = cache_bytes(qwen3_5_config(preset), 1, 1, 4)
    return {"snapshot_bytes": one["state"], "kv_bytes_per_token": one["kv"]}


def case_result(runs: list[CaseRun]) -> dict[str, Any]:
    ms = [[1e3 * t for t in run.first_token_s] for run in runs]
    return {
        "ttft_ms_median": statistics.median(statistics.median(m) for m in ms),
        "ttft_ms_first_request": statistics.median(m[0] for m in ms),
        "ttft_ms_later_requests": statistics.median(statistics.median(m[1:]) for m in ms),
        "wall_s_median": statistics.median(r.wall_s for r in runs),
        "prompt_tokens_computed": runs[0].computed, "prompt_tokens_reused": runs[0].reused,
    }


def run_all(model: CausalLM, system_tokens: int, new_tokens: int, repeats: int) -> dict[str, list[CaseRun]]:
    cases = {f"{w} {'on' if on else 'off'}": (w, on) for w in ("shared", "unshared") for on in (False, True)}
    lists = {w: prompts(w, system_tokens, model.config.vocab_size) for w in ("shared", "unshared")}
    run_case(model, lists["shared"][:1], False, 1)  # warm-up
    runs: dict[str, list[CaseRun]] = {name: [] for name in cases}
    for _ in range(repeats):  # interleaved, so a change in the machine's load hits every case alike
        for name, (w, on) in cases.items():
            runs[name].append(run_case(model, lists[w], on, new_tokens))
    return runs


def build_report(argv: list[str], a: argparse.Namespace, model: CausalLM, device, dtype,
                 runs: dict[str, list[CaseRun]]) -> dict[str, Any]:
    import torch

    config = {"preset": a.preset, "model": common.model_description(a.preset, model), "requests": REQUESTS,
              "system_tokens": a.system_tokens, "own_tokens": OWN_TOKENS, "new_tokens": a.new_tokens,
              "prefix_block": BLOCK, "arrival": "one request per round", "repeats": a.repeats,
              "cpu_threads": torch.get_num_threads(),
              "memory": {a.preset: memory_per_snapshot(a.preset),
                         "qwen3.5-0.8b": memory_per_snapshot("qwen3.5-0.8b")}}
    same = all(runs[f"{w} on"][i].outputs == runs[f"{w} off"][0].outputs
               for w in ("shared", "unshared") for i in range(a.repeats))
    return {**common.provenance("prefix", argv, device, dtype), "config": config,
            "results": {name: case_result(case_runs) for name, case_runs in runs.items()},
            "checks": {"tokens_identical": same,
                       "slots_returned": all(r.slots_ok for case in runs.values() for r in case)}}


# --8<-- [start:table]
HEADER = ("case", "TTFT median ms", "TTFT request 1 ms", "TTFT requests 2-8 ms", "prompt tokens computed",
          "reused", "wall s")


def table_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    return [(name, f"{r['ttft_ms_median']:.0f}", f"{r['ttft_ms_first_request']:.0f}",
             f"{r['ttft_ms_later_requests']:.0f}", str(r["prompt_tokens_computed"]),
             str(r["prompt_tokens_reused"]), f"{r['wall_s_median']:.2f}")
            for name, r in report["results"].items()]


def describe(report: dict[str, Any]) -> str:
    c = report["config"]
    return (f"device={common.where(report['device'])}, cpu_threads={c['cpu_threads']}, "
            f"torch={report['torch']}, dtype={report['dtype']}, preset={c['preset']} "
            f"({c['model']['parameters']} parameters, random weights), {c['requests']} requests of "
            f"{c['system_tokens']}+{c['own_tokens']} prompt tokens, new_tokens={c['new_tokens']}, "
            f"block={c['prefix_block']}, repeats={c['repeats']}, "
            f"commit={(report['source_sha']['sha'] or '?')[:7]}, date={report['date']}"
            f"{common.load_suffix(report['device'])}")
# --8<-- [end:table]


def effects(report: dict[str, Any]) -> dict[str, float]:
    """The two figures the cache is for, from the medians: how many times sooner requests 2-8 reach their
    first token with a shared prefix, and the change of the run's wall time when nothing is shared."""
    r = report["results"]
    later = r["shared off"]["ttft_ms_later_requests"] / r["shared on"]["ttft_ms_later_requests"]
    wall = r["unshared on"]["wall_s_median"] / r["unshared off"]["wall_s_median"]
    return {"later_ttft_speedup": later, "unshared_wall_change": wall - 1}


def effects_line(report: dict[str, Any]) -> str:
    e = effects(report)
    return (f"`shared: requests 2-8 reach their first token {e['later_ttft_speedup']:.1f}x sooner with the "
            f"cache; unshared: the cache changes the run's wall time by "
            f"{100 * e['unshared_wall_change']:+.1f} %`")


def format_table(report: dict[str, Any]) -> str:
    checks = report["checks"]
    verdict = f"tokens_identical={checks['tokens_identical']}, slots_returned={checks['slots_returned']}"
    return "\n".join([describe(report), *common.text_table([HEADER, *table_rows(report)]), verdict,
                      effects_line(report)]) + "\n"


def format_markdown(report: dict[str, Any]) -> str:
    """The table in Markdown, for the performance page (rendered from the committed JSON)."""
    lines = common.markdown_table(describe(report), HEADER, table_rows(report), report["checks"])
    return "\n".join([*lines, "", effects_line(report)]) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m mini_deepinfer.bench.prefix",
                      description="Time to first token and prefill work of 8 requests with and without the "
                                  "prefix cache, with a shared system prompt and with nothing shared.")
    common.add_common_options(p, repeats=3, repeats_help="measured runs per case")
    p.add_argument("--system-tokens", type=int, default=1024,
                   help="tokens of the system prompt (default 1024)")
    p.set_defaults(new_tokens=8)
    return p


def check_sizes(a: argparse.Namespace, device, dtype) -> None:
    """Refuse, in one line and before the prompts or the model exist, a prompt past the preset's
    ``max_position_embeddings`` or caches larger than the device's memory (the largest case: the prefix cache
    on, with a snapshot slot per block)."""
    longest = a.system_tokens + OWN_TOKENS
    what = (f"--system-tokens {a.system_tokens} (plus {OWN_TOKENS} own tokens) with --new-tokens "
            f"{a.new_tokens}")
    common.check_preset_positions(a.preset, longest + a.new_tokens, what)
    kv = REQUESTS * (longest + a.new_tokens)
    common.check_cache_memory(a.preset, kv, REQUESTS + kv // BLOCK + REQUESTS, 1, dtype, device, what)


def run(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    common.check_common_options(a, {"--repeats": a.repeats, "--new-tokens": a.new_tokens,
                                    "--threads": a.threads, "--system-tokens": a.system_tokens})
    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.runtime.device import resolve_device, resolve_dtype

    device, dtype = resolve_device(a.device), resolve_dtype(a.dtype)
    check_sizes(a, device, dtype)
    model = build_model(qwen3_5_config(a.preset), dtype, device, seed=SEED)
    load_before = os.getloadavg()
    runs = run_all(model, a.system_tokens, a.new_tokens, a.repeats)
    report = build_report(argv, a, model, device, dtype, runs)
    report["device"]["load_average_1m"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    if a.output is not None:
        write_record(a.output, report)
    print(format_table(report), end="")
    return 0 if report["checks"]["tokens_identical"] and report["checks"]["slots_returned"] else 1


def main(argv: list[str] | None = None) -> int:
    return run_command(run, argv)


if __name__ == "__main__":
    sys.exit(main())
