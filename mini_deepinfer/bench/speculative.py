"""``python -m mini_deepinfer.bench.speculative``: what speculative decoding costs, and when it pays.

Scope: one greedy request (a seeded random prompt, a fixed number of new tokens, eos ignored) on a random
Qwen3.5 built in code, decoded plainly and then speculatively with four drafts and a few widths:

* ``always``: an exact copy of the target (every draft is accepted; the draft costs as much as the target);
* ``sometimes``: the copy with noise on its weights (some drafts are accepted);
* ``never``: the copy with its output head shifted by one token id (its first draft is always wrong);
* ``half-depth``: the target's embedding, first half of its layers and its head (a draft at about half the
  cost that agrees often).

The target's second half is damped (its output projections are multiplied by ``DAMPING``), so that its first
half decides most tokens and the half-depth draft agrees with it often, as a trained small model agrees with a
trained large one. The weights are otherwise random.

For each case it measures the request's wall time (median over repetitions, cases interleaved), target
forwards and draft forwards per committed token, and the share of drafts accepted; it checks that every
case commits the tokens of plain decoding and returns every slot, prints a table and writes JSON.

Non-scope: sampling, batching several requests, real weights, and any device the command did not run on.
On CPU a forward of a small model costs about the same for 1 and for k + 1 tokens only up to the overhead
of the per-position state capture; the table shows where speculation is slower than plain decoding.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mini_deepinfer.bench import common
from mini_deepinfer.core.engine import MAX_SPEC_WIDTH, EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.tools.cli import OneLineParser, UsageError, positive_ints, printable, run_command
from mini_deepinfer.tools.records import write_record

if TYPE_CHECKING:  # torch and the models load only once the flags are checked (``resolve_settings``)
    import torch

    from mini_deepinfer.models.layers import CausalLM
    from mini_deepinfer.runtime.speculative.draft import ModelDraft

DAMPING = 0.1
NOISE = 0.1
REPORT_KEYS = ("schema", "benchmark", "command", "date", "source_sha", "device", "dtype", "torch", "config",
               "results", "checks")
DRAFTS = {
    "always": "exact copy of the target",
    "sometimes": f"copy + noise {NOISE} x each weight's std",
    "never": "copy, output head shifted by one token id",
    "half-depth": "first half of the target's layers",
}


@dataclass(frozen=True)
class Workload:
    """One request: a random prompt and a fixed number of greedy tokens."""

    prompt_len: int = 32
    new_tokens: int = 64
    seed: int = 0

    def prompt(self, vocab_size: int) -> list[int]:
        import torch

        generator = torch.Generator().manual_seed(self.seed)
        return torch.randint(0, vocab_size, (self.prompt_len,), generator=generator).tolist()

    @property
    def kv_capacity(self) -> int:
        return self.prompt_len + self.new_tokens


def build_target(preset: str, dtype: torch.dtype, device: torch.device, seed: int) -> CausalLM:
    """A random Qwen3.5 of the preset's shape whose second half of layers is damped (see the module text)."""
    import torch

    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config

    model = build_model(qwen3_5_config(preset), dtype, device, seed=seed)
    half = model.config.num_hidden_layers // 2
    with torch.no_grad():
        for layer in model.model.layers[half:]:
            for name, param in layer.named_parameters():
                if name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")):
                    param.mul_(DAMPING)
    return model


# --8<-- [start:drafts]
def shifted_head_copy(target: CausalLM) -> CausalLM:
    """A copy whose logit for token t is the target's logit for t - 1: its argmax is never the target's."""
    import torch

    draft = copy.deepcopy(target)
    with torch.no_grad():
        draft.lm_head.weight = torch.nn.Parameter(torch.roll(target.lm_head.weight.detach(), 1, dims=0))
    return draft


