"""``python -m mini_deepinfer.bench.rounds``: what a round costs, synchronously and cross-round.

Scope: one fixed workload (a few requests with seeded random prompts of different lengths, batched by
``BatchEngine``, greedy, a fixed number of new tokens each) on a random Qwen3.5 built in code, run
synchronously and cross-round, several times each, the two modes alternating. Per round it measures
the round's wall time (one ``Engine.step()``), the time blocked in ``read`` (waiting for the sampled
tokens), the host time (the rest: schedule, launch, commit) and, on an accelerator, the device time of
the launched work (device events). Per request it measures the time to the first committed token and to
the finish. It checks that both modes commit identical tokens and return every slot, prints a short
table and writes the results as JSON.

Non-scope: real weights or text, speculative decoding, load that does not fit one batch, and any claim
about a device the command did not run on. On CPU ``launch`` computes the whole round before it returns,
so nothing overlaps and cross-round can only cost time there; the numbers show it as it is.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mini_deepinfer.bench.common import (
    add_common_options,
    check_cache_memory,
    check_common_options,
    check_preset_positions,
    load_suffix,
    model_description,
    provenance,
    text_table,
    where,
)
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.tools.cli import (
    OneLineParser,
    add_execution_options,
    execution_choice,
    printable,
    run_command,
)
from mini_deepinfer.tools.records import write_record

if TYPE_CHECKING:  # torch and the model load only once the flags are checked (``resolve_settings``)
    import torch

    from mini_deepinfer.core.batch import BatchEngine
    from mini_deepinfer.core.plan import RoundPlan, RoundResult
    from mini_deepinfer.models.layers import CausalLM
    from mini_deepinfer.runtime.model_runner import ModelRunner, RunnerLaunch

MODES: dict[str, bool] = {"synchronous": False, "cross_round": True}  # mode name -> EngineConfig.pipeline
WARMUP_RUNS = 1  # per mode, before any measured run (first calls allocate and fill caches)
REPORT_KEYS = ("schema", "benchmark", "command", "date", "source_sha", "device", "dtype", "torch",
               "config", "results", "checks")
"""Top-level keys of the JSON file, in this order."""
SUMMARY_KEYS = ("run_wall_ms", "steps", "forwards", "discarded_tokens", "round_wall_ms", "round_host_ms",
                "round_read_wait_ms", "round_launch_ms", "round_engine_ms", "round_device_ms",
                "read_wait_total_ms", "first_token_ms", "finish_ms")
"""Keys of each mode's ``summary`` (and of each repetition), in table order."""


@dataclass(frozen=True)
class Workload:
    """The requests every run serves: the same prompts, lengths and greedy settings in both modes.

    Attributes:
        num_requests: requests submitted together before the first round.
        new_tokens: tokens each request generates (eos is ignored, so every run has the same length).
        seed: seed of the random prompts and of the random weights.
    """

    num_requests: int = 4
    new_tokens: int = 64
    seed: int = 0

    @property
    def prompt_lens(self) -> list[int]:
        return [16 + 8 * i for i in range(self.num_requests)]

    @property
    def kv_capacity(self) -> int:
        """Enough KV slots for every request at once, including the one extra round of cross-round."""
        return sum(self.prompt_lens) + self.num_requests * self.new_tokens

    def prompts(self, vocab_size: int) -> dict[str, list[int]]:
        import torch

        generator = torch.Generator().manual_seed(self.seed)
        return {f"req-{i}": torch.randint(0, vocab_size, (n,), generator=generator).tolist()
                for i, n in enumerate(self.prompt_lens)}


def build_random_model(preset: str, dtype: torch.dtype, device: torch.device, seed: int) -> CausalLM:
    """A Qwen3.5 of the preset's shape with random weights (it produces random tokens)."""
    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config

    return build_model(qwen3_5_config(preset, initializer_range=0.1), dtype, device, seed=seed)


