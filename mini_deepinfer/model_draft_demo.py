"""``python -m mini_deepinfer.model_draft_demo``: a random draft and target Qwen3.5, round by round.

Scope: the CPU examples of lessons 12 and 13 and the two-model walkthrough. The target is a small Qwen3.5
(three Gated DeltaNet layers, one gated attention layer, vocabulary 256) built in code with random weights
from a fixed seed, at transformers' initialisation scale (0.02). The draft is a copy of it:

* ``--cpu-example rejection``: the copy's weights plus noise (0.1 x each weight's standard deviation,
  seed 25), so it agrees with the target only sometimes. The seed was picked so that one short run shows a
  rejected first draft, a round where every draft is accepted, a partly accepted round, and a last round
  whose width is cut by ``max_new_tokens``.
* ``--cpu-example acceptance``: the exact copy, so every draft is accepted and the draft cache ends each
  round one position behind, which the next round's top-up (two inputs) makes up.
* ``--cpu-example sampling``: a noisier copy (0.5 x std, seed 3) and a request that samples (temperature
  0.1, seed 0): every draft is drawn from the draft's distribution q and accepted with probability
  ``min(1, p/q)``; a rejected draft is replaced by a draw from ``norm(max(0, p - q))``.

One request (prompt ``[11, 22, 33]``) runs through ``Engine`` with a ``SpeculativeRunner``. With
``--trace-rounds`` every round prints the draft's inputs and proposals, the target's one verify forward,
what was accepted, how both caches were set back, and whether both caches equal a cold recomputation of
the committed prefix. ``--output FILE`` writes a run record with the greedy and cold-cache checks.
``--write-draft TARGET DRAFT`` writes a perturbed copy of a checkpoint folder, a draft for
``python -m mini_deepinfer.generate --speculative`` when no real draft checkpoint is at hand.

Non-scope: real weights and text (``generate``), sampling (lesson 14 and the notebook), timing (the
benchmark ``python -m mini_deepinfer.bench.speculative``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mini_deepinfer.core.engine import MAX_SPEC_WIDTH, EngineConfig
from mini_deepinfer.core.request import MAX_SEED, SamplingParams
from mini_deepinfer.core.trace import Trace, TraceEvent, format_event, span
from mini_deepinfer.tools.cli import (
    FlagNeeds,
    FlagUnusedWith,
    OneLineParser,
    UsageError,
    in_flag_terms,
    printable,
    run_command,
)

if TYPE_CHECKING:
    from mini_deepinfer.core.engine import Engine
    from mini_deepinfer.models.layers import CausalLM
    from mini_deepinfer.runtime.speculative.runner import RoundDetail, SpeculativeRunner

TARGET_SEED = 0
PROMPT = (11, 22, 33)
MAX_NEW_TOKENS = 12
COLD_TOLERANCE = 1e-5  # float32, the largest difference allowed between the live and a cold cache
DEFAULT_NOISE = 0.1
FLAG_NEEDS = (FlagNeeds("--noise", "--write-draft"), FlagNeeds("--seed", "--write-draft"),
              FlagNeeds("--force", "--write-draft"),
              *(FlagUnusedWith(flag, "--write-draft")
                for flag in ("--cpu-example", "--width", "--trace-rounds", "--output")))
"""Options that change nothing without another: given alone, each is refused (``OneLineParser``)."""


@dataclass(frozen=True)
class Example:
    """One CPU example: how the draft is made from the target."""

    name: str
    noise: float  # perturbation, in units of each weight's standard deviation
    noise_seed: int
    description: str
    temperature: float = 0.0  # 0 = greedy
    seed: int | None = None  # the request's sampling seed


# --8<-- [start:examples]
EXAMPLES = {
    "rejection": Example("rejection", noise=0.1, noise_seed=25,
                         description="the target's weights plus noise (0.1 x each weight's std, seed 25)"),
    "acceptance": Example("acceptance", noise=0.0, noise_seed=0,
                          description="an exact copy of the target"),
    "sampling": Example("sampling", noise=0.5, noise_seed=3, temperature=0.1, seed=0,
                        description="the target's weights plus noise (0.5 x each weight's std, seed 3)"),
}
# --8<-- [end:examples]


def demo_target(seed: int = TARGET_SEED) -> CausalLM:
    """A random, untrained ``tiny`` Qwen3.5 (3 Gated DeltaNet layers, then 1 attention layer, vocabulary
    256)."""
    import torch

    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config

    return build_model(qwen3_5_config("tiny"), torch.float32, "cpu", seed=seed)


def make_engine(target: CausalLM, draft: CausalLM, width: int, trace: Trace) -> Engine:
    """One request at a time; both caches have the same capacities, so one slot numbering serves both."""
    from mini_deepinfer.runtime.factory import build_engine

    with in_flag_terms({"spec_width": "--width"}):
        config = EngineConfig(kv_capacity=len(PROMPT) + MAX_NEW_TOKENS + 1, spec_width=width)
        return build_engine(target, config, draft=draft, batching=False, trace=trace)


def detail_lines(round_id: int, d: RoundDetail) -> list[str]:
    """The draft's inputs and proposals, the target's verify forward, the decision, the state restores."""
    head = f"[round {round_id}]"
    prop, n = d.proposal, d.start
    topup = prop.inputs[0]
    lines = [f"{head} draft    top-up inputs={topup} positions={span(prop.topup_start, len(topup))} "
             f"-> proposes {prop.drafts[0]}"]
    for j, (inp, out) in enumerate(zip(prop.inputs[1:], prop.drafts[1:]), start=1):
        lines.append(f"{head} draft    step   input={inp[0]} position={n + j} -> proposes {out}")
    k = len(prop.drafts)
    lines.append(f"{head} target   verify inputs={d.target_inputs} positions={span(n, k + 1)} (one forward, "
                 f"logits at all {k + 1} positions)")
    lines.extend(_sampled_lines(head, d) if d.steps else [_greedy_line(head, d)])
    return lines


def restore_lines(round_id: int, d: RoundDetail) -> list[str]:
    """What ``Runner.rewind`` set back in both caches, after the group was committed."""
    head = f"[round {round_id}]"
    return [_target_restore_line(head, d), _draft_restore_line(head, d)]


def _greedy_line(head: str, d: RoundDetail) -> str:
    drafts, k = d.proposal.drafts, len(d.proposal.drafts)
    marks = " ".join(f"{t}{'=' if t == c else '≠'}{c}" for t, c in zip(drafts, d.target_choice))
    if d.accepted == k:
        verdict = f"all {k} accepted + bonus {d.group[-1]}"
    else:
        verdict = f"{d.accepted} accepted + correction {d.group[-1]}"
    return f"{head} verify   draft=target argmax: {marks} -> {verdict}"


def _sampled_lines(head: str, d: RoundDetail) -> list[str]:
    """One line per acceptance test, then where the last token came from."""
    lines = []
    for step in d.steps:
        chance = min(1.0, step.p / step.q)
        verdict = "accepted" if step.accepted else "rejected"
        lines.append(f"{head} verify   draft {step.token}: p={step.p:.3f} q={step.q:.3f} accept if u < "
                     f"min(1, p/q) = {chance:.3f}; u={step.u:.3f} -> {verdict}")
    if d.accepted == len(d.proposal.drafts):
        lines.append(f"{head} verify   all {d.accepted} accepted; bonus {d.group[-1]} drawn from p")
    else:
        lines.append(f"{head} verify   {d.group[-1]} drawn from norm(max(0, p - q)) at position "
                     f"{d.start + d.accepted + 1}")
    return lines


def _target_restore_line(head: str, d: RoundDetail) -> str:
    n, k, a = d.start, len(d.proposal.drafts), d.accepted
    if a == k:
        return f"{head} restore  target state: keeps the state after position {n + k} (nothing rejected)"
    return (f"{head} restore  target state slot <- snapshot after position {n + a} "
            f"(snapshots at {span(n, k + 1)})")


def _draft_restore_line(head: str, d: RoundDetail) -> str:
    computed, kept = d.draft.computed, d.draft.kept
    next_topup = d.start + d.accepted + 2  # the cache length after the next round's top-up
    if kept == computed and d.accepted == len(d.proposal.drafts):
        how = "all kept, one position behind"
    elif kept == computed:
        how = "all kept"
    else:
        how = f"state <- snapshot after position {kept - 1}"
    return (f"{head} restore  draft cache: computed {computed} -> keep {kept} ({how}); "
            f"next round tops up to {next_topup}")


class RoundPrinter:
    """Prints the engine's trace events and, at each verify, what the runner did in that round."""

    def __init__(self, print_line: Callable[[str], None], trace_rounds: bool) -> None:
        self.print_line = print_line
        self.trace_rounds = trace_rounds
        self.runner: SpeculativeRunner | None = None

    def on_event(self, event: TraceEvent) -> None:
        if not self.trace_rounds or event.kind in ("launch", "read"):
            return
        if event.kind == "verify":
            for line in detail_lines(event.round_id, self.runner.details[event.request_id]):
                self.print_line(line)
        elif event.kind == "schedule" and event.data["phase"] == "decode":
            d = event.data
            width = len(d["inputs"]) - 1
            self.print_line(f"[round {event.round_id}] schedule {event.request_id} decode  "
                            f"input={d['inputs'][0]} "
                            f"+ {width} draft positions, positions={span(d['start_pos'], width + 1)} "
                            f"slots={d['slots']}")
        elif event.kind == "rollback":  # the request goes on: both caches go back to its committed prefix
            for line in restore_lines(event.round_id, self.runner.details[event.request_id]):
                self.print_line(line)
            freed, kept, head = event.data["slots"], event.data["kept"], f"[round {event.round_id}]"
            if freed:
                self.print_line(f"{head} rollback {event.request_id} frees KV slots {freed} "
                                f"(positions {span(kept, len(freed))}); keeps positions 0..{kept - 1}")
        else:
            self.print_line(format_event(event))


