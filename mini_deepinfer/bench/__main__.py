"""``python -m mini_deepinfer.bench``: our engine against Hugging Face transformers, side by side.

Scope: on one random checkpoint (the real Qwen3.5-0.8B text shape, or the ``tiny`` preset for a quick
run) it measures, in one run: prefill time for long prompts, decode tokens per second at batch 1 and
batch 8 (greedy, fixed length), the same with transformers' ``generate`` on the same checkpoint and
prompts (and checks that the greedy tokens agree), the machine's memory read bandwidth and the decode
roofline it implies (bytes of weights read per step / bandwidth), and each side's peak resident memory.
Results go to a JSON file (keys below) and a short table on stdout. ``--device`` and ``--dtype`` run the
same comparison on an accelerator or in half precision; the targets (``TARGETS``) are set for the CPU in
float32 and are reported as not applying elsewhere.
Non-scope: timing assertions (the tests only check that the benchmark runs and agrees on tokens), more than
one device, sampling.

Method, the same on both sides:

* Each side runs in its own subprocess (same checkpoint file, same prompts, same torch thread count), so
  its peak memory (``VmHWM``, the high-water mark of the process's own address space) is its own.
* ``--repeats`` rounds: in each, both sides run in fresh processes, in alternating order, and every
  measurement runs once untimed (warm-up) and once timed. On a shared machine the load drifts; rounds spread
  that drift over both sides. The JSON keeps every run and its median, min and max.
* Prefill = wall time of a run that generates one token (the prompt's forward plus one head row and one
  argmax). Decode step = (time for N tokens - time for 1 token) / (N - 1), so prefill cancels out.
* Batch 1 uses one prompt of ``--prompt-len`` tokens. Larger batches use prompts of different lengths
  (from ``--prompt-len`` down to about half of it); transformers gets them left-padded with an attention
  mask, as its batched ``generate`` needs, and our engine runs them unpadded.
* Greedy tokens are compared position by position for every prefill and decode measurement.
* Read bandwidth: summing a 2 GiB float32 tensor on the device (on CPU with the same thread count), before
  every round and at the end; the roofline uses the best run (the strictest roofline).
* On an accelerator every timing waits for the queued work to finish, and peak memory is also read from the
  device's allocator (``peak_device_bytes``); the memory target then uses it.
* Linear floor: every linear layer of the side's model run once on random rows of the decode batch, nothing
  else; what the matrix products alone cost per step on this machine. The prefill floor does the same on
  as many rows as the prompt has tokens (the head on one row): the share of a prefill no kernel outside
  the matrix products can win back.
* The load average is recorded too: on a shared machine absolute times drift, so read the ratios.
* ``--variants`` adds sides to the same rounds (``VARIANTS``): our engine and transformers in bfloat16, our
  decode on the graph path's static buffers, and that step compiled. Each is measured like the two main
  sides, in its own process; ``variant_comparison`` sets it against transformers in the same dtype and
  against our main side, and ``capture_s`` says what making its decode buckets (compiling them) cost.

JSON keys (``REPORT_KEYS``): ``schema``, ``benchmark``, ``command``, ``date``, ``source_sha``, ``device``,
``dtype``, ``torch``, ``transformers``, ``config``, ``load_average``, ``bandwidth``, ``ours``,
``transformers_side``, ``comparison``, ``targets``, ``variants``. Each side has ``SIDE_KEYS``; ``comparison``
has ``COMPARISON_KEYS``; ``targets`` maps each of ``TARGETS`` to ``{"value", "threshold", "met"}`` (value and
met are None when the run did not measure it).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from mini_deepinfer.tools.cli import (
    FlagNeeds,
    OneLineParser,
    UsageError,
    add_execution_options,
    execution_choice,
    positive_ints,
    run_command,
)

SCHEMA_VERSION = 3
PROMPT_SEED = 1234
PAD_ID = 0
BANDWIDTH_MIB = 2048  # far larger than any CPU cache
REPORT_KEYS = ("schema", "benchmark", "command", "date", "source_sha", "device", "dtype", "torch",
               "transformers", "config", "load_average", "bandwidth", "ours", "transformers_side",
               "comparison", "targets", "variants")
SIDE_KEYS = ("load_s", "capture_s", "threads", "prefill", "decode", "tokens", "linear_floor",
             "prefill_linear_floor",
             "rss_before_load_bytes", "peak_device_bytes",
             "peak_rss_after_load_bytes", "peak_rss_bytes", "weight_bytes", "cache_bytes", "load_average",
             "tokens_stable")
COMPARISON_KEYS = ("prefill_speedup", "decode_speedup", "tokens_agree", "all_tokens_agree", "tokens_stable",
                   "roofline_step_s",
                   "roofline_fraction", "transformers_roofline_fraction", "memory_budget_bytes",
                   "peak_memory_kind", "peak_memory_ratio")
TARGETS: dict[str, tuple[str, float]] = {
    # name -> (what is compared, threshold); ">=" for every target but the memory ratio ("<=")
    "decode_batch1_vs_transformers": ("decode tok/s at batch 1, ours / transformers", 1.3),
    "decode_batch1_roofline": ("decode step at batch 1, roofline / ours", 0.6),
    "decode_batch4_vs_transformers": ("decode tok/s at batch 4, ours / transformers", 2.0),
    "decode_batch8_vs_transformers": ("decode tok/s at batch 8, ours / transformers", 2.0),
    "prefill_2048_vs_transformers": ("prefill of 2048 tokens, transformers time / ours", 1.2),
    # peak memory: the resident set on CPU, the device allocator's peak on an accelerator
    "peak_memory": ("our peak memory / (weights + largest configured cache)", 1.3),
}
# --8<-- [start:variants]
VARIANTS: dict[str, dict[str, str]] = {
    # name -> which engine, and how it differs from the main sides (``--dtype``, eager execution)
    "ours-bfloat16": {"engine": "ours", "dtype": "bfloat16"},
    "transformers-bfloat16": {"engine": "transformers", "dtype": "bfloat16"},
    "ours-graphs": {"engine": "ours", "execution": "graphs"},
    "ours-compiled": {"engine": "ours", "execution": "compiled"},
}
"""Extra sides ``--variants`` measures in the same rounds as the main two."""
# --8<-- [end:variants]


FLAG_NEEDS = (FlagNeeds("--variant-batches", "--variants"),)
"""Options that change nothing without another: given alone, each is refused (``OneLineParser``)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python -m mini_deepinfer.bench", description=__doc__.split("\n\n")[0],
                      needs=FLAG_NEEDS)
    p.add_argument("--preset", default="qwen3.5-0.8b", choices=["tiny", "qwen3.5-0.8b", "qwen3.5-2b"],
                   help="random checkpoint shape")
    p.add_argument("--repeats", type=int, default=3, help="rounds, each running both sides once")
    p.add_argument("--prefill", type=positive_ints, default=[512, 2048], help="prompt lengths for prefill")
    p.add_argument("--batches", type=positive_ints, default=[1, 4, 8], help="batch sizes for decode")
    p.add_argument("--prompt-len", type=int, default=32, help="longest prompt of the decode measurement")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generated per request in decode runs")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--device", default="cpu", help="cpu, cuda[:N] or npu[:N] (default cpu)")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default float32)")
    p.add_argument("--bandwidth-mib", type=int, default=BANDWIDTH_MIB, help="size of the bandwidth buffer")
    p.add_argument("--output", type=Path, help="write the results as JSON here")
    p.add_argument("--variants", type=variant_names, default=[],
                   help="extra sides measured in the same rounds, comma-separated: " + ", ".join(VARIANTS))
    p.add_argument("--variant-batches", type=positive_ints,
                   help="decode batches of the graph-path variants, ours-graphs and ours-compiled (default: "
                        "--batches; compiling makes every bucket of each batch's cache before it runs, so "
                        "fewer batches cost less)")
    add_execution_options(p)
    p.add_argument("--side", choices=["ours", "transformers"], help=argparse.SUPPRESS)
    p.add_argument("--no-prefill", action="store_true", help=argparse.SUPPRESS)  # a decode-only side
    p.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    too_small = min(args.repeats, args.bandwidth_mib) < 1 or min(args.new_tokens, args.prompt_len) < 2
    if too_small or args.threads < 0:
        raise UsageError("--repeats and --bandwidth-mib must be >= 1, --new-tokens and --prompt-len >= 2, "
                         "--threads >= 0")
    from mini_deepinfer.bench.common import check_threads

    check_threads(args.threads)
    from mini_deepinfer.runtime.device import resolve_device, resolve_dtype

    # checked here, in the parent, so that a bad value is one line before any work starts
    args.torch_device, args.torch_dtype = resolve_device(args.device), resolve_dtype(args.dtype)
    from mini_deepinfer.runtime.factory import use_graphs

    args.use_graphs = use_graphs(args.torch_device, execution_choice(args))
    args.compile_step = args.compile  # --compile implies --graphs (execution_choice)
    if args.variants and args.side is None:
        for name in args.variants:
            resolve_dtype(VARIANTS[name].get("dtype", args.dtype))
    args.variant_batches = args.variant_batches or args.batches
    if args.no_prefill:
        args.prefill = []
    if args.side is None:  # a side is a child process of a run that checked them
        check_sizes(args)
    return args