# --8<-- [start:timed_runner]
@dataclass
class TimedRunner:
    """A ``ModelRunner`` wrapper: time in ``launch``, time blocked in ``read``, device time per round.

    On an accelerator a pair of timing events (``torch.get_device_module(device).Event``) brackets
    each launched round on the device's stream; the time between them is the round's work plus any gap
    in which the device waited for the host to queue it. On CPU there are none.
    """

    inner: ModelRunner
    module: Any = None  # torch.cuda or torch.npu (``runtime.device.device_module``); None on cpu
    launch_s: float = 0.0
    read_wait_s: float = 0.0
    events: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # round id -> (start, end)
    origin_s: float = 0.0  # host clock at the run's start (time.perf_counter)
    origin_event: Any = None  # a device event recorded at the run's start, on an idle device
    spans: dict[str, tuple[float, float] | None] = field(default_factory=dict)  # the step's launch, read

    def start_clock(self) -> None:
        """Time zero of the run's timeline: on the host, and on the device (recorded while it is idle)."""
        module = self.module
        self.origin_s = time.perf_counter()
        self.origin_event = module.Event(enable_timing=True) if module else None
        if self.origin_event is not None:
            self.origin_event.record()

    def launch(self, plan: RoundPlan) -> RunnerLaunch:
        module = self.module
        pair = (module.Event(enable_timing=True), module.Event(enable_timing=True)) if module else None
        start = time.perf_counter()
        if pair is not None:
            pair[0].record()
        handle = self.inner.launch(plan)
        if pair is not None:
            pair[1].record()
            self.events[plan.round_id] = pair
        end = time.perf_counter()
        self.launch_s += end - start
        self.spans["launch"] = (start - self.origin_s, end - self.origin_s)
        return handle

    def read(self, handle: RunnerLaunch) -> RoundResult:
        start = time.perf_counter()
        result = self.inner.read(handle)
        end = time.perf_counter()
        self.read_wait_s += end - start
        self.spans["read"] = (start - self.origin_s, end - self.origin_s)
        return result

    def rewind(self, request_id: str, length: int) -> None:
        self.inner.rewind(request_id, length)

    def release(self, request_id: str) -> None:
        self.inner.release(request_id)

    def device_ms(self) -> dict[int, float]:
        """Device time of each launched round in ms (call once the device has finished)."""
        return {round_id: start.elapsed_time(end) for round_id, (start, end) in self.events.items()}

    def device_spans_ms(self) -> dict[int, tuple[float, float]]:
        """Each launched round's device span on the run's timeline, ms after the origin event."""
        if self.origin_event is None:
            return {}
        zero = self.origin_event
        return {r: (zero.elapsed_time(start), zero.elapsed_time(end))
                for r, (start, end) in self.events.items()}
# --8<-- [end:timed_runner]


@dataclass
class RoundTiming:
    """One ``Engine.step()``: what it launched, whether it read a round, and where its time went."""

    round_id: int
    launched: str  # "prefill", "decode", "mixed" or "none"
    read: bool
    step_s: float
    launch_s: float
    read_wait_s: float
    device_ms: float | None = None
    spans: dict[str, tuple[float, float] | None] = field(default_factory=dict)  # s on the run's host timeline
    device_span_ms: tuple[float, float] | None = None  # the round it launched, on the device timeline

    @property
    def host_s(self) -> float:
        """The CPU's own work in the round: everything but waiting for sampled tokens."""
        return self.step_s - self.read_wait_s

    @property
    def engine_s(self) -> float:
        """Scheduling and commit: the host time outside the runner."""
        return self.step_s - self.launch_s - self.read_wait_s


@dataclass
class RunResult:
    """One run of the workload in one mode."""

    mode: str
    wall_s: float
    rounds: list[RoundTiming]
    forwards: int
    discarded_tokens: int
    first_token_s: dict[str, float]
    finish_s: dict[str, float]
    outputs: dict[str, list[int]]
    slots_returned: bool
    runner: TimedRunner | None = None  # reused by the next run


