"""``python -m mini_deepinfer.bench.gpu``: every accelerator measurement of the site, in one command.

Scope: on one GPU (or NPU), in this order, each step the same command a reader would type:

1. random 2B and 0.8B checkpoints (``random_checkpoint``), for the records;
2. ``bench`` against transformers at the Qwen3.5-0.8B shape in bfloat16, eager and with graphs;
3. ``bench.rounds`` (synchronous vs cross-round, with a timeline of every round) on the ``small`` preset and
   on the 0.8B shape, eager and with graphs;
4. ``bench.speculative`` (what speculation costs on the device);
5. the no-stall check (``--check-only``): steady decode rounds whose ``launch`` runs under
   ``torch.cuda.set_sync_debug_mode("error")``, eager and with graphs, and graphs against eager in float32;
6. the three record commands of the records contribution page on the random checkpoints;
7. on request only (``--steps compiled``): ``--check-only --compile``, the compiled step's greedy tokens
   against eager execution in float32 (``ON_REQUEST``: its compiling is kept out of the quick wall time).

``--quick`` runs the same steps with fewer repeats and shorter decodes, inside ``QUICK_WALL_S`` of wall time:
it prints the plan with each step's budget first (``QUICK_BUDGETS_S``: plan budgets, never results), stops a
step that runs past twice its budget, and skips a step once less than its budget is left. Every step writes
its JSON under ``--output-dir`` (``bench/`` and ``records/``, the layout of ``snippets/``) and its output
under ``logs/``; ``manifest.json`` is rewritten after every step (a step still marked ``running`` was
killed with the whole run) and everything is packed again into one ``.tar.gz``, so a killed run keeps what
finished.
``--steps a,b`` reruns chosen steps and merges them into the manifest. Each step's entry carries its
provenance: commit, clean tree, graphs or eager, compiled or not, device name, torch version.
``--dry-run`` runs the whole plan on the CPU at the ``tiny`` shape: it checks the commands, it measures
nothing. Weights are random, and the records say so.

Non-scope: CPU measurements (each benchmark has its own command), choosing what the site shows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mini_deepinfer.tools.cli import (
    FlagNeeds,
    FlagUnusedWith,
    OneLineParser,
    UsageError,
    printable,
    run_command,
)
from mini_deepinfer.tools.records import utc_now_iso

STEP_TIMEOUT_S = 240
"""The limit of one step of the full profile (and of a dry run's steps, which run on a CPU)."""
QUICK_WALL_S = 360
"""``--quick``: the whole run's wall-time limit, so that it fits one device command with room to rerun."""
QUICK_SLACK = 2.0
"""``--quick``: a step is stopped once it has run this many times its budget."""
QUICK_BUDGETS_S = {
    # Plan budgets in seconds on one H200, printed before a run; never figures for the site. Each step
    # starts a Python process and the device (imports take 1.4-1.9 s on the repository's CPU machine; 5 s
    # are allowed). From the 207e234 H200 files: records load in 6.2-10.8 s and run in 0.6-6.0 s; a 0.8B
    # bf16 decode step is 43 ms (batch 1) and 33 ms (batch 8); a `small` round 11.9 ms; the two checkpoints
    # took about 45 s together; one bench repeat (both sides, load 4.5 s and 8.5 s) about 80 s with 64
    # tokens, of which 16 tokens leave about a third, plus the float32 checkpoint the bench writes itself.
    "checkpoint-2b": 30, "checkpoint-0.8b": 15,
    "bench-eager": 60, "bench-graphs": 55,
    "rounds-small-eager": 12, "rounds-small-graphs": 12,  # 3 runs x 2 modes x 33 rounds x 11.9 ms + start
    "rounds-0.8b-eager": 20, "rounds-0.8b-graphs": 18,  # the same at ~43 ms a round, + building the model
    "speculative": 25,  # about 9 cases x 3 runs x 11 rounds of two models on the small preset
    "no-stall": 25,  # three small models built, 24 + 4 rounds each way, 4 x 48 tokens compared twice
    "record-batched": 22, "record-cross-round": 25, "record-speculative": 22,
    # on request only (ON_REQUEST): 4 buckets of the small preset compiled once each, no device figure yet
    "compiled": 90,
}
ON_REQUEST = {"compiled"}
"""Steps that run only when ``--steps`` names them (a second device command): how long compiling takes on a
device is not known yet, so it is kept out of the ``QUICK_WALL_S`` of the default plan."""
PROMPTS = ["用两句话解释 KV Cache 的作用。", "What is 1 plus 1? Answer in one short sentence."]
SYNC_ERROR = "called a synchronizing"
"""The start of torch's message under ``set_sync_debug_mode("error")`` (``called a synchronizing CUDA
operation``): how the check tells a synchronising call from any other failure of a launch."""


# --8<-- [start:no_stall]
def round_modes(runner: Any) -> dict[str, int]:
    """Rounds launched so far per mode, ``{"graph": n, "eager": n}`` (on CPU "graph" is the static-buffer
    step): ``ModelRunner.rounds_by_mode``, the one runner attribute this check reads."""
    return dict(runner.rounds_by_mode)


@contextmanager
def cuda_sync_errors() -> Iterator[None]:
    """Inside the block, any synchronising CUDA call raises (``set_sync_debug_mode("error")``)."""
    import torch

    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


class WatchedLaunch:
    """A runner's ``launch``, each call inside ``guard()``; it remembers what a call raised, then raises it
    again. ``Engine.step`` turns that exception into failed requests and never raises itself, so the check
    reads what failed here and in the requests."""

    def __init__(self, launch: Callable[[Any], Any], guard: Callable[[], AbstractContextManager]) -> None:
        self.launch, self.guard = launch, guard
        self.errors: list[str] = []

    def __call__(self, plan: Any) -> Any:
        try:
            with self.guard():
                return self.launch(plan)
        except Exception as exc:
            self.errors.append(f"round {plan.round_id}: {type(exc).__name__}: {exc}"[:300])
            raise


def no_stall_verdict(graphs: bool, rounds: int, modes: dict[str, int], launch_errors: list[str],
                     failed: dict[str, str]) -> dict[str, Any]:
    """What the checked rounds did, and why the check fails (``problems``; none means it passed)."""
    sync = [e for e in launch_errors if SYNC_ERROR in e]
    problems = []
    if sync:
        problems.append(f"{len(sync)} launch(es) made a synchronising call")
    if len(sync) < len(launch_errors):
        problems.append(f"{len(launch_errors) - len(sync)} launch(es) raised")
    if failed:
        problems.append(f"{len(failed)} request(s) finished with an error")
    expected, other = ("graph", "eager") if graphs else ("eager", "graph")
    if modes[other]:
        problems.append(f"{modes[other]} round(s) ran {other} where {expected} was expected")
    if modes[expected] != rounds:
        problems.append(f"{modes[expected]} of {rounds} checked rounds ran {expected}")
    return {"graphs": graphs, "rounds_checked": rounds, "replay_rounds": modes["graph"],
            "eager_rounds": modes["eager"], "sync_calls": len(sync), "launch_errors": launch_errors[:5],
            "failed_requests": dict(sorted(failed.items())), "problems": problems, "passed": not problems}


def launches_without_sync(device: str, graphs: bool, rounds: int = 24, *, model: Any = None,
                          guard: Callable[[], AbstractContextManager] | None = None) -> dict[str, Any]:
    """Steady decode rounds, each ``launch`` inside ``guard`` (on CUDA by default ``cuda_sync_errors``).

    Fails when a checked launch raised (a synchronising call, or anything else), when a request finished
    with an error, or when a round ran in the other mode (eagerly where a graph replay was expected). The
    read of the sampled tokens (the round's one documented wait) is outside the guard. ``model`` defaults
    to the ``small`` preset in bfloat16.
    """
    import torch

    from mini_deepinfer.core.engine import EngineConfig
    from mini_deepinfer.core.request import SamplingParams
    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.runtime.factory import build_engine

    if model is None:
        model = build_model(qwen3_5_config("small"), torch.bfloat16, device, seed=0)
    config = EngineConfig(kv_capacity=1024, max_num_seqs=4, max_batched_tokens=256, pipeline=True)
    engine = build_engine(model, config, use_graphs=graphs)
    for i in range(4):
        engine.submit(f"r{i}", list(range(5, 21 + 8 * i)), SamplingParams(max_new_tokens=rounds + 8))
    for _ in range(4):  # the prefill, and the first decode rounds, outside the check
        engine.step()
    if guard is None:
        guard = cuda_sync_errors if torch.device(device).type == "cuda" else nullcontext
    watch = engine.runner.launch = WatchedLaunch(engine.runner.launch, guard)
    before = round_modes(engine.runner)
    for _ in range(rounds):
        engine.step()
    after = round_modes(engine.runner)
    failed = {rid: req.error for rid, req in engine.requests.items() if req.error}
    return no_stall_verdict(graphs, rounds, {m: after[m] - before[m] for m in after}, watch.errors, failed)
# --8<-- [end:no_stall]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (the shorter one's length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else
                min(len(a), len(b)))