def decode_tokens(batch: int, longest: int, new_tokens: int) -> int:
    """KV slots of a decode measurement: its prompts (:func:`prompt_lengths`) and their new tokens. Past a
    million requests the prompts are not listed: each has more than ``longest // 2`` tokens, a lower bound
    that is enough to refuse what cannot fit."""
    prompts = sum(prompt_lengths(batch, longest)) if batch <= 2**20 else batch * (longest // 2 + 1)
    return prompts + batch * new_tokens


def check_sizes(args: argparse.Namespace) -> None:
    """Refuse, in one line and before any checkpoint is written or buffer allocated, a prompt past the
    preset's ``max_position_embeddings`` or a buffer or cache larger than the device's memory."""
    from mini_deepinfer.bench.common import check_cache_memory, check_preset_positions
    from mini_deepinfer.tools.memory import device_memory, format_bytes

    if args.prefill:
        check_preset_positions(args.preset, max(args.prefill), f"--prefill {max(args.prefill)}")
    check_preset_positions(args.preset, args.prompt_len + args.new_tokens,
                           f"--prompt-len {args.prompt_len} with --new-tokens {args.new_tokens}")
    memory = device_memory(args.torch_device)
    if memory is not None and args.bandwidth_mib * 2**20 > memory[0]:
        raise UsageError(f"--bandwidth-mib {args.bandwidth_mib} asks for a buffer of "
                         f"{format_bytes(args.bandwidth_mib * 2**20)}; there are {format_bytes(memory[0])} "
                         f"{memory[1]}")
    for batch in sorted(set(args.batches) | set(args.variant_batches)):
        kv = decode_tokens(batch, args.prompt_len, args.new_tokens)
        check_cache_memory(args.preset, kv, batch, 1, args.torch_dtype, args.torch_device,
                           f"--batches {batch} with --prompt-len {args.prompt_len} and --new-tokens "
                           f"{args.new_tokens}")
    for length in args.prefill:
        check_cache_memory(args.preset, length + 1, 1, 1, args.torch_dtype, args.torch_device,
                           f"--prefill {length}")


def variant_names(text: str) -> list[str]:
    """``--variants``: names of ``VARIANTS``, comma-separated, each once."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"use each of {', '.join(VARIANTS)} at most once, got {text!r}")
    return names


# --8<-- [start:prompts]
def prompt_lengths(batch: int, longest: int) -> list[int]:
    """Decode prompt lengths: ``longest`` for one request, else spread from ``longest`` down to ~half."""
    return [longest - (i * longest) // (2 * batch) for i in range(batch)]


def make_prompts(lengths: list[int], vocab: int) -> list[list[int]]:
    """Seeded random token ids (away from the special tokens at the end of the vocabulary)."""
    import torch

    gen = torch.Generator().manual_seed(PROMPT_SEED + sum(lengths))
    high = min(vocab, 200_000)
    return [torch.randint(min(1000, high - 1), high, (n,), generator=gen).tolist() for n in lengths]
# --8<-- [end:prompts]


def summary(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def peak_rss_bytes() -> int:
    """High-water resident set of this process's address space (``VmHWM``).

    ``getrusage``'s ``ru_maxrss`` is not used: Linux carries it over from the parent through fork and exec,
    so a child would report the parent's peak (here, the 2 GiB bandwidth buffer).
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_device_bytes(device) -> int | None:
    """The most memory the accelerator's allocator has handed out in this process; None on CPU."""
    from mini_deepinfer.runtime.device import device_module

    module = device_module(device)
    return None if module is None else int(module.max_memory_allocated(device))


def current_rss_bytes() -> int:
    """Resident set now (``VmRSS``): the interpreter and imported libraries before the model is loaded."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def read_bandwidth_runs(repeats: int, mib: int, device=None) -> list[float]:
    """GB/s of summing a 2 GiB float32 tensor on ``device`` (memory-bound); one warm-up first."""
    import torch

    from mini_deepinfer.runtime.device import device_module, synchronize

    device = device or torch.device("cpu")
    nbytes = mib * 2**20
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    rates = []
    for i in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        x.sum()
        synchronize(device)
        if i:
            rates.append(nbytes / (time.perf_counter() - start) / 1e9)
    del x
    if device_module(device) is not None:
        device_module(device).empty_cache()  # give the buffer back before the sides start
    return rates


RUNNERS: dict[tuple, Any] = {}
"""Runners kept between runs of one shape, with their caches and captured graphs (as a server keeps them)."""


# --8<-- [start:ours]
def time_engine(model, prompt_ids: list[list[int]], new_tokens: int,
                graphs: bool = False, compile_step: bool = False) -> tuple[float, list[list[int]]]:
    """Wall time of one engine run (all prompts together, greedy, fixed length) and its tokens."""
    from mini_deepinfer.core.engine import EngineConfig
    from mini_deepinfer.core.request import SamplingParams
    from mini_deepinfer.runtime.device import synchronize
    from mini_deepinfer.runtime.factory import build_engine

    capacity = sum(len(p) + new_tokens for p in prompt_ids)
    config = EngineConfig(kv_capacity=capacity, max_num_seqs=len(prompt_ids),
                          max_batched_tokens=max(sum(map(len, prompt_ids)), len(prompt_ids)))
    key = (capacity, len(prompt_ids), graphs, compile_step)  # the warm-up run captures; timed runs replay
    engine = build_engine(model, config, use_graphs=graphs, compile_step=compile_step,
                          runner=RUNNERS.get(key))
    RUNNERS[key] = engine.runner
    for i, ids in enumerate(prompt_ids):
        engine.submit(f"r{i}", ids, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
    synchronize(engine.runner.device)
    start = time.perf_counter()
    engine.run()  # every round reads its sampled tokens back, so the run ends when the device is done
    elapsed = time.perf_counter() - start
    return elapsed, [r.output_token_ids for r in engine.requests.values()]
# --8<-- [end:ours]


# --8<-- [start:transformers]
def time_transformers(model, prompt_ids: list[list[int]], new_tokens: int) -> tuple[float, list[list[int]]]:
    """The same with transformers' ``generate``: prompts left-padded to the longest, with a mask."""
    import torch

    from mini_deepinfer.runtime.device import synchronize

    longest = max(map(len, prompt_ids))
    ids = torch.tensor([[PAD_ID] * (longest - len(p)) + p for p in prompt_ids], device=model.device)
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompt_ids], device=model.device)
    synchronize(model.device)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=PAD_ID)
    synchronize(model.device)
    elapsed = time.perf_counter() - start
    return elapsed, out[:, longest:].tolist()