def half_depth_copy(target: CausalLM) -> CausalLM:
    """The target's embedding, its first half of layers, its final norm and head."""
    from mini_deepinfer.models import build_model

    layers = target.config.num_hidden_layers // 2
    config = dataclasses.replace(target.config, num_hidden_layers=layers,
                                 layer_types=target.config.layer_types[:layers])
    weight = target.lm_head.weight
    draft = build_model(config, weight.dtype, weight.device)
    kept = {k: v for k, v in target.state_dict().items()
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    draft.load_state_dict(kept)
    return draft
# --8<-- [end:drafts]


def make_draft(kind: str, target: CausalLM) -> CausalLM:
    from mini_deepinfer.tools.checkpoints import perturbed_copy

    if kind == "always":
        return copy.deepcopy(target)
    if kind == "sometimes":
        return perturbed_copy(target, NOISE, seed=1)
    if kind == "never":
        return shifted_head_copy(target)
    return half_depth_copy(target)


@dataclass
class CaseRun:
    """One timed run of one case."""

    wall_s: float
    draft_s: float  # time inside ModelDraft.propose (the draft's forwards and its choices)
    outputs: list[int]
    target_forwards: int
    draft_forwards: int
    proposed: int
    accepted: int
    slots_returned: bool


def run_case(target: CausalLM, draft: CausalLM | None, width: int, workload: Workload,
             prompt: list[int]) -> CaseRun:
    """Decode the request once (plainly when ``draft`` is None) and count what it cost."""
    from mini_deepinfer.runtime.device import synchronize
    from mini_deepinfer.runtime.factory import build_engine

    cap = workload.kv_capacity
    config = EngineConfig(kv_capacity=cap, spec_width=width)
    engine = build_engine(target, config, draft=draft, batching=False)
    runner = engine.runner
    draft_s = _time_proposals(runner.draft) if draft is not None else [0.0]
    device = target.lm_head.weight.device
    gc.collect()
    synchronize(device)
    start = time.perf_counter()
    engine.submit("req", prompt, SamplingParams(max_new_tokens=workload.new_tokens, ignore_eos=True))
    engine.run()
    synchronize(device)
    wall_s = time.perf_counter() - start
    stats = runner.stats if draft is not None else {}
    free = engine.kv_pool.num_free == cap and engine.state_pool.num_free == 1
    if draft is not None:
        free = free and runner.draft.free_kv_slots() == cap and runner.draft.free_state_slots() == 1
    return CaseRun(wall_s, draft_s[0], engine.requests["req"].output_token_ids,
                   len(engine.trace.of_kind("launch")),
                   runner.draft.forwards if draft is not None else 0, stats.get("proposed", 0),
                   stats.get("accepted", 0), free)


def _time_proposals(draft: ModelDraft) -> list[float]:
    """Wrap ``draft.propose`` so the time spent in it adds up in the returned one-element list."""
    from mini_deepinfer.runtime.device import synchronize

    total = [0.0]
    propose = draft.propose

    def timed(jobs):
        start = time.perf_counter()
        try:
            return propose(jobs)
        finally:
            synchronize(draft.model.lm_head.weight.device)
            total[0] += time.perf_counter() - start

    draft.propose = timed
    return total


def case_names(widths: list[int]) -> list[tuple[str, str | None, int]]:
    """(case name, draft kind or None for plain, width) for every case, plain first."""
    return [("plain", None, 0)] + [(f"{kind} k={w}", kind, w) for kind in DRAFTS for w in widths]


def run_all(target: CausalLM, widths: list[int], workload: Workload,
            repeats: int) -> dict[str, list[CaseRun]]:
    """One warm-up run per case, then ``repeats`` rounds over all cases (order reversed every other round)."""
    prompt = workload.prompt(target.config.vocab_size)
    drafts = {kind: make_draft(kind, target) for kind in DRAFTS}
    cases = case_names(widths)
    runs: dict[str, list[CaseRun]] = {name: [] for name, _, _ in cases}
    for name, kind, width in cases:
        run_case(target, drafts.get(kind), width, workload, prompt)
    for i in range(repeats):
        for name, kind, width in cases if i % 2 == 0 else list(reversed(cases)):
            runs[name].append(run_case(target, drafts.get(kind), width, workload, prompt))
    return runs


def case_result(case_runs: list[CaseRun], plain_ms: float, plain_forward_ms: float) -> dict[str, Any]:
    walls = [1e3 * r.wall_s for r in case_runs]
    first = case_runs[0]
    tokens = len(first.outputs)
    median = statistics.median(walls)
    target_ms = statistics.median(1e3 * (r.wall_s - r.draft_s) / r.target_forwards for r in case_runs)
    return {
        "wall_ms": {"median": median, "min": min(walls), "max": max(walls)},
        "wall_vs_plain": median / plain_ms,
        "draft_share": statistics.median(r.draft_s / r.wall_s for r in case_runs),
        "target_ms_per_forward": target_ms,
        "target_forward_vs_plain": target_ms / plain_forward_ms,
        "tokens": tokens,
        "target_forwards_per_token": first.target_forwards / tokens,
        "draft_forwards_per_token": first.draft_forwards / tokens,
        "accepted": first.accepted,
        "proposed": first.proposed,
        "acceptance": first.accepted / first.proposed if first.proposed else None,
    }


def build_report(argv: list[str], settings: Settings, target: CausalLM,
                 runs: dict[str, list[CaseRun]]) -> dict[str, Any]:
    import torch

    plain_ms = statistics.median(1e3 * r.wall_s for r in runs["plain"])
    plain_forward_ms = statistics.median(1e3 * r.wall_s / r.target_forwards for r in runs["plain"])
    reference = runs["plain"][0].outputs
    every = [run for case in runs.values() for run in case]
    config = {
        "preset": settings.preset, "damping": DAMPING, "noise": NOISE,
        "model": common.model_description(settings.preset, target),
        "drafts": DRAFTS, "widths": settings.widths, "prompt_len": settings.workload.prompt_len,
        "new_tokens": settings.workload.new_tokens, "greedy": True, "ignore_eos": True,
        "seed": settings.workload.seed, "repeats": settings.repeats, "cpu_threads": torch.get_num_threads(),
    }
    return {
        **common.provenance("speculative", argv, settings.device, settings.dtype), "config": config,
        "results": {name: case_result(case_runs, plain_ms, plain_forward_ms)
                    for name, case_runs in runs.items()},
        "checks": {"tokens_identical": all(run.outputs == reference for run in every),
                   "slots_returned": all(run.slots_returned for run in every), "runs_compared": len(every)},
    }


# --8<-- [start:table]
def table_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """(case, wall ms median [min-max], wall / plain, target forwards per token, draft forwards per token,
    drafts accepted, share of the time in the draft, one target forward / one plain forward) per case."""
    rows = []
    for name, r in report["results"].items():
        wall = r["wall_ms"]
        accepted = ("-" if r["acceptance"] is None
                    else f"{r['accepted']}/{r['proposed']} ({r['acceptance']:.0%})")
        rows.append((name, f"{wall['median']:.1f} [{wall['min']:.1f}-{wall['max']:.1f}]",
                     f"{r['wall_vs_plain']:.2f}", f"{r['target_forwards_per_token']:.2f}",
                     f"{r['draft_forwards_per_token']:.2f}", accepted, f"{r['draft_share']:.0%}",
                     f"{r['target_forward_vs_plain']:.2f}"))
    return rows


def describe(report: dict[str, Any]) -> str:
    """One line: where and on what the numbers were measured."""
    config = report["config"]
    params = config["model"]["parameters"]
    return (f"device={common.where(report['device'])}, cpu_threads={config['cpu_threads']}, "
            f"torch={report['torch']}, dtype={report['dtype']}, preset={config['preset']} ({params} "
            f"parameters, random weights, second half damped x{config['damping']}), "
            f"prompt={config['prompt_len']}, "
            f"new_tokens={config['new_tokens']}, repeats={config['repeats']}, date={report['date']}"
            f"{common.load_suffix(report['device'])}")
# --8<-- [end:table]


HEADER = ("case", "wall ms", "vs plain", "target fwd/token", "draft fwd/token", "drafts accepted",
          "time in draft", "target fwd vs plain fwd")


def format_table(report: dict[str, Any]) -> str:
    """The plain-text table the command prints."""
    lines = common.text_table([HEADER, *table_rows(report)])
    verdict = "identical" if report["checks"]["tokens_identical"] else "DIFFERENT"
    return "\n".join([describe(report), *lines, f"tokens of every case: {verdict}"]) + "\n"


def format_markdown(report: dict[str, Any]) -> str:
    """The same table in Markdown, for the site (rendered from a committed JSON file)."""
    lines = common.markdown_table(describe(report), HEADER, table_rows(report), report["checks"])
    lines[-1] += f" ({report['checks']['runs_compared']} runs)"
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Settings:
    """Resolved command-line options."""

    device: torch.device
    dtype: torch.dtype
    preset: str
    widths: list[int]
    repeats: int
    workload: Workload
    output: Path | None


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m mini_deepinfer.bench.speculative",
                      description="Time plain and speculative decoding of a random Qwen3.5 with drafts that "
                                  "always, sometimes and never agree, and a cheaper half-depth draft.")
    common.add_common_options(p, repeats=5, repeats_help="measured runs per case")
    p.add_argument("--widths", type=positive_ints, default=[2, 4],
                   help=f"comma-separated draft widths, 1..{MAX_SPEC_WIDTH} (default 2,4)")
    return p