@dataclass(frozen=True)
class Workload:
    """The requests and cache of a graphs-against-eager comparison: prompts of 37, 46, ... tokens."""

    kv_capacity: int = 1024
    max_num_seqs: int = 4
    requests: int = 4
    new_tokens: int = 48


COMPILED_WORKLOAD = Workload(kv_capacity=128, max_num_seqs=2, requests=2, new_tokens=20)
"""Two requests whose contexts cross from the 64-key bucket into the 128-key one: 4 buckets to compile."""


def graphs_equal_eager(device: str, preset: str = "small", compile_step: bool = False,
                       work: Workload = Workload()) -> dict[str, Any]:
    """Float32, greedy: the tokens with graphs (with ``compile_step``, their step compiled) equal the tokens
    without, request by request."""
    import torch

    from mini_deepinfer.core.engine import EngineConfig
    from mini_deepinfer.core.request import SamplingParams
    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.runtime.factory import build_engine

    model = build_model(qwen3_5_config(preset, initializer_range=0.1), torch.float32, device, seed=0)
    outputs = {}
    for graphs in (False, True):
        config = EngineConfig(kv_capacity=work.kv_capacity, max_num_seqs=work.max_num_seqs,
                              max_batched_tokens=64, chunked_prefill=True, pipeline=True)
        engine = build_engine(model, config, use_graphs=graphs, compile_step=graphs and compile_step)
        params = SamplingParams(max_new_tokens=work.new_tokens)
        for i in range(work.requests):
            engine.submit(f"r{i}", list(range(3 + i, 40 + 9 * i)), params)
        engine.run()
        made_s = engine.runner.capture_s  # the graphs engine (the last): buckets made, compiled, captured
        outputs[graphs] = {rid: r.output_token_ids for rid, r in engine.requests.items()}
    differ = {rid: first_difference(tokens, outputs[True][rid]) for rid, tokens in outputs[False].items()}
    compared = sum(map(len, outputs[False].values()))
    return {"passed": outputs[True] == outputs[False], "compiled": compile_step, "tokens_compared": compared,
            "first_difference": {rid: pos for rid, pos in differ.items() if pos is not None},
            "buckets_made_s": made_s}