@dataclass
class ColdCheck:
    """After every round: both caches against a cold recomputation of what they should hold. ``greedy`` keeps
    the greedy check of the finished run (None when the request samples), made once for the summary and the
    record."""

    comparisons: int = 0
    worst: float = 0.0
    greedy: dict | None = None
    differed: tuple[str, ...] = ()  # the caches ("target", "draft") that differed after some round

    def check(self, engine: Engine) -> tuple[str, ...]:
        """Compare every running request's caches; the names of those beyond ``COLD_TOLERANCE`` (none: ok)."""
        from mini_deepinfer.tools.checks import cold_difference

        runner = engine.runner
        differ: set[str] = set()
        for req in engine.running:
            tokens = (list(req.prompt_token_ids) + req.output_token_ids)[: req.num_computed]
            parts = [("target", runner.model, runner.cache, tokens)]
            held = runner.draft.computed.get(req.request_id, 0)
            if held:
                parts.append(("draft", runner.draft.model, runner.draft.cache, tokens[:held]))
            for name, model, cache, prefix in parts:
                diff = max(cold_difference(model, cache, prefix, req.kv_slots, req.state_slot).values())
                self.comparisons += 1
                self.worst = max(self.worst, diff)
                if diff > COLD_TOLERANCE:
                    differ.add(name)
        self.differed = tuple(n for n in ("target", "draft") if n in differ or n in self.differed)
        return tuple(n for n in ("target", "draft") if n in differ)