# --8<-- [start:timed_step]
def timed_step(engine: BatchEngine, runner: TimedRunner) -> RoundTiming:
    """Run one round and split its wall time into launch, read wait and the engine's own work."""
    first_event = len(engine.trace.events)
    runner.launch_s = runner.read_wait_s = 0.0
    runner.spans = {"launch": None, "read": None}
    start = time.perf_counter()
    engine.step()
    step_s = time.perf_counter() - start
    runner.spans["step"] = (start - runner.origin_s, start - runner.origin_s + step_s)
    events = engine.trace.events[first_event:]
    phases = {e.data["phase"] for e in events if e.kind == "schedule"}
    launched = "none" if not phases else phases.pop() if len(phases) == 1 else "mixed"
    read = any(e.kind == "read" for e in events)
    return RoundTiming(engine.round_id, launched, read, step_s, runner.launch_s, runner.read_wait_s,
                       spans=dict(runner.spans))
# --8<-- [end:timed_step]


def make_engine(model: CausalLM, workload: Workload, pipeline: bool, graphs: bool,
                runner: TimedRunner | None = None,
                compile_step: bool = False) -> tuple[BatchEngine, TimedRunner]:
    """A batch engine whose budget fits every prompt in round 1, so all requests decode together.

    Runs after the first reuse its runner: its cache, and the graphs it captured in the warm-up run, as a
    server keeps them; no measured round captures a graph.
    """
    from mini_deepinfer.runtime.device import device_module
    from mini_deepinfer.runtime.factory import build_engine

    n = workload.num_requests
    config = EngineConfig(kv_capacity=workload.kv_capacity, max_num_seqs=n,
                          max_batched_tokens=sum(workload.prompt_lens), pipeline=pipeline)
    engine = build_engine(model, config, use_graphs=graphs, compile_step=compile_step,
                          runner=runner.inner if runner else None)
    # the same runner, clocks around its calls
    engine.runner = runner = runner or TimedRunner(engine.runner, device_module(engine.runner.device))
    runner.events.clear()
    return engine, runner


def run_once(model: CausalLM, workload: Workload, prompts: dict[str, list[int]], mode: str,
             runner: TimedRunner | None, graphs: bool, compile_step: bool = False) -> RunResult:
    """Submit every request, step until all are finished and read, and time it."""
    from mini_deepinfer.runtime.device import synchronize

    engine, runner = make_engine(model, workload, MODES[mode], graphs, runner, compile_step)
    device = runner.inner.device
    params = SamplingParams(max_new_tokens=workload.new_tokens, ignore_eos=True)
    gc.collect()
    synchronize(device)
    runner.start_clock()
    start = time.perf_counter()
    for request_id, prompt in prompts.items():
        engine.submit(request_id, prompt, params)
    rounds = []
    while engine.has_unfinished():
        rounds.append(timed_step(engine, runner))
    synchronize(device)
    wall_s = time.perf_counter() - start
    device_ms, device_spans = runner.device_ms(), runner.device_spans_ms()
    for timing in rounds:
        timing.device_ms = device_ms.get(timing.round_id)
        timing.device_span_ms = device_spans.get(timing.round_id)
    return _result(engine, mode, wall_s, rounds, runner)


def _result(engine: BatchEngine, mode: str, wall_s: float, rounds: list[RoundTiming],
            runner: TimedRunner) -> RunResult:
    requests = engine.requests.values()
    kv, state = engine.kv_pool, engine.state_pool
    return RunResult(
        mode=mode, wall_s=wall_s, rounds=rounds, forwards=len(engine.trace.of_kind("launch")),
        discarded_tokens=sum(len(e.data["tokens"]) for e in engine.trace.of_kind("discard")),
        first_token_s={r.request_id: r.first_token_at - r.submitted_at for r in requests},
        finish_s={r.request_id: r.finished_at - r.submitted_at for r in requests},
        outputs={r.request_id: list(r.output_token_ids) for r in requests},
        slots_returned=kv.num_free == kv.capacity and state.num_free == state.capacity,
        runner=runner,
    )