def check_only(device: str, out: Path, preset: str, argv: list[str], compile_step: bool = False) -> int:
    """The no-stall check, eager and with graphs, and graphs against eager; ``bench/no-stall-KIND.json``.

    On CUDA every checked launch runs under ``set_sync_debug_mode("error")``. On a CPU (a dry run) nothing
    can catch a synchronising call: the file says so (``sync_debug_mode: null``) and checks the rest. With
    ``compile_step`` only the compiled step is checked against eager execution (``COMPILED_WORKLOAD``), into
    ``bench/compiled-equal-eager-KIND.json``.
    """
    import torch

    from mini_deepinfer.bench.common import provenance
    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.runtime.device import resolve_device

    where = resolve_device(device)
    if where.type not in ("cuda", "cpu"):
        raise ValueError("the no-stall check uses torch.cuda.set_sync_debug_mode: it needs a cuda device")

    def model() -> Any:
        return build_model(qwen3_5_config(preset), torch.bfloat16, device, seed=0)

    if compile_step:
        result = {**provenance("gpu", argv, where, torch.float32), "preset": preset,
                  "graphs_equal_eager": graphs_equal_eager(device, preset, True, COMPILED_WORKLOAD)}
        name, shown = f"compiled-equal-eager-{where.type}.json", ("graphs_equal_eager",)
    else:
        result = {**provenance("gpu", argv, where, torch.bfloat16), "preset": preset,
                  "sync_debug_mode": "error" if where.type == "cuda" else None,
                  "no_stall": [launches_without_sync(device, g, model=model()) for g in (False, True)],
                  "graphs_equal_eager": graphs_equal_eager(device, preset)}
        name, shown = f"no-stall-{where.type}.json", ("no_stall", "graphs_equal_eager")
    (out / "bench").mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1, ensure_ascii=False) + "\n"
    (out / "bench" / name).write_text(text, encoding="utf-8")
    print(json.dumps({k: result[k] for k in shown}, indent=1))
    passed = all(r["passed"] for r in result.get("no_stall", [])) and result["graphs_equal_eager"]["passed"]
    return 0 if passed else 1