def which_differ(names: tuple[str, ...]) -> str:
    """``"the draft cache DIFFERS"`` or ``"both caches DIFFER"``: the words name only the caches that do."""
    return "both caches DIFFER" if len(names) == 2 else f"the {names[0]} cache DIFFERS"


def cache_line(engine: Engine, differ: tuple[str, ...]) -> str:
    runner = engine.runner
    req = next(iter(engine.requests.values()))
    target_held = req.num_computed if not req.finished else 0
    draft_held = runner.draft.computed.get(req.request_id, 0)
    verdict = (f"{which_differ(differ)} from a cold recomputation" if differ
               else "both equal a cold recomputation (1e-5)")
    held = (f"target holds {_held(target_held)}, draft holds {_held(draft_held)}"
            if not req.finished else "nothing held")
    return (f"[round {engine.round_id}] caches   {held}; KV free {engine.kv_pool.num_free}/"
            f"{engine.kv_pool.capacity}" + (f"; {verdict}" if not req.finished else ""))


def _held(n: int) -> str:
    return f"0..{n - 1}" if n else "nothing"


def build_models(example: Example) -> tuple[CausalLM, CausalLM]:
    """The example's target and draft."""
    from mini_deepinfer.tools.checkpoints import perturbed_copy

    target = demo_target()
    return target, perturbed_copy(target, example.noise, example.noise_seed)