def resolve_settings(argv: list[str]) -> Settings:
    """Parse and check the options; raises a ValueError with one line for bad input."""
    a = build_parser().parse_args(argv)
    counts = {"--repeats": a.repeats, "--new-tokens": a.new_tokens, "--threads": a.threads}
    common.check_common_options(a, counts)
    if max(a.widths) > MAX_SPEC_WIDTH:
        raise UsageError(f"every draft width must be in 1..{MAX_SPEC_WIDTH}, got {a.widths}")
    from mini_deepinfer.runtime.device import resolve_device, resolve_dtype

    device, dtype = resolve_device(a.device), resolve_dtype(a.dtype)
    workload = Workload(new_tokens=a.new_tokens)
    # a case holds the target's cache and one draft's, at most as large
    common.check_cache_memory(a.preset, workload.kv_capacity, 1, 2, dtype, device,
                              f"--new-tokens {a.new_tokens} and the prompt of {workload.prompt_len} tokens")
    longest = workload.prompt_len + a.new_tokens
    common.check_preset_positions(a.preset, longest, f"the prompt ({workload.prompt_len} tokens) with "
                                                     f"--new-tokens {a.new_tokens}")
    return Settings(device, dtype, a.preset, a.widths, a.repeats, workload, a.output)


def run(argv: list[str]) -> int:
    settings = resolve_settings(argv)
    target = build_target(settings.preset, settings.dtype, settings.device, settings.workload.seed)
    load_before = os.getloadavg()
    runs = run_all(target, settings.widths, settings.workload, settings.repeats)
    report = build_report(argv, settings, target, runs)
    # other processes on the machine slow a CPU run down; the 1-minute load average tells a reader
    report["device"]["load_average_1m"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    if settings.output is not None:
        write_record(settings.output, report)
    print(format_table(report), end="")
    if settings.output is not None:
        print(printable(f"wrote {settings.output}"))
    return 0 if report["checks"]["tokens_identical"] and report["checks"]["slots_returned"] else 1


def main(argv: list[str] | None = None) -> int:
    return run_command(run, argv)


if __name__ == "__main__":
    sys.exit(main())
