"""``python -m mini_deepinfer``: two requests through the engine with the toy runner.

Scope: the first demo of the course. It needs nothing but Python 3.10+: the toy runner stands in
for a model ("next token = last input + 1"), and every round's inputs, outputs and slot allocation
are printed from the engine's trace events.
Non-scope: real models (``python -m mini_deepinfer.generate``).
"""

from __future__ import annotations

import argparse
import sys

from .core.engine import Engine, EngineConfig
from .core.request import FinishReason, SamplingParams
from .core.toy import ToyRunner
from .core.trace import Trace, TraceEvent, format_event
from .tools.cli import FlagNeeds, OneLineParser, UsageError, in_flag_terms, run_command

QUIET_KINDS = {"launch", "read"}  # shown only with --pipeline, where their order is the point
FLAG_NEEDS = (FlagNeeds("--cancel-after-round", "--cancel"),)
"""Options that change nothing without another: given alone, each is refused (``OneLineParser``)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(
        prog="python -m mini_deepinfer",
        description="Run two toy requests (next token = last input + 1) through Engine.step().",
        needs=FLAG_NEEDS)
    parser.add_argument("--slots", type=int, default=8, help="KV slots in the cache (default 8)")
    parser.add_argument("--cancel", metavar="REQUEST_ID", help="cancel this request (req-0 or req-1)")
    parser.add_argument("--cancel-after-round", type=int, metavar="N",
                        help="round (1, 2, ...) after which --cancel takes effect (default 1)")
    parser.add_argument("--pipeline", action="store_true",
                        help="cross-round execution: launch round N+1 before reading round N")
    return parser.parse_args(argv)


# --8<-- [start:demo]
def run_demo(args: argparse.Namespace, print_line=print) -> Engine:
    def show(event: TraceEvent) -> None:
        if args.pipeline or event.kind not in QUIET_KINDS:
            print_line(format_event(event))

    config = EngineConfig(kv_capacity=args.slots, pipeline=args.pipeline)
    engine = Engine(ToyRunner(), config, trace=Trace(listener=show))
    engine.submit("req-0", [10, 11], SamplingParams(max_new_tokens=3))
    engine.submit("req-1", [20], SamplingParams(max_new_tokens=4, eos_token_ids=(22,)))
    while engine.has_unfinished():
        engine.step()
        if args.cancel and engine.round_id == args.cancel_after_round:
            engine.cancel(args.cancel)
    for req in engine.requests.values():
        print_line(f"{req.request_id}: {req.output_token_ids} ({req.finish_reason.value})")
    print_line(f"Free slots: {engine.kv_pool.num_free}/{engine.kv_pool.capacity}")
    return engine
# --8<-- [end:demo]


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    check_cancel_flags(args)
    with in_flag_terms({"kv_capacity": "--slots"}):
        EngineConfig(kv_capacity=args.slots)  # checks --slots before anything is printed
    print(f"Toy model: next token = last input + 1. KV slots: {args.slots}.")
    engine = run_demo(args)  # a request that never fits the cache: one line, exit code 2 (run_command)
    if args.cancel and engine.requests[args.cancel].finish_reason is not FinishReason.CANCELLED:
        print(f"Not cancelled: {args.cancel} finished before round {args.cancel_after_round} ended.")
    return 0


def check_cancel_flags(args: argparse.Namespace) -> None:
    """``--cancel`` names one of the two requests; ``--cancel-after-round`` (given only with it:
    ``FLAG_NEEDS``) counts from round 1 on."""
    if args.cancel not in (None, "req-0", "req-1"):
        raise UsageError(f"--cancel must be req-0 or req-1, got {args.cancel!r}")
    if args.cancel_after_round is not None and args.cancel_after_round < 1:
        raise UsageError(f"--cancel-after-round must be >= 1 (rounds are numbered from 1), "
                         f"got {args.cancel_after_round}")
    if args.cancel_after_round is None:
        args.cancel_after_round = 1


def main(argv: list[str] | None = None) -> int:
    return run_command(run, argv)


if __name__ == "__main__":
    sys.exit(main())