def run_example(example: Example, width: int, trace_rounds: bool, print_line: Callable[[str], None] = print,
                models: tuple[CausalLM, CausalLM] | None = None) -> tuple[Engine, ColdCheck]:
    """Run the example's one request; print rounds and a summary; return the engine and the cold check."""
    target, draft = models if models is not None else build_models(example)
    printer = RoundPrinter(print_line, trace_rounds)
    engine = make_engine(target, draft, width, Trace(listener=printer.on_event))
    printer.runner = engine.runner
    for line in header_lines(example, width, engine):
        print_line(line)
    cold = ColdCheck()
    engine.submit("A", list(PROMPT), SamplingParams(max_new_tokens=MAX_NEW_TOKENS,
                                                    temperature=example.temperature, seed=example.seed))
    while engine.has_unfinished():
        engine.step()
        differ = cold.check(engine)
        if trace_rounds:
            print_line(cache_line(engine, differ))
    cold.greedy = greedy_check(engine)
    for line in summary_lines(engine, cold):
        print_line(line)
    return engine, cold


def header_lines(example: Example, width: int, engine: Engine) -> list[str]:
    return [
        f"Target: random tiny Qwen3.5 (untrained, seed {TARGET_SEED}): 3 Gated DeltaNet layers + 1 gated "
        f"attention layer, vocab 256, {_decoding(example)}.",
        f"Draft: {example.description}.",
        f"Request A: prompt {list(PROMPT)}, max_new_tokens {MAX_NEW_TOKENS}, draft width {width}; "
        f"{engine.kv_pool.capacity} KV slots and 1 state slot, numbered alike in both caches.",
    ]


def _decoding(example: Example) -> str:
    if example.temperature == 0:
        return "greedy"
    return f"sampling at temperature {example.temperature:g} (seed {example.seed})"


def greedy_check(engine: Engine) -> dict | None:
    """Request A's tokens against a plain greedy run of the target; None when A samples."""
    from mini_deepinfer.tools.checks import check_greedy

    req = engine.requests["A"]
    return check_greedy(engine.runner.model, [req]) if req.params.greedy else None


def greedy_check_line(greedy: dict | None) -> str:
    if greedy is None:
        return "Greedy check: not run (the request samples; its distribution is tested in lesson 14)."
    verdict = "equal" if greedy["passed"] else "DIFFER from"
    return f"Greedy check: {greedy['compared_tokens']} tokens {verdict} a plain greedy run of the target."