def run_all(model: CausalLM, workload: Workload, repeats: int,
            graphs: bool = False, compile_step: bool = False) -> dict[str, list[RunResult]]:
    """Warm up, then run both modes ``repeats`` times, alternating which goes first (one runner for all)."""
    prompts = workload.prompts(model.config.vocab_size)
    runner = None
    for mode in MODES:
        for _ in range(WARMUP_RUNS):
            runner = run_once(model, workload, prompts, mode, runner, graphs, compile_step).runner
    runs: dict[str, list[RunResult]] = {mode: [] for mode in MODES}
    for i in range(repeats):
        order = list(MODES) if i % 2 == 0 else list(reversed(MODES))
        for mode in order:
            runs[mode].append(run_once(model, workload, prompts, mode, runner, graphs, compile_step))
    return runs


# --8<-- [start:summary]
def steady_rounds(rounds: list[RoundTiming]) -> list[RoundTiming]:
    """Rounds that launch a decode-only round and read one: the rounds both modes spend most time in."""
    return [r for r in rounds if r.launched == "decode" and r.read]


def run_summary(run: RunResult) -> dict[str, float | int | None]:
    """One run in numbers: totals, median steady round, median request (times in ms)."""
    steady = steady_rounds(run.rounds)

    def median_ms(values: list[float]) -> float:
        return 1e3 * statistics.median(values)

    device = [r.device_ms for r in steady if r.device_ms is not None]
    return {
        "run_wall_ms": 1e3 * run.wall_s,
        "steps": len(run.rounds),
        "forwards": run.forwards,
        "discarded_tokens": run.discarded_tokens,
        "round_wall_ms": median_ms([r.step_s for r in steady]),
        "round_host_ms": median_ms([r.host_s for r in steady]),
        "round_read_wait_ms": median_ms([r.read_wait_s for r in steady]),
        "round_launch_ms": median_ms([r.launch_s for r in steady]),
        "round_engine_ms": median_ms([r.engine_s for r in steady]),
        "round_device_ms": statistics.median(device) if device else None,
        "read_wait_total_ms": 1e3 * sum(r.read_wait_s for r in run.rounds),
        "first_token_ms": median_ms(list(run.first_token_s.values())),
        "finish_ms": median_ms(list(run.finish_s.values())),
    }
# --8<-- [end:summary]


def spread(values: list[float | int | None]) -> dict[str, float | int | None]:
    """Median, minimum and maximum over the repetitions (all None when the value was not measured)."""
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(present), "min": min(present), "max": max(present)}


def _ms_rows(run: RunResult) -> list[dict[str, Any]]:
    """Every round of one run, times in ms rounded to 0.1 µs."""
    def ms(seconds: float) -> float:
        return round(1e3 * seconds, 4)

    def span(pair: tuple[float, float] | None, scale: float = 1e3) -> list[float] | None:
        return None if pair is None else [round(scale * pair[0], 4), round(scale * pair[1], 4)]

    return [{"round": r.round_id, "launched": r.launched, "read": r.read, "step_ms": ms(r.step_s),
             "launch_ms": ms(r.launch_s), "read_wait_ms": ms(r.read_wait_s), "host_ms": ms(r.host_s),
             "device_ms": None if r.device_ms is None else round(r.device_ms, 4),
             "timeline_ms": {"step": span(r.spans.get("step")), "launch": span(r.spans.get("launch")),
                             "read": span(r.spans.get("read")), "device": span(r.device_span_ms, 1.0)}}
            for r in run.rounds]