# --8<-- [end:transformers]


def load_side(side: str, checkpoint: Path, device=None, dtype=None,
              graphs: bool = False, compile_step: bool = False) -> tuple[Any, Callable]:
    """One side's model on ``device`` in ``dtype`` (default: cpu, float32) and its timed run."""
    import torch

    device, dtype = device or torch.device("cpu"), dtype or torch.float32
    if side == "ours":
        from mini_deepinfer.models.loader import load_checkpoint

        timed = functools.partial(time_engine, graphs=graphs, compile_step=compile_step)
        return load_checkpoint(checkpoint, dtype, device).model, timed
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype).to(device).eval()
    # No end-of-sequence: every run generates exactly max_new_tokens, as ``ignore_eos`` does on our side
    # (``min_new_tokens`` would instead mask the eos logit and could change the greedy choice).
    model.generation_config.eos_token_id = None
    return model, time_transformers


def timed_runs(timed: Callable, model, prompt_ids: list[list[int]], new_tokens: int,
               repeats: int) -> tuple[list[float], list[list[int]]]:
    """One warm-up run, then ``repeats`` timed runs; the tokens of the last."""
    timed(model, prompt_ids, new_tokens)
    runs = [timed(model, prompt_ids, new_tokens) for _ in range(repeats)]
    return [t for t, _ in runs], runs[-1][1]