# --8<-- [start:plan]
@dataclass(frozen=True)
class Shapes:
    """The model shapes of a plan: the site's, or ``tiny`` everywhere for a dry run on a CPU."""

    target: str = "qwen3.5-2b"
    draft: str = "qwen3.5-0.8b"
    bench: str = "qwen3.5-0.8b"
    rounds: tuple[str, str] = ("small", "qwen3.5-0.8b")
    small: str = "small"  # bench.speculative and the no-stall check


DRY_RUN_SHAPES = Shapes("tiny", "tiny", "tiny", ("tiny", "tiny"), "tiny")


@dataclass(frozen=True)
class Step:
    """One command of the plan (``argv`` after ``python -m``) and what its manifest entry says about it."""

    name: str
    argv: tuple[str, ...]
    budget_s: float | None = None  # the quick profile's plan budget; None: the full profile's fixed limit
    execution: str | None = None  # "graphs", "eager", "eager and graphs"; None when no model runs
    needs: tuple[str, ...] = ()  # steps whose output (a checkpoint) this one reads
    compiled: bool = False


@dataclass(frozen=True)
class Plan:
    """Where a plan runs and writes, and how much it measures."""

    device: str
    out: Path
    weights: Path
    quick: bool = False
    shapes: Shapes = field(default_factory=Shapes)

    @property
    def kind(self) -> str:
        return self.device.split(":")[0]

    def checkpoint(self, preset: str) -> Path:
        """A random checkpoint's folder; ``random-`` keeps it apart from real weights in the same folder."""
        return self.weights / f"random-{preset}"


def checkpoint_steps(p: Plan) -> list[Step]:
    """The random checkpoints the record commands read (bfloat16 on disk, seed 0); the folder comes last."""
    presets = {"checkpoint-2b": p.shapes.target, "checkpoint-0.8b": p.shapes.draft}
    return [Step(name, ("mini_deepinfer.random_checkpoint", "--preset", preset, "--force",
                        str(p.checkpoint(preset)))) for name, preset in presets.items()]


