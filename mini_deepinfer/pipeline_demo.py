"""``python -m mini_deepinfer.pipeline_demo``: requests A, B and C share rounds on a random tiny Qwen3.5.

Scope: the batching demo of lessons 3 and 4 and the A/B/C walkthrough. A small Qwen3.5 (three Gated DeltaNet
layers, one gated attention layer) is built in code with random weights from a fixed seed: no checkpoint, no
tokenizer, prompts are token ids and outputs are the token ids greedy decoding picks. A ``BatchEngine`` with a
small token budget, chunked prefill and a small cache runs three requests:

* B, a short prompt that arrives first and finishes first;
* A, a long prompt that is prefilled in chunks across rounds while B decodes;
* C, which arrives after round 1, waits while the slots left are promised to A and B, and is admitted into
  the KV slots and the state slot that B gave back.

Each round is printed from the engine's trace events (``schedule``, ``commit``, ``finish``, ``free``; with
``--pipeline`` also ``launch`` and ``read``), plus four kinds of line derived from those events and the
engine's pools: ``admit`` (a request's first chunk: its state slot and its worst-case KV reservation),
``waiting`` (a request left in the queue after the round was scheduled, with the numbers that kept it there),
``budget`` (tokens in the round) and ``cache`` (KV and state slots taken and given back, and what is free).
With ``--toy`` lesson 1's toy runner ("next token = last input + 1") stands in for the model: no torch is
imported, so the lesson pages can run it in the browser. The rounds are the same (every request stops at its
``max_new_tokens``, and the schedule never reads a token's value); only the token ids differ.
Non-scope: real weights and text (``python -m mini_deepinfer.generate``), timing, sampling other than greedy.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.request import Request, SamplingParams
from mini_deepinfer.core.toy import ToyRunner
from mini_deepinfer.core.trace import Trace, TraceEvent, format_event
from mini_deepinfer.tools.cli import OneLineParser, in_flag_terms, run_command

if TYPE_CHECKING:
    import torch

MODEL_SEED = 0
QUIET_KINDS = {"launch", "read"}  # printed only with --pipeline, where their order is the point


@dataclass(frozen=True)
class DemoRequest:
    """One request of the demo: its prompt, its length limit, and the round after which it arrives."""

    request_id: str
    prompt: tuple[int, ...]
    max_new_tokens: int
    arrives_after_round: int


# --8<-- [start:requests]
DEMO_REQUESTS = (
    DemoRequest("B", (5, 6, 7, 8), max_new_tokens=5, arrives_after_round=0),
    DemoRequest("A", tuple(range(100, 118)), max_new_tokens=5, arrives_after_round=0),
    DemoRequest("C", (9, 8, 7, 6, 5), max_new_tokens=3, arrives_after_round=3),
)
# --8<-- [end:requests]


@dataclass(frozen=True)
class DemoOptions:
    """The engine settings of a demo run (the command-line flags)."""

    max_batched_tokens: int = 8
    kv_slots: int = 36
    max_num_seqs: int = 3
    chunked_prefill: bool = True
    pipeline: bool = False
    toy: bool = False  # lesson 1's toy runner instead of the random Qwen3.5

    def engine_config(self) -> EngineConfig:
        """The engine's numbers; making the config checks them (one line for any out of range)."""
        return EngineConfig(kv_capacity=self.kv_slots, max_num_seqs=self.max_num_seqs,
                            max_batched_tokens=self.max_batched_tokens, chunked_prefill=self.chunked_prefill,
                            pipeline=self.pipeline)


def demo_model(seed: int = MODEL_SEED) -> torch.nn.Module:
    """A random, untrained ``tiny`` Qwen3.5 (3 Gated DeltaNet layers, then 1 attention layer, vocabulary 256).

    ``initializer_range=0.1`` (rather than 0.02) makes the greedy tokens vary from step to step.
    """
    import torch

    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config

    return build_model(qwen3_5_config("tiny", initializer_range=0.1), torch.float32, "cpu", seed=seed)


FLAGS = {"kv_capacity": "--kv-slots", "max_num_seqs": "--max-num-seqs",
         "max_batched_tokens": "--max-batched-tokens"}
"""The flag behind each engine number, for error messages (``in_flag_terms``)."""


def make_engine(model: torch.nn.Module, options: DemoOptions, trace: Trace) -> BatchEngine:
    """A ``BatchEngine`` over the model; one state slot per admissible request."""
    from mini_deepinfer.runtime.factory import build_engine

    with in_flag_terms(FLAGS):
        return build_engine(model, options.engine_config(), trace=trace)


def make_toy_engine(options: DemoOptions, trace: Trace) -> BatchEngine:
    """The same ``BatchEngine`` over lesson 1's toy runner: no model, no torch."""
    with in_flag_terms(FLAGS):
        config = replace(options.engine_config(), state_capacity=options.max_num_seqs)
        return BatchEngine(ToyRunner(), config, trace)