def decode_runs(timed: Callable, model, prompt_ids: list[list[int]], new_tokens: int,
                repeats: int) -> tuple[list[float], list[float], list[list[int]]]:
    """Warm-up, then ``repeats`` pairs of runs (1 token, then ``new_tokens``) back to back, so each step
    estimate subtracts a prefill measured under the same machine load; the tokens of the last run."""
    timed(model, prompt_ids, new_tokens)
    firsts, fulls, tokens = [], [], []
    for _ in range(repeats):
        firsts.append(timed(model, prompt_ids, 1)[0])
        full, tokens = timed(model, prompt_ids, new_tokens)
        fulls.append(full)
    return firsts, fulls, tokens


def measure_side(args: argparse.Namespace) -> dict[str, Any]:
    """Run inside a subprocess: every measurement for one side (keys: ``SIDE_KEYS``)."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    before, rss_before = load_average(), current_rss_bytes()
    start = time.perf_counter()
    model, timed = load_side(args.side, args.checkpoint, args.torch_device, args.torch_dtype, args.use_graphs,
                             args.compile_step)
    result: dict[str, Any] = {"load_s": time.perf_counter() - start, "threads": torch.get_num_threads(),
                              "prefill": {}, "decode": {}, "tokens": {"prefill": {}, "decode": {}},
                              "rss_before_load_bytes": rss_before,
                              "peak_rss_after_load_bytes": peak_rss_bytes()}
    vocab = model.config.vocab_size
    bar = tqdm(total=len(args.prefill) + len(args.batches), desc=f"measuring {args.side}", unit="measurement",
               disable=not sys.stderr.isatty(), leave=False)  # the parent passes a terminal on (run_side)
    for length in args.prefill:
        runs, tokens = timed_runs(timed, model, make_prompts([length], vocab), 1, args.repeats)
        result["prefill"][str(length)] = summary(runs)
        result["tokens"]["prefill"][str(length)] = tokens
        bar.update()
    for batch in args.batches:
        batch_prompts = make_prompts(prompt_lengths(batch, args.prompt_len), vocab)
        firsts, fulls, tokens = decode_runs(timed, model, batch_prompts, args.new_tokens, args.repeats)
        steps = [(full - first) / (args.new_tokens - 1) for first, full in zip(firsts, fulls)]
        result["decode"][str(batch)] = {"step_s": summary(steps), "first_s": summary(firsts),
                                        "full_s": summary(fulls),
                                        "tokens_per_s": batch / statistics.median(steps)}
        result["tokens"]["decode"][str(batch)] = tokens
        bar.update()
    bar.close()
    # of the timed runs, before the floors' random inputs
    result["peak_rss_bytes"] = peak_rss_bytes()
    result["peak_device_bytes"] = peak_device_bytes(args.torch_device)
    result["linear_floor"] = {str(b): linear_floor(model, b, args.repeats) for b in args.batches}
    result["prefill_linear_floor"] = {str(n): prefill_linear_floor(model, n, args.repeats)
                                      for n in args.prefill}
    result["weight_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    result["cache_bytes"] = largest_cache_bytes(model, args) if args.side == "ours" else None
    # making every runner's decode buckets (compiling them with --compile), before any timed run
    result["capture_s"] = sum(r.capture_s for r in RUNNERS.values()) if args.side == "ours" else None
    result["load_average"] = {"before": before, "after": load_average()}
    return result


# --8<-- [start:linear_floor]
def sweep_s(modules: list, rows: list) -> float:
    """Seconds to run each module once on its input rows (until the device has finished)."""
    import torch

    from mini_deepinfer.runtime.device import synchronize

    device = rows[0].device
    synchronize(device)
    start = time.perf_counter()
    with torch.no_grad():
        for module, x in zip(modules, rows):
            module(x)
    synchronize(device)
    return time.perf_counter() - start


def random_rows(model, shapes: list[tuple[int, int]]) -> list:
    """One random input per distinct shape, on the model's device and in its dtype, shared by the layers
    that take it (one per layer would add every layer's input to the peak memory this benchmark reports)."""
    import torch

    weight = model.lm_head.weight
    by_shape = {shape: torch.randn(shape, device=weight.device, dtype=weight.dtype) for shape in set(shapes)}
    return [by_shape[shape] for shape in shapes]


def linear_floor(model, batch: int, repeats: int) -> dict[str, Any]:
    """Time every linear layer (the head included) once on ``batch`` random rows, nothing else.

    All weights are read once, as in one decode step, so this is the step time the side's matrix products
    alone allow on this machine: the floor below which no other change to a decode step can go.
    """
    import torch

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = random_rows(model, [(batch, m.in_features) for m in linears])
    sweep_s(linears, inputs)
    head = [model.lm_head], random_rows(model, [(batch, model.lm_head.in_features)])
    return {"all_s": summary([sweep_s(linears, inputs) for _ in range(repeats)]),
            "head_s": summary([sweep_s(*head) for _ in range(repeats)]),
            "all_bytes": sum(m.weight.numel() * m.weight.element_size() for m in linears),
            "head_bytes": model.lm_head.weight.numel() * model.lm_head.weight.element_size()}


def prefill_linear_floor(model, length: int, repeats: int) -> dict[str, Any]:
    """The same for a prefill of ``length`` tokens: every linear layer but the head on ``length`` random
    rows, the head on one (a prefill needs the last token's logits only). Its matrix products alone."""
    import torch

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = random_rows(model, [(1 if m is model.lm_head else length, m.in_features) for m in linears])
    sweep_s(linears, inputs)
    flops = sum(2 * x.shape[0] * m.in_features * m.out_features for m, x in zip(linears, inputs))
    return {"all_s": summary([sweep_s(linears, inputs) for _ in range(repeats)]), "flops": flops}
# --8<-- [end:linear_floor]


def largest_cache_bytes(model, args: argparse.Namespace) -> int:
    """Bytes of the largest cache any measurement configured (the memory target allows for it)."""
    from mini_deepinfer.runtime.factory import new_cache

    sizes = [(length + 1, 1) for length in args.prefill]
    sizes += [(sum(prompt_lengths(b, args.prompt_len)) + b * args.new_tokens, b) for b in args.batches]
    return max(new_cache(model, slots, seqs).nbytes() for slots, seqs in sizes)


def main_sides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The sides every round measures: ``ours`` and ``transformers`` as the flags say, then each variant."""
    execution = "compiled" if args.compile_step else "graphs" if args.use_graphs else "eager"
    sides = {side: {"engine": side, "dtype": args.dtype, "execution": execution, "batches": args.batches}
             for side in ("ours", "transformers")}
    for name in args.variants:
        variant = VARIANTS[name]
        execution = variant.get("execution", "eager")
        sides[name] = {"engine": variant["engine"], "dtype": variant.get("dtype", args.dtype),
                       "execution": execution,
                       "batches": args.batches if execution == "eager" else args.variant_batches,
                       # the graph path runs decode rounds only: its prefill is the eager one, not measured
                       "prefill": execution == "eager"}
    return sides


def run_side(spec: dict[str, Any], checkpoint: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Measure one side (``main_sides``) once (after its warm-up) in a fresh interpreter; its JSON."""
    execution = {"eager": ["--eager"], "graphs": ["--graphs"], "compiled": ["--compile"]}[spec["execution"]]
    argv = [sys.executable, "-m", "mini_deepinfer.bench", "--side", spec["engine"], "--checkpoint",
            str(checkpoint), "--repeats", "1", "--prefill", ",".join(map(str, args.prefill)),
            "--batches", ",".join(map(str, spec["batches"])), "--prompt-len", str(args.prompt_len),
            "--new-tokens", str(args.new_tokens), "--threads", str(args.threads), "--device", args.device,
            "--dtype", spec["dtype"], *execution, *([] if spec.get("prefill", True) else ["--no-prefill"])]
    # on a terminal the side's stderr (its progress bar, any error) goes straight to it
    stderr = None if sys.stderr.isatty() else subprocess.PIPE
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=stderr, text=True, check=False)
    if proc.returncode != 0:
        said = (proc.stderr or "(its stderr is above)")[-3000:]
        raise RuntimeError(f"{spec.get('name', spec['engine'])} side failed:\n{said}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --8<-- [start:rounds]
def run_rounds(checkpoint: Path, args: argparse.Namespace) -> tuple[dict, list[float]]:
    """``--repeats`` rounds; each measures the bandwidth and every side once, in fresh processes and in
    alternating order, so a change in the machine's load during the run falls on every side alike."""
    sides = main_sides(args)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    bandwidth: list[float] = []
    for i in range(args.repeats):
        bandwidth += read_bandwidth_runs(1, args.bandwidth_mib, args.torch_device)
        for name in list(sides) if i % 2 == 0 else list(sides)[::-1]:
            runs[name].append(run_side(dict(sides[name], name=name), checkpoint, args))
    bandwidth += read_bandwidth_runs(1, args.bandwidth_mib, args.torch_device)
    return {name: dict(merge_runs(results), spec=sides[name]) for name, results in runs.items()}, bandwidth
# --8<-- [end:rounds]


def merge_runs(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's result from its per-round processes: timings joined, peaks maximised, tokens checked."""
    def joined(get: Callable[[dict], dict[str, Any]]) -> dict[str, Any]:
        return summary([x for r in results for x in get(r)["runs"]])

    last = results[-1]
    out = dict(last, load_s=joined(lambda r: {"runs": [r["load_s"]]}),
               capture_s=None if last["capture_s"] is None else joined(lambda r: {"runs": [r["capture_s"]]}),
               load_average=[r["load_average"] for r in results],
               tokens_stable=all(r["tokens"] == last["tokens"] for r in results))
    for key in ("rss_before_load_bytes", "peak_rss_after_load_bytes", "peak_rss_bytes"):
        out[key] = max(r[key] for r in results)
    if last["peak_device_bytes"] is not None:
        out["peak_device_bytes"] = max(r["peak_device_bytes"] for r in results)
    out["prefill"] = {n: joined(lambda r, n=n: r["prefill"][n]) for n in last["prefill"]}
    out["decode"] = {}
    for batch in last["decode"]:
        parts = {k: joined(lambda r, k=k: r["decode"][batch][k]) for k in ("step_s", "first_s", "full_s")}
        out["decode"][batch] = dict(parts, tokens_per_s=int(batch) / parts["step_s"]["median"])
    out["linear_floor"] = {b: dict(floor, **{k: joined(lambda r, b=b, k=k: r["linear_floor"][b][k])
                                             for k in ("all_s", "head_s")})
                           for b, floor in last["linear_floor"].items()}
    out["prefill_linear_floor"] = {
        n: dict(floor, all_s=joined(lambda r, n=n: r["prefill_linear_floor"][n]["all_s"]))
        for n, floor in last["prefill_linear_floor"].items()}
    return out


# --8<-- [start:compare]
def compare(ours: dict[str, Any], theirs: dict[str, Any], bandwidth: dict[str, Any]) -> dict[str, Any]:
    """Ratios (>1 means we are faster), token agreement, roofline fractions and the memory ratio."""
    roofline_step_s = ours["weight_bytes"] / (bandwidth["best_gb_per_s"] * 1e9)
    out: dict[str, Any] = {"prefill_speedup": {}, "decode_speedup": {},
                           "tokens_agree": {"prefill": {}, "decode": {}}, "roofline_step_s": roofline_step_s,
                           "roofline_fraction": {}, "transformers_roofline_fraction": {}}
    for length, ours_p in ours["prefill"].items():
        out["prefill_speedup"][length] = theirs["prefill"][length]["median"] / ours_p["median"]
    for batch, ours_d in ours["decode"].items():
        out["decode_speedup"][batch] = ours_d["tokens_per_s"] / theirs["decode"][batch]["tokens_per_s"]
        out["roofline_fraction"][batch] = roofline_step_s / ours_d["step_s"]["median"]
        their_step = theirs["decode"][batch]["step_s"]["median"]
        out["transformers_roofline_fraction"][batch] = roofline_step_s / their_step
    for kind in ("prefill", "decode"):
        for key, tokens in ours["tokens"][kind].items():
            out["tokens_agree"][kind][key] = tokens == theirs["tokens"][kind][key]
    out["all_tokens_agree"] = all(v for kind in out["tokens_agree"].values() for v in kind.values())
    out["tokens_stable"] = ours["tokens_stable"] and theirs["tokens_stable"]  # the same in every round
    out["memory_budget_bytes"] = ours["weight_bytes"] + ours["cache_bytes"]
    # on an accelerator the weights and caches live in device memory, so its allocator's peak is compared
    on_device = ours["peak_device_bytes"] is not None
    out["peak_memory_kind"] = "device allocator" if on_device else "resident set (VmHWM)"
    peak = ours["peak_device_bytes"] if on_device else ours["peak_rss_bytes"]
    out["peak_memory_ratio"] = peak / out["memory_budget_bytes"]
    return out


def targets(comparison: dict[str, Any], applies: bool = True) -> dict[str, dict[str, Any]]:
    """Each target's measured value, threshold and whether it is met (None where not measured, or where the
    targets do not apply: they are set for the CPU in float32)."""
    values = {
        "decode_batch1_vs_transformers": comparison["decode_speedup"].get("1"),
        "decode_batch1_roofline": comparison["roofline_fraction"].get("1"),
        "decode_batch4_vs_transformers": comparison["decode_speedup"].get("4"),
        "decode_batch8_vs_transformers": comparison["decode_speedup"].get("8"),
        "prefill_2048_vs_transformers": comparison["prefill_speedup"].get("2048"),
        "peak_memory": comparison["peak_memory_ratio"],
    }
    out = {}
    for name, (what, threshold) in TARGETS.items():
        value = values[name]
        met = None if value is None else (value <= threshold if name == "peak_memory" else value >= threshold)
        out[name] = {"what": what, "value": value, "threshold": threshold, "met": met if applies else None,
                     "applies": applies}
    return out
# --8<-- [end:compare]


# --8<-- [start:variant_comparison]
def variant_comparison(side: dict[str, Any], report: dict[str, Any],
                       variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A variant against our main side and against transformers in the variant's dtype (the main
    transformers side, or the transformers variant of that dtype), where that side measured the same thing:
    tokens per second at each decode batch and prefill time, as ratios (>1: the variant is faster), and
    whether the greedy tokens are the same."""
    spec = side["spec"]
    same_dtype = [report["transformers_side"]] if spec["dtype"] == report["dtype"] else [
        v for v in variants.values() if v["spec"]["engine"] == "transformers" and v["spec"]["dtype"] ==
        spec["dtype"]]
    against = {"ours": report["ours"]}
    if spec["engine"] == "ours" and same_dtype:
        against["transformers"] = same_dtype[0]
    out: dict[str, Any] = {}
    for what, other in against.items():
        decode = {b: d["tokens_per_s"] / other["decode"][b]["tokens_per_s"]
                  for b, d in side["decode"].items() if b in other["decode"]}
        prefill = {n: other["prefill"][n]["median"] / p["median"]
                   for n, p in side["prefill"].items() if n in other["prefill"]}
        agree = {f"decode {b}": side["tokens"]["decode"][b] == other["tokens"]["decode"][b] for b in decode}
        agree.update({f"prefill {n}": side["tokens"]["prefill"][n] == other["tokens"]["prefill"][n]
                      for n in prefill})
        out[what] = {"decode_speedup": decode, "prefill_speedup": prefill, "tokens_agree": agree}
    return out
# --8<-- [end:variant_comparison]


def bandwidth_report(runs: list[float], mib: int) -> dict[str, Any]:
    return {"best_gb_per_s": max(runs), "median_gb_per_s": statistics.median(runs), "runs_gb_per_s": runs,
            "bytes": mib * 2**20,
            "method": "torch.sum over a float32 tensor on the device (on CPU with the same threads)"}


def format_table(report: dict[str, Any]) -> str:
    """The plain-text summary the command prints."""
    ours, theirs, cmp = report["ours"], report["transformers_side"], report["comparison"]
    lines = [f"{'measurement':<28}{'ours':>12}{'transformers':>14}{'ratio':>8}"]
    for length, p in ours["prefill"].items():
        lines.append(f"{'prefill ' + length + ' tokens (s)':<28}{p['median']:>12.3f}"
                     f"{theirs['prefill'][length]['median']:>14.3f}{cmp['prefill_speedup'][length]:>8.2f}")
    for batch, d in ours["decode"].items():
        lines.append(f"{'decode batch ' + batch + ' (tok/s)':<28}{d['tokens_per_s']:>12.2f}"
                     f"{theirs['decode'][batch]['tokens_per_s']:>14.2f}{cmp['decode_speedup'][batch]:>8.2f}")
    lines.append(f"read bandwidth {report['bandwidth']['best_gb_per_s']:.1f} GB/s (best); decode roofline "
                 f"{cmp['roofline_step_s'] * 1000:.1f} ms/step; batch-1 fraction "
                 f"{cmp['roofline_fraction'].get('1', float('nan')):.2f}")
    ratio = f" ({cmp['peak_memory_ratio']:.2f}x weights+cache)"
    if ours["peak_device_bytes"] is not None:  # the ratio is of device memory then
        lines.append(f"peak device memory {ours['peak_device_bytes'] / 2**30:.2f} GiB{ratio}; "
                     f"transformers {theirs['peak_device_bytes'] / 2**30:.2f} GiB")
        ratio = ""
    lines.append(f"peak resident memory {ours['peak_rss_bytes'] / 2**30:.2f} GiB{ratio}; "
                 f"transformers {theirs['peak_rss_bytes'] / 2**30:.2f} GiB; "
                 f"tokens agree: {cmp['all_tokens_agree']}")
    for name, t in report["targets"].items():
        verdict = "not measured" if t["met"] is None else ("met" if t["met"] else "NOT met")
        verdict = verdict if t["applies"] else "does not apply (set for cpu, float32)"
        value = "-" if t["value"] is None else f"{t['value']:.2f}"
        lines.append(f"target {name}: {value} (threshold {t['threshold']}) {verdict}")
    for name, variant in report["variants"].items():
        for what, cmp in variant["comparison"].items():
            ratios = [f"decode batch {b} {r:.2f}x" for b, r in cmp["decode_speedup"].items()]
            ratios += [f"prefill {n} {r:.2f}x" for n, r in cmp["prefill_speedup"].items()]
            lines.append(f"{name} against {what}: {', '.join(ratios)}; tokens agree: "
                         f"{all(cmp['tokens_agree'].values())}")
        if variant["capture_s"] is not None and variant["spec"]["execution"] == "compiled":
            lines.append(f"{name}: compiling its decode buckets took {variant['capture_s']['median']:.1f} s")
    return "\n".join(lines) + "\n"


def run_benchmark(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Write the random checkpoint, measure bandwidth and both sides, and assemble the report."""
    import torch
    import transformers

    from mini_deepinfer.runtime.device import device_info
    from mini_deepinfer.tools.checkpoints import write_random_checkpoint
    from mini_deepinfer.tools.records import package_source_sha, utc_now_iso

    if args.threads:
        torch.set_num_threads(args.threads)
    load = {"start": load_average()}
    report: dict[str, Any] = {
        "schema": SCHEMA_VERSION, "benchmark": "transformers",
        "command": ["python", "-m", "mini_deepinfer.bench", *argv], "date": utc_now_iso(),
        "source_sha": package_source_sha(),
        "device": device_info(args.torch_device), "dtype": args.dtype, "torch": torch.__version__,
        "transformers": transformers.__version__,
        "config": {"preset": args.preset, "weights": "random (seed 0)", "repeats": args.repeats,
                   "execution": {"graphs": args.use_graphs, "compiled": args.compile_step},
                   "warmup_runs": 1, "rounds": "one process per side and round, order alternating",
                   "prefill_lens": args.prefill, "batches": args.batches,
                   "decode_prompt_lens": {str(b): prompt_lengths(b, args.prompt_len) for b in args.batches},
                   "new_tokens": args.new_tokens, "greedy": True, "threads": torch.get_num_threads(),
                   "transformers_padding": "left", "transformers_attention": "default (sdpa)",
                   "variants": list(args.variants), "variant_batches": args.variant_batches},
    }
    with tempfile.TemporaryDirectory(prefix="mini-deepinfer-bench-") as tmp:
        checkpoint = Path(tmp) / args.preset
        write_random_checkpoint(checkpoint, args.preset, seed=0, dtype=torch.float32)
        load["before_sides"] = load_average()
        sides, bandwidth = run_rounds(checkpoint, args)
    load["end"] = load_average()
    report["load_average"] = load
    report["ours"], report["transformers_side"] = sides.pop("ours"), sides.pop("transformers")
    report["bandwidth"] = bandwidth_report(bandwidth, args.bandwidth_mib)
    report["comparison"] = compare(report["ours"], report["transformers_side"], report["bandwidth"])
    report["variants"] = {name: dict(side, comparison=variant_comparison(side, report, sides))
                          for name, side in sides.items()}
    applies = args.torch_device.type == "cpu" and args.dtype == "float32"
    report["targets"] = targets(report["comparison"], applies)
    return {key: report[key] for key in REPORT_KEYS}


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.output is not None:
        from mini_deepinfer.tools.records import check_output_path

        check_output_path(args.output)
    if args.side:
        print(json.dumps(measure_side(args)))
        return 0
    report = run_benchmark(args, argv)
    sys.stdout.write(format_table(report))
    if args.output:
        from mini_deepinfer.tools.records import write_record

        write_record(args.output, report)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(run, argv)


if __name__ == "__main__":
    sys.exit(main())