def mode_results(runs: list[RunResult]) -> dict[str, Any]:
    """A mode's summary over repetitions, each repetition's numbers, and the median run in detail."""
    summaries = [run_summary(run) for run in runs]
    by_wall = sorted(range(len(runs)), key=lambda i: runs[i].wall_s)
    median_run = runs[by_wall[(len(runs) - 1) // 2]]
    return {
        "summary": {key: spread([s[key] for s in summaries]) for key in SUMMARY_KEYS},
        "repeats": summaries,
        "median_run": {
            "rounds": _ms_rows(median_run),
            "first_token_ms": {k: round(1e3 * v, 4) for k, v in median_run.first_token_s.items()},
            "finish_ms": {k: round(1e3 * v, 4) for k, v in median_run.finish_s.items()},
        },
    }


def checks(runs: dict[str, list[RunResult]]) -> dict[str, Any]:
    """Both modes, every repetition: the same tokens as the first synchronous run, every slot back."""
    reference = runs["synchronous"][0].outputs
    every = [run for mode_runs in runs.values() for run in mode_runs]
    return {
        "tokens_identical": all(run.outputs == reference for run in every),
        "slots_returned": all(run.slots_returned for run in every),
        "runs_compared": len(every),
        "output_tokens_per_run": sum(len(v) for v in reference.values()),
    }


@dataclass(frozen=True)
class Settings:
    """Resolved command-line options."""

    device: torch.device
    dtype: torch.dtype
    preset: str
    repeats: int
    workload: Workload
    output: Path | None
    graphs: bool = False
    compile_step: bool = False  # --compile: the graph path's decode step through torch.compile


def build_report(argv: list[str], settings: Settings, model: CausalLM,
                 runs: dict[str, list[RunResult]]) -> dict[str, Any]:
    """The JSON document: provenance, configuration, per-mode results and checks (keys: REPORT_KEYS)."""
    import torch

    workload = settings.workload
    config = {
        "preset": settings.preset,
        "model": model_description(settings.preset, model),
        "requests": workload.num_requests, "prompt_lens": workload.prompt_lens,
        "new_tokens": workload.new_tokens, "greedy": True, "ignore_eos": True, "seed": workload.seed,
        "max_num_seqs": workload.num_requests, "max_batched_tokens": sum(workload.prompt_lens),
        "kv_capacity": workload.kv_capacity, "repeats": settings.repeats, "warmup_runs": WARMUP_RUNS,
        "cpu_threads": torch.get_num_threads(),
        # one runner serves every run: its counts cover the warm-up and every repetition of both modes
        "execution": {"graphs": settings.graphs, "compiled": settings.compile_step,
                      "rounds": dict(runs["synchronous"][-1].runner.inner.rounds_by_mode)},
    }
    return {
        **provenance("rounds", argv, settings.device, settings.dtype), "config": config,
        "results": {mode: mode_results(mode_runs) for mode, mode_runs in runs.items()},
        "checks": checks(runs),
    }


# --8<-- [start:table]
def _cell(stats: dict[str, Any]) -> str:
    median, low, high = stats["median"], stats["min"], stats["max"]
    if median is None:
        return "-"
    if low == high:
        return f"{median:g}" if isinstance(median, int) else f"{median:.3f}"
    return f"{median:.3f} [{low:.3f}-{high:.3f}]"


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> str:
    if a["median"] is None or b["median"] is None or a["median"] == 0:
        return "-"
    return f"{b['median'] / a['median']:.3f}"


def summary_rows(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(key, synchronous, cross_round, cross_round / synchronous) for every summary key.

    A cell is the median over repetitions, with [min-max] when they differ.
    """
    sync = report["results"]["synchronous"]["summary"]
    cross = report["results"]["cross_round"]["summary"]
    return [(key, _cell(sync[key]), _cell(cross[key]), _ratio(sync[key], cross[key])) for key in SUMMARY_KEYS]


def describe(report: dict[str, Any]) -> str:
    """One line: where and on what the numbers were measured."""
    config = report["config"]
    model = f"{config['model']['parameters']} parameters, random weights"
    return (f"device={where(report['device'])}, cpu_threads={config['cpu_threads']}, "
            f"torch={report['torch']}, dtype={report['dtype']}, preset={config['preset']} ({model}), "
            f"requests={config['requests']}x{config['new_tokens']} new tokens, "
            f"repeats={config['repeats']}, date={report['date']}{load_suffix(report['device'])}")
# --8<-- [end:table]


def format_table(report: dict[str, Any]) -> str:
    """The plain-text table the command prints."""
    lines = text_table([("key", "synchronous", "cross_round", "cross/sync"), *summary_rows(report)])
    verdict = "identical" if report["checks"]["tokens_identical"] else "DIFFERENT"
    return "\n".join([describe(report), *lines, f"tokens of both modes: {verdict}"]) + "\n"


def format_markdown(report: dict[str, Any]) -> str:
    """The same table in Markdown, for the site (rendered from a committed JSON file)."""
    lines = [f"`{describe(report)}`", "",
             "| key | synchronous | cross_round | cross_round / synchronous |", "|---|---:|---:|---:|"]
    lines += [f"| `{key}` | {sync} | {cross} | {ratio} |" for key, sync, cross, ratio in summary_rows(report)]
    verdict = "identical" if report["checks"]["tokens_identical"] else "DIFFERENT"
    runs = report["checks"]["runs_compared"]
    lines += ["", f"`tokens_identical={str(report['checks']['tokens_identical']).lower()}` "
              f"({runs} runs: {verdict})"]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m mini_deepinfer.bench.rounds",
                      description="Time rounds of a random Qwen3.5, synchronous vs cross-round.")
    add_common_options(p, repeats=9, repeats_help="measured runs per mode")
    p.add_argument("--requests", type=int, default=4, help="requests in the batch (default 4)")
    add_execution_options(p)
    return p


def resolve_settings(argv: list[str]) -> Settings:
    """Parse and check the options, then import torch and check the device; raises a ValueError with one line
    for bad input."""
    a = build_parser().parse_args(argv)
    check_common_options(a, {"--repeats": a.repeats, "--requests": a.requests, "--new-tokens": a.new_tokens,
                             "--threads": a.threads})
    from mini_deepinfer.runtime.device import resolve_device, resolve_dtype
    from mini_deepinfer.runtime.factory import use_graphs

    device, dtype = resolve_device(a.device), resolve_dtype(a.dtype)
    n = a.requests  # prompts of 16, 24, 32, ... tokens (``Workload.prompt_lens``), summed without the list
    check_cache_memory(a.preset, 16 * n + 4 * n * (n - 1) + n * a.new_tokens, n, 1, dtype, device,
                       f"--requests {n} and --new-tokens {a.new_tokens}")
    check_preset_positions(a.preset, 16 + 8 * (n - 1) + a.new_tokens,
                           f"the longest prompt ({16 + 8 * (n - 1)} tokens) with --new-tokens {a.new_tokens}")
    return Settings(device, dtype, a.preset, a.repeats, Workload(a.requests, a.new_tokens),
                    a.output, use_graphs(device, execution_choice(a)), a.compile)


def run_benchmark(settings: Settings, argv: list[str]) -> dict[str, Any]:
    """Build the model, run both modes and return the JSON document."""
    model = build_random_model(settings.preset, settings.dtype, settings.device, settings.workload.seed)
    load_before = os.getloadavg()
    runs = run_all(model, settings.workload, settings.repeats, settings.graphs, settings.compile_step)
    report = build_report(argv, settings, model, runs)
    # other processes on the machine slow a CPU run down; the 1-minute load average tells a reader
    report["device"]["load_average_1m"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    return report


def run(argv: list[str]) -> int:
    settings = resolve_settings(argv)  # bad options, an unusable device or output path: one line, exit 2
    report = run_benchmark(settings, argv)
    if settings.output is not None:
        write_record(settings.output, report)
    print(format_table(report), end="")
    if settings.output is not None:
        print(printable(f"wrote {settings.output}"))
    passed = report["checks"]["tokens_identical"] and report["checks"]["slots_returned"]
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    return run_command(run, argv)


if __name__ == "__main__":
    sys.exit(main())