def check_memory(options: DemoOptions) -> None:
    """Refuse, in one line and before anything is allocated, a cache larger than this machine's memory."""
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.tools.memory import FLOAT32_BYTES, cache_bytes, check_cache_fits, device_memory

    config = qwen3_5_config("tiny")
    needed = cache_bytes(config, options.kv_slots, options.max_num_seqs, FLOAT32_BYTES)
    check_cache_fits(needed, device_memory("cpu"),
                     f"--kv-slots {options.kv_slots} and --max-num-seqs {options.max_num_seqs}")


# --8<-- [start:drive]
def drive(engine: BatchEngine, requests: list[tuple[DemoRequest, Request]],
          after_step: Callable[[], None] = lambda: None) -> None:
    """Add each request once its arrival round has passed; step until everything is done."""
    pending = sorted(requests, key=lambda pair: pair[0].arrives_after_round)
    while pending or engine.has_unfinished():
        while pending and pending[0][0].arrives_after_round <= engine.round_id:
            engine.add(pending.pop(0)[1])
        engine.step()
        after_step()
# --8<-- [end:drive]


class RoundPrinter:
    """Turns trace events into the demo's lines; adds admit, waiting, budget and cache lines.

    The extra lines read the engine's queues and pools at the moment an event arrives; they decide nothing.
    """

    def __init__(self, options: DemoOptions, print_line: Callable[[str], None]) -> None:
        self.options = options
        self.print_line = print_line
        self.engine: BatchEngine | None = None
        self.round_tokens = 0
        self.kv_taken = self.kv_given_back = self.state_taken = self.state_given_back = 0
        self.cache_round = 0  # the round whose changes the counters above hold

    def on_event(self, event: TraceEvent) -> None:
        self._start_round(event.round_id)
        if event.kind == "schedule":
            self._on_schedule(event)
        elif event.kind == "free":
            self.kv_given_back += len(event.data["slots"])
            self.state_given_back += int(event.data.get("state_slot") is not None)
        if event.kind == "launch":
            self._on_launch(event)
        elif self.options.pipeline or event.kind not in QUIET_KINDS:
            self.print_line(format_event(event))

    def _start_round(self, round_id: int) -> None:
        if round_id != self.cache_round:
            self.round_tokens = self.kv_taken = self.kv_given_back = 0
            self.state_taken = self.state_given_back = 0
            self.cache_round = round_id

    def _on_schedule(self, event: TraceEvent) -> None:
        req = self.engine.requests[event.request_id]
        if event.data["start_pos"] == 0:  # the first chunk: the request was admitted just now
            self.state_taken += 1
            self.print_line(
                f"[round {event.round_id}] admit    {req.request_id} state slot {req.state_slot}, reserves "
                f"{req.max_cache_tokens()} KV slots (prompt {req.prompt_len} + "
                f"max_new_tokens {req.params.max_new_tokens})")
        self.kv_taken += len(event.data["slots"])
        self.round_tokens += len(event.data["inputs"])

    def _on_launch(self, event: TraceEvent) -> None:
        """All of this round is scheduled: say who was left waiting, and how much of the budget ran."""
        budget = self.options.max_batched_tokens
        for line in waiting_lines(self.engine, budget - self.round_tokens):
            self.print_line(line)
        self.print_line(f"[round {event.round_id}] budget   {self.round_tokens}/{budget} tokens")
        if self.options.pipeline:
            self.print_line(format_event(event))

    def round_done(self) -> None:
        """Called after each ``step()``: what the round took from and gave back to the cache."""
        engine = self.engine
        self._start_round(engine.round_id)
        kv, state = engine.kv_pool, engine.state_pool
        self.print_line(
            f"[round {engine.round_id}] cache    KV +{self.kv_taken} -{self.kv_given_back} -> "
            f"free {kv.num_free}/{kv.capacity}, {kv.num_free - engine.reserved_kv()} unreserved; "
            f"state +{self.state_taken} -{self.state_given_back} -> free {state.num_free}/{state.capacity}")


def waiting_lines(engine: BatchEngine, budget_left: int) -> list[str]:
    """Why each queued request did not start this round, read from the engine right after scheduling.

    The checks follow ``BatchEngine._chunk_size``: running requests against ``max_num_seqs``, then the
    cache (``can_admit``), then the budget; the first request that stops there keeps the later ones out.
    """
    lines = []
    blocked_by = None
    for req in engine.waiting:
        if blocked_by is not None:
            why = f"behind {blocked_by} (first come, first served)"
        elif len(engine.running) >= engine.max_num_seqs:
            why = f"max_num_seqs {engine.max_num_seqs} reached ({len(engine.running)} running)"
        elif not engine.can_admit(req):
            why = cache_shortage(engine, req)
        elif engine.chunked_prefill:
            why = "no token budget left in this round"
        else:
            why = f"prompt of {req.prompt_len} tokens, {budget_left} left in the budget (no chunking)"
        lines.append(f"[round {engine.round_id}] waiting  {req.request_id} {why}")
        blocked_by = req.request_id
    return lines