def bench_steps(p: Plan) -> list[Step]:
    """The benchmarks: against transformers, synchronous vs cross-round, speculative, the no-stall check."""
    dev, bench = ("--device", p.device, "--dtype", "bfloat16"), p.out / "bench"
    few = ("--repeats", "1", "--new-tokens", "16") if p.quick else ("--repeats", "2")
    some = ("--repeats", "2", "--new-tokens", "32") if p.quick else ()
    steps = [Step(f"bench-{mode}",
                  ("mini_deepinfer.bench", *dev, "--preset", p.shapes.bench, *few, f"--{mode}",
                   "--output", str(bench / f"{p.kind}-bf16-{p.shapes.bench}-{mode}.json")),
                  execution=mode) for mode in ("eager", "graphs")]
    for label, preset in zip(("small", "0.8b"), p.shapes.rounds):
        steps += [Step(f"rounds-{label}-{mode}",
                       ("mini_deepinfer.bench.rounds", *dev, "--preset", preset,
                        *(some or ("--repeats", "5")), f"--{mode}",
                        "--output", str(bench / f"rounds-{p.kind}-{label}-{mode}.json")),
                       execution=mode) for mode in ("eager", "graphs")]
    steps.append(Step("speculative",
                      ("mini_deepinfer.bench.speculative", *dev, "--preset", p.shapes.small, *some,
                       "--output", str(bench / f"speculative-{p.kind}.json")),
                      execution="eager"))
    steps.append(Step("no-stall",
                      ("mini_deepinfer.bench.gpu", "--check-only", "--device", p.device,
                       "--preset", p.shapes.small, "--output-dir", str(p.out)),
                      execution="eager and graphs"))
    return steps


RECORD_OPTIONS = ("--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--max-new-tokens", "128",
                  "--cache-capacity", "512", "--max-num-seqs", "2", "--max-batched-tokens", "16",
                  "--chunked-prefill", "--check-greedy", "--graphs")
"""The first two record commands of the records contribution page, with ``--graphs``."""
SPECULATIVE_OPTIONS = ("--speculative", "--prompt", "The capital of France is", "--raw",
                       "--max-new-tokens", "10", "--cache-capacity", "128", "--draft-width", "3",
                       "--stream", "--cancel-after-tokens", "2", "--check-greedy")
"""The third: the 0.8B drafting for the 2B, streamed and cancelled after 2 tokens."""


def record_steps(p: Plan) -> list[Step]:
    """The three commands of the records contribution page."""
    target = ("mini_deepinfer.generate", "--model", str(p.checkpoint(p.shapes.target)),
              "--device", p.device, "--dtype", "float32")
    draft = ("--draft-model", str(p.checkpoint(p.shapes.draft)))
    records = p.out / "records"
    return [
        Step("record-batched",
             (*target, *RECORD_OPTIONS, "--output", str(records / "generate-batched-graphs.json")),
             execution="graphs", needs=("checkpoint-2b",)),
        Step("record-cross-round",
             (*target, *RECORD_OPTIONS, "--pipeline", "--stagger-prompts",
              "--output", str(records / "generate-cross-round-graphs.json")),
             execution="graphs", needs=("checkpoint-2b",)),
        Step("record-speculative",
             (*target, *draft, *SPECULATIVE_OPTIONS, "--output", str(records / "stream-cancel.json")),
             execution="eager", needs=("checkpoint-2b", "checkpoint-0.8b")),
    ]


def on_request_steps(p: Plan) -> list[Step]:
    """The steps of ``ON_REQUEST``: the compiled step's float32 check."""
    return [Step("compiled", ("mini_deepinfer.bench.gpu", "--check-only", "--compile", "--device", p.device,
                              "--preset", p.shapes.small, "--output-dir", str(p.out)),
                 execution="graphs", compiled=True)]


def steps(p: Plan) -> list[Step]:
    """Every measurement, in order; with ``quick``, each with its budget from ``QUICK_BUDGETS_S``."""
    plan = checkpoint_steps(p) + bench_steps(p) + record_steps(p) + on_request_steps(p)
    if not p.quick:
        return plan
    return [Step(s.name, s.argv, QUICK_BUDGETS_S[s.name], s.execution, s.needs, s.compiled) for s in plan]
# --8<-- [end:plan]


def select(plan: list[Step], names: list[str] | None, present: Callable[[Step], bool]) -> list[Step]:
    """The steps ``--steps`` names, in plan order, with each checkpoint they need that is not ``present``;
    without names every step but those run on request only."""
    if names is None:
        return [s for s in plan if s.name not in ON_REQUEST]
    known = {s.name: s for s in plan}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown step(s) {', '.join(unknown)}: use {', '.join(known)}")
    wanted = set(names) | {need for n in names for need in known[n].needs if not present(known[need])}
    return [s for s in plan if s.name in wanted]