def cold_check_line(cold: ColdCheck) -> str:
    """The summary's verdict on both caches; when one differed, the other's agreement is stated too."""
    tolerance, count = f"{COLD_TOLERANCE:g}", f"({cold.comparisons} comparisons)"
    if not cold.differed:
        return (f"Cold-cache check: after every round both caches equal a cold recomputation of the "
                f"committed prefix within {tolerance} {count}.")
    others = [name for name in ("target", "draft") if name not in cold.differed]
    equal = f"; the {others[0]} cache equals it after every round" if others else ""
    return (f"Cold-cache check: {which_differ(cold.differed)} from a cold recomputation of the committed "
            f"prefix by more than {tolerance}{equal} {count}.")


def summary_lines(engine: Engine, cold: ColdCheck) -> list[str]:
    runner = engine.runner
    req = engine.requests["A"]
    stats = runner.stats
    draft = runner.draft
    return [
        f"A: {req.output_token_ids} ({req.finish_reason.value})",
        f"Committed groups: {req.committed_groups}",
        f"Target forwards: {stats['target_forwards']} for {len(req.output_token_ids)} tokens; drafts "
        f"accepted {stats['accepted']} of {stats['proposed']}.",
        greedy_check_line(cold.greedy),
        cold_check_line(cold),
        f"Free slots: target KV {engine.kv_pool.num_free}/{engine.kv_pool.capacity}, state "
        f"{engine.state_pool.num_free}/{engine.state_pool.capacity}; draft KV {draft.free_kv_slots()}/"
        f"{draft.cache.kv_capacity}, state {draft.free_state_slots()}/{draft.cache.state_capacity}",
    ]


def build_record(argv: list[str], example: Example, width: int, engine: Engine, cold: ColdCheck,
                 load_s: float, run_s: float):
    """The run record of one example: both models, the request with its groups, both caches, the checks."""
    import torch

    from mini_deepinfer.runtime.device import device_info
    from mini_deepinfer.tools.records import RunRecord, model_info

    runner = engine.runner
    config = {"cpu_example": example.name, "width": width, "noise": example.noise,
              "noise_seed": example.noise_seed, "temperature": example.temperature, "seed": example.seed,
              "target_seed": TARGET_SEED, "prompt": list(PROMPT),
              "max_new_tokens": MAX_NEW_TOKENS, "kv_slots": engine.kv_pool.capacity, "state_slots": 1}
    record = RunRecord.start(["python", "-m", "mini_deepinfer.model_draft_demo", *argv], config)
    record.device = device_info(torch.device("cpu"))
    record.model = model_info(None, "Qwen3_5ForCausalLM", sum(p.numel() for p in runner.model.parameters()),
                              "float32")
    record.model["weights"] = f"random weights (built in code, seed {TARGET_SEED})"
    record.draft_model = model_info(None, "Qwen3_5ForCausalLM",
                                    sum(p.numel() for p in runner.draft.model.parameters()), "float32")
    record.draft_model["weights"] = f"random weights: {example.description}"
    req = engine.requests["A"]
    first = None if req.first_token_at is None else req.first_token_at - req.submitted_at
    record.add_request(prompt=None, prompt_token_ids=req.prompt_token_ids,
                       output_token_ids=req.output_token_ids, text=None, finish_reason=req.finish_reason,
                       first_token_s=first, committed_groups=req.committed_groups)
    record.set_cache("target", engine.kv_pool.capacity, engine.kv_pool.num_free,
                     engine.state_pool.capacity, engine.state_pool.num_free)
    draft = runner.draft
    record.set_cache("draft", draft.cache.kv_capacity, draft.free_kv_slots(), draft.cache.state_capacity,
                     draft.free_state_slots())
    if cold.greedy is not None:
        record.add_check("check_greedy", cold.greedy)
    record.add_check("cold_cache", {"comparisons": cold.comparisons, "tolerance": COLD_TOLERANCE,
                                    "max_abs_diff": cold.worst, "passed": cold.worst <= COLD_TOLERANCE,
                                    "compared": "KV of the committed prefix, conv windows and recurrent "
                                                "states of both caches, after every round"})
    record.add_check("acceptance", dict(runner.stats))
    record.timings["load_s"], record.timings["run_s"] = load_s, run_s
    return record


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m mini_deepinfer.model_draft_demo",
                      description="Speculative decoding on two random tiny Qwen3.5 models: the draft "
                                  "proposes, the target verifies, both caches are set back after a "
                                  "rejection.", needs=FLAG_NEEDS)
    p.add_argument("--cpu-example", choices=list(EXAMPLES),
                   help="rejection: a perturbed draft that agrees sometimes; acceptance: an exact copy; "
                        "sampling: a sampled request, accepted with probability min(1, p/q) "
                        "(default rejection)")
    p.add_argument("--width", type=int,
                   help=f"draft tokens per round, 1..{MAX_SPEC_WIDTH} (default 3)")
    p.add_argument("--trace-rounds", action="store_true", help="print every round")
    p.add_argument("--output", type=Path, help="write a run record (JSON) to this file")
    p.add_argument("--write-draft", nargs=2, type=Path, metavar=("TARGET_DIR", "DRAFT_DIR"),
                   help="write a perturbed copy of a checkpoint folder (a draft for it) and exit")
    p.add_argument("--noise", type=float,
                   help=f"with --write-draft: noise in units of each weight's std (default {DEFAULT_NOISE})")
    p.add_argument("--seed", type=int, help="with --write-draft: noise seed (default 0)")
    p.add_argument("--force", action="store_true", help="with --write-draft: replace DRAFT_DIR")
    return p