def cache_shortage(engine: BatchEngine, req: Request) -> str:
    """What ``can_admit`` found missing: KV slots beyond the running requests' reservations, a state slot."""
    unreserved = engine.kv_pool.num_free - engine.reserved_kv()
    missing = []
    if unreserved < req.max_cache_tokens():
        missing.append(f"needs {req.max_cache_tokens()} KV slots, {unreserved} unreserved")
    if engine.state_pool is not None and engine.state_pool.num_free == 0:
        missing.append("no state slot free")
    return "; ".join(missing)


def run_demo(options: DemoOptions, print_line: Callable[[str], None] = print,
             model: torch.nn.Module | None = None) -> BatchEngine:
    """Run A, B and C through a ``BatchEngine``, printing every round; returns the engine for inspection."""
    printer = RoundPrinter(options, print_line)
    trace = Trace(listener=printer.on_event)
    if options.toy:
        engine = make_toy_engine(options, trace)
    else:
        engine = make_engine(model if model is not None else demo_model(), options, trace)
    printer.engine = engine
    requests = check_requests(engine)  # before anything is printed
    for line in header_lines(options):
        print_line(line)
    drive(engine, requests, after_step=printer.round_done)
    for line in summary_lines(engine):
        print_line(line)
    return engine


def check_requests(engine: BatchEngine) -> list[tuple[DemoRequest, Request]]:
    """Each demo request made (and checked against the cache and the budget) by ``engine``, not yet added."""
    return [(d, engine.new_request(d.request_id, list(d.prompt), SamplingParams(d.max_new_tokens)))
            for d in DEMO_REQUESTS]


def summary_lines(engine: BatchEngine) -> list[str]:
    """Each request's output and finish reason, then the free slot counts."""
    lines = []
    for rid in sorted(engine.requests):
        req = engine.requests[rid]
        lines.append(f"{rid}: {req.output_token_ids} ({req.finish_reason.value})")
    kv, state = engine.kv_pool, engine.state_pool
    lines.append(f"Free slots: KV {kv.num_free}/{kv.capacity}, state {state.num_free}/{state.capacity}")
    return lines


def header_lines(options: DemoOptions) -> list[str]:
    chunking = "chunked prefill" if options.chunked_prefill else "whole prompts only"
    mode = "cross-round (--pipeline)" if options.pipeline else "synchronous"
    model = (f"Random tiny Qwen3.5 (untrained, seed {MODEL_SEED}): 3 Gated DeltaNet layers + 1 gated "
             "attention layer, vocab 256, greedy.")
    if options.toy:
        model = "Toy runner (--toy): next token = last input + 1, no model and no torch."
    return [
        model,
        f"BatchEngine: budget {options.max_batched_tokens} tokens per round, {chunking}, max_num_seqs "
        f"{options.max_num_seqs}, {options.kv_slots} KV slots, {options.max_num_seqs} state slots, {mode}.",
    ]


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m mini_deepinfer.pipeline_demo",
                      description="Requests A, B and C through BatchEngine on a random tiny Qwen3.5: "
                                  "a long prompt chunked across rounds, a short one finishing first, and a "
                                  "late one waiting for the slots the short one releases.")
    defaults = DemoOptions()
    p.add_argument("--max-batched-tokens", type=int, default=defaults.max_batched_tokens,
                   help=f"token budget of one round (default {defaults.max_batched_tokens})")
    p.add_argument("--kv-slots", type=int, default=defaults.kv_slots,
                   help=f"KV slots in the cache, all requests together (default {defaults.kv_slots})")
    p.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs,
                   help=f"requests running at once, also the number of state slots "
                        f"(default {defaults.max_num_seqs})")
    p.add_argument("--no-chunked-prefill", action="store_true",
                   help="run each prompt whole in one round (a prompt over the budget is refused)")
    p.add_argument("--pipeline", action="store_true",
                   help="cross-round execution: launch round N+1 before reading round N")
    p.add_argument("--toy", action="store_true",
                   help="lesson 1's toy runner (next token = last input + 1) instead of the model: no torch, "
                        "the same rounds, other token ids")
    return p


def parse_options(argv: list[str]) -> DemoOptions:
    a = build_parser().parse_args(argv)
    return DemoOptions(a.max_batched_tokens, a.kv_slots, a.max_num_seqs, not a.no_chunked_prefill, a.pipeline,
                       a.toy)


def run(argv: list[str]) -> int:
    options = parse_options(argv)
    with in_flag_terms(FLAGS):
        options.engine_config()  # every number checked before torch loads
    if not options.toy:
        import torch

        check_memory(options)
        torch.set_num_threads(1)  # fastest for so small a model, and the same on any number of cores
    run_demo(options)  # bad numbers, or a request the cache or budget can never serve: refused before round 1
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(run, argv)


if __name__ == "__main__":
    sys.exit(main())