def format_plan(plan: list[Step], wall_s: float | None, dry_run: bool = False) -> str:
    """The plan as printed before anything runs: each step, its budget and when it is stopped."""
    from mini_deepinfer.bench.common import text_table

    rows = [("step", "budget", "stopped after")]
    for s in plan:
        rows.append((s.name, "-" if s.budget_s is None else f"{s.budget_s:.0f} s",
                     f"{step_limit(s, dry_run):.0f} s"))
    total = sum(s.budget_s or 0 for s in plan)
    head = f"{len(plan)} steps"
    if wall_s:
        head += (f", at most {wall_s:.0f} s of wall time in all; budgets are plan estimates, not "
                 f"measurements (total {total:.0f} s)")
    if dry_run:
        head += " on the cpu at the tiny shape (a dry run: the budgets are those of the GPU plan)"
    return "\n".join([head, *text_table(rows)]) + "\n"


def step_limit(step: Step, dry_run: bool = False) -> float:
    """How long a step may run: ``QUICK_SLACK`` times its budget; ``STEP_TIMEOUT_S`` without a budget and
    in a dry run (a CPU is slower than the device the budgets are for)."""
    return STEP_TIMEOUT_S if step.budget_s is None or dry_run else QUICK_SLACK * step.budget_s


# --8<-- [start:run_plan]
@dataclass
class Run:
    """Where a run writes, the manifest it keeps up to date, and the limit on its whole wall time."""

    out: Path
    archive: Path
    manifest: dict[str, Any]  # its "tag" names the archive's top folder
    wall_s: float | None = None
    dry_run: bool = False
    started: float = field(default_factory=time.monotonic)

    def save(self) -> None:
        """Rewrite ``manifest.json`` and the archive, each atomically: a killed run keeps the last of both."""
        text = json.dumps(self.manifest, indent=1, ensure_ascii=False) + "\n"
        write_atomic(self.out / "manifest.json", text)
        pack(self.out, self.archive, self.manifest["tag"])

    def time_left(self) -> float:
        return float("inf") if self.wall_s is None else self.wall_s - (time.monotonic() - self.started)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def pack(out: Path, archive: Path, tag: str) -> None:
    """Every file under ``out`` (``manifest.json``, ``bench/``, ``records/``, ``logs/``) in one .tar.gz, in
    a folder named ``tag``: one file to bring back from the GPU machine."""
    tmp = archive.with_name(archive.name + ".tmp")
    files = sorted(p for p in out.rglob("*") if p.is_file() and not p.name.endswith(".tmp")
                   and p.resolve() != archive.resolve())
    with tarfile.open(tmp, "w:gz") as tar:
        for path in files:
            tar.add(path, arcname=f"{tag}/{path.relative_to(out).as_posix()}")
    os.replace(tmp, archive)


def record_step(run: Run, entry: dict[str, Any]) -> None:
    """Put a step's entry into the manifest (replacing an earlier one of the same name) and save."""
    kept = [e for e in run.manifest["steps"] if e["step"] != entry["step"]]
    order = [s["step"] for s in run.manifest["plan"]]
    run.manifest["steps"] = sorted([*kept, entry], key=lambda e: order.index(e["step"]))
    run.save()