def check_write_draft(a: argparse.Namespace) -> None:
    """The perturbed copy needs a finite noise, a seed a generator takes, and a folder apart from its source:
    writing into the source (or a folder inside it, or one that holds it) would replace the weights it
    reads. Fills in the defaults of ``--noise`` and ``--seed``."""
    a.noise = DEFAULT_NOISE if a.noise is None else a.noise
    a.seed = 0 if a.seed is None else a.seed
    if not 0 <= a.noise < math.inf:  # written so that NaN fails too
        raise UsageError(f"--noise must be a finite number >= 0, got {a.noise}")
    if not 0 <= a.seed <= MAX_SEED:
        raise UsageError(f"--seed must be in 0..2**64-1, got {a.seed}")
    source, target = (Path(os.path.realpath(p)) for p in a.write_draft)
    if source == target or source in target.parents or target in source.parents:
        relation = ("is" if source == target else "is inside" if source in target.parents else "holds")
        raise UsageError(f"--write-draft: DRAFT_DIR {a.write_draft[1]} {relation} TARGET_DIR "
                         f"{a.write_draft[0]}; write the draft to a folder of its own")


def run(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    if a.write_draft:
        check_write_draft(a)
        from mini_deepinfer.tools.checkpoints import write_perturbed_checkpoint

        changed = write_perturbed_checkpoint(*a.write_draft, noise=a.noise, seed=a.seed, force=a.force)
        print(printable(f"wrote {a.write_draft[1]}: {changed} weight tensors with noise {a.noise:g} x their "
                        "std"))
        return 0
    a.width = 3 if a.width is None else a.width
    a.cpu_example = a.cpu_example or "rejection"
    if not 1 <= a.width <= MAX_SPEC_WIDTH:
        raise UsageError(f"--width must be an integer in 1..{MAX_SPEC_WIDTH}, got {a.width}")
    if a.output:
        from mini_deepinfer.tools.records import check_output_path

        check_output_path(a.output)
    import torch

    torch.set_num_threads(1)  # fastest for so small a model, and the same numbers on any machine
    example = EXAMPLES[a.cpu_example]
    start = time.perf_counter()
    models = build_models(example)  # built in code: this is the run's "load"
    load_s, start = time.perf_counter() - start, time.perf_counter()
    engine, cold = run_example(example, a.width, a.trace_rounds, models=models)
    if a.output:
        run_s = time.perf_counter() - start
        build_record(argv, example, a.width, engine, cold, load_s, run_s).write(a.output)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(run, argv, errors=(ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