def run_plan(run: Run, plan: list[Step], provenance: dict[str, Any]) -> dict[str, Any]:
    """Run the steps in order, each in its own process; save the manifest before and after each one."""
    for step in plan:
        entry = {"step": step.name, "command": ["python", "-m", *step.argv], "started_at": utc_now_iso(),
                 "budget_s": step.budget_s,
                 "provenance": {**provenance, "execution": step.execution, "compiled": step.compiled}}
        limit = min(step_limit(step, run.dry_run), run.time_left())
        if run.time_left() < (step.budget_s or 0) or limit <= 0:  # it would not fit what is left
            entry.update(status="skipped", why=f"less than its budget left of the run's {run.wall_s:.0f} s")
        else:
            try:
                entry.update(run_step(step, limit, run, entry))
            except KeyboardInterrupt:  # the step is stopped; the manifest says so before the run ends
                record_step(run, {**entry, "status": "interrupted"})
                raise
        record_step(run, entry)
        print(f"{step.name}: {entry['status']}"
              + (f" (exit {entry['exit_code']}) in {entry['seconds']} s" if "seconds" in entry else ""),
              flush=True)
    return run.manifest


def run_step(step: Step, limit: float, run: Run, entry: dict[str, Any]) -> dict[str, Any]:
    """Run one step with its output in ``logs/STEP.log``; stop it (and what it started) after ``limit``."""
    log_path = run.out / "logs" / f"{step.name}.log"
    start = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen([sys.executable, "-m", *step.argv], stdout=log, stderr=subprocess.STDOUT,
                                process_group=0)  # its own group: a timeout stops its children too
        record_step(run, {**entry, "status": "running", "pid": proc.pid})
        status = wait_or_stop(proc, limit)
    tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
    return {"status": status, "exit_code": proc.returncode, "seconds": round(time.perf_counter() - start, 1),
            "output_tail": tail}


def wait_or_stop(proc: subprocess.Popen, limit: float) -> str:
    """Wait for a step: ``passed``, ``failed``, or ``timed out`` (its process group is killed)."""
    try:
        code = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        return "timed out"
    except KeyboardInterrupt:
        stop_group(proc)
        raise
    return "passed" if code == 0 else "failed"


def stop_group(proc: subprocess.Popen) -> None:
    """Kill a step's process group and wait for the step, so nothing it started keeps the device."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
# --8<-- [end:run_plan]


def device_tag(kind: str, name: str | None, sha: dict[str, Any], dry_run: bool) -> str:
    """The archive's folder: ``cuda-h200-1a2b3c4`` (``-dirty`` when the package differs from the commit)."""
    words = [w for w in (name or kind).lower().replace("nvidia", " ").split() if w]
    label = "dry-run" if dry_run else "-".join("".join(c for c in w if c.isalnum()) for w in words)
    commit = (sha.get("sha") or "unknown")[:7] + ("-dirty" if sha.get("dirty") else "")
    return f"{kind}-{label}-{commit}"


def common_provenance(device: str) -> dict[str, Any]:
    """What every step shares: commit, clean tree, device name, torch version."""
    import torch

    from mini_deepinfer.runtime.device import device_info, resolve_device
    from mini_deepinfer.tools.records import package_source_sha

    sha = package_source_sha()
    clean = None if sha["dirty"] is None else not sha["dirty"]
    info = device_info(resolve_device(device))
    return {"commit": sha["sha"], "clean_tree": clean, "device": info["name"], "torch": torch.__version__}


def load_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of an earlier run in the same folder, or None; one line if it cannot be read."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc.msg}): move it or use another --output-dir") from None


def start_run(args: Any, plan: list[Step], argv: list[str]) -> tuple[Run, dict[str, Any]]:
    """The run's folders and manifest and the provenance every step shares. With ``--steps``, the earlier
    manifest's entries of the same commit and tree are kept (one archive never mixes two sources).
    ``plan`` is the whole plan, not only the steps chosen."""
    for sub in ("bench", "records", "logs"):
        (args.output_dir / sub).mkdir(parents=True, exist_ok=True)
    provenance = common_provenance(args.device)
    sha = {"sha": provenance["commit"], "dirty": provenance["clean_tree"] is False}
    manifest = {"schema": 2, "command": ["python", "-m", "mini_deepinfer.bench.gpu", *argv],
                "profile": "quick" if args.quick else "full", "dry_run": args.dry_run, "device": args.device,
                "tag": device_tag(args.device.split(":")[0], provenance["device"], sha, args.dry_run),
                "wall_limit_s": QUICK_WALL_S if args.quick and not args.dry_run else None,
                "plan": [{"step": s.name, "budget_s": s.budget_s, "limit_s": step_limit(s, args.dry_run)}
                         for s in plan],
                "steps": []}
    earlier = load_manifest(args.output_dir / "manifest.json") if args.steps else None
    if earlier is not None:
        same = {"commit": provenance["commit"], "clean_tree": provenance["clean_tree"]}
        manifest["steps"] = [e for e in earlier.get("steps", []) if e["step"] in {s.name for s in plan}
                             and {k: e.get("provenance", {}).get(k) for k in same} == same]
    archive = args.archive or args.output_dir.with_name(args.output_dir.name + ".tar.gz")
    return Run(args.output_dir, archive, manifest, manifest["wall_limit_s"], args.dry_run), provenance


FLAG_NEEDS = (FlagNeeds("--preset", "--check-only"), FlagNeeds("--compile", "--check-only"),
              *(FlagUnusedWith(flag, "--check-only")
                for flag in ("--archive", "--weights-dir", "--quick", "--steps", "--dry-run")))
"""Options that change nothing without another: given alone, each is refused (``OneLineParser``)."""


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m mini_deepinfer.bench.gpu",
                      description="Run every accelerator measurement of the site and write the JSON files.",
                      needs=FLAG_NEEDS)
    p.add_argument("--device", default="cuda:0", help="cuda[:N] or npu[:N] (default cuda:0)")
    p.add_argument("--output-dir", type=Path, default=Path("gpu-results"),
                   help="where bench/, records/, logs/ and manifest.json go (default gpu-results)")
    p.add_argument("--archive", type=Path, help="the .tar.gz of the results (default OUTPUT_DIR.tar.gz)")
    p.add_argument("--weights-dir", type=Path,
                   help="where the random checkpoints are written (default weights)")
    p.add_argument("--quick", action="store_true",
                   help=f"fewer repeats and shorter decodes, at most {QUICK_WALL_S} s of wall time")
    p.add_argument("--steps", help="comma-separated step names to (re)run, merged into the manifest")
    p.add_argument("--dry-run", action="store_true",
                   help="run the plan on the cpu at the tiny shape: checks the commands, measures nothing")
    p.add_argument("--check-only", action="store_true", help="only the no-stall and graphs-vs-eager checks")
    p.add_argument("--preset", help="with --check-only: the model shape (default small)")
    p.add_argument("--compile", action="store_true",
                   help="with --check-only: only the compiled step's greedy tokens against eager, in float32")
    return p


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.check_only:
        return check_only(args.device, args.output_dir, args.preset or "small", argv, args.compile)
    if args.dry_run:
        args.device = "cpu"
    p = Plan(args.device, args.output_dir, args.weights_dir or Path("weights"), args.quick,
             DRY_RUN_SHAPES if args.dry_run else Shapes())
    names = [n.strip() for n in args.steps.split(",") if n.strip()] if args.steps else None
    plan = steps(p)
    chosen = select(plan, names, lambda s: (Path(s.argv[-1]) / "config.json").exists())
    from mini_deepinfer.runtime.device import resolve_device

    if resolve_device(args.device).type == "cpu" and not args.dry_run:  # one line, before anything runs
        raise ValueError("bench.gpu measures an accelerator: use --device cuda[:N] or npu[:N] (or --dry-run)")
    run_state, provenance = start_run(args, plan, argv)
    print(format_plan(chosen, run_state.wall_s, args.dry_run), end="", flush=True)
    manifest = run_plan(run_state, chosen, provenance)
    print(printable(f"wrote {args.output_dir / 'manifest.json'} and {run_state.archive}"))
    ran = {s.name for s in chosen}
    return 0 if all(e["status"] == "passed" for e in manifest["steps"] if e["step"] in ran) else 1


def main(argv: list[str] | None = None) -> int:
    return run_command(run, argv, errors=(ValueError, OSError))  # OSError: an unusable --output-dir


if __name__ == "__main__":
    sys.exit(main())
