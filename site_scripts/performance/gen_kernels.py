"""Operators per decode step, counted on the CPU, by layer part: the table on the performance page.

Scope: the Qwen3.5-0.8B shape with random weights built in memory (no download), bfloat16, batch 1, one
decode step after a short prefill, on the eager path and on the graph path (on a CPU the graph path runs the
static-buffer step that a graph would hold, uncaptured). A dispatch mode counts every ATen operator that runs
(each one is a kernel launch on an accelerator), except the ones that launch nothing: views (and
``_unsafe_view``, a reshape's view of a fresh result) and allocations (``empty``, ``empty_like``). Module
hooks say which part of the model each operator belongs to.

The CPU-only form of ``models/kernels/cpu.py`` that one row in bfloat16 takes (a matrix-vector product) is
turned off while counting, so each projection counts as the product an accelerator runs (``mm``).

What is counted on each path: the graph path counts what one replay holds (``DecodeGraphs._step``: the
in-flight gather, the forward, greedy argmax, the non-finite flag, the copy of the tokens); the eager path
counts the forward and the sampling that follows it. Staging the round's inputs on the host is not counted.

Non-scope: time (a kernel count is the same on every machine; its cost is not), other shapes and batches.
The Chinese table is the English one translated (``site_scripts/performance/zh_tables.py``), from the same
count.
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from site_scripts.build.common import markdown_table

PRESET = "qwen3.5-0.8b"
PROMPT = list(range(3, 19))
LAUNCH_NOTHING = {"_unsafe_view", "empty", "empty_like", "empty_strided"}
"""Operators that are not views by their schema but launch no kernel either."""
PARTS = ("Gated DeltaNet mixer", "full-attention mixer", "MLP", "norms", "residuals", "outside the layers")
"""The rows of the table: the two token mixers, the MLP, the two RMSNorms of each layer, the two residual
adds of each layer (what a decoder layer runs outside its children), and everything else."""
CHILD_PARTS = {"linear_attn": PARTS[0], "self_attn": PARTS[1], "mlp": PARTS[2],
               "input_layernorm": PARTS[3], "post_attention_layernorm": PARTS[3]}


class KernelCount(TorchDispatchMode):
    """Counts non-view ATen operators while ``active``, by the part on top of ``parts`` and by name."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = [PARTS[-1]]
        self.active = False
        self.by_part: Counter[str] = Counter()
        self.by_op: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.active and not func.is_view and func.overloadpacket.__name__ not in LAUNCH_NOTHING:
            self.by_part[self.parts[-1]] += 1
            self.by_op[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def part_of(name: str) -> str | None:
    """The part a module's operators belong to: ``model.layers.3.mlp`` -> ``MLP``; None outside layers."""
    pieces = name.split(".")
    if pieces[:2] != ["model", "layers"] or len(pieces) < 3:
        return None
    return PARTS[4] if len(pieces) == 3 else CHILD_PARTS.get(pieces[3])


@contextmanager
def labelled(model: nn.Module, counter: KernelCount) -> Iterator[None]:
    """Hooks on each layer and each layer's children push their part while they run."""
    handles = []
    for name, module in model.named_modules():
        part = part_of(name)
        if part is None or len(name.split(".")) > 4:
            continue
        handles.append(module.register_forward_pre_hook(lambda m, a, p=part: counter.parts.append(p)))
        handles.append(module.register_forward_hook(lambda m, a, o: None if counter.parts.pop() else None))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def counting_inside(owner: object, name: str, counter: KernelCount) -> Iterator[None]:
    """Count only while ``owner.name`` (a method or a module function) runs."""
    original, own = getattr(owner, name), name in vars(owner)

    def counted(*args, **kwargs):
        counter.active = True
        try:
            return original(*args, **kwargs)
        finally:
            counter.active = False

    setattr(owner, name, counted)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def build_engine_for(model: nn.Module, graphs: bool):
    """A one-request engine on the graph path or the eager path (keyword name as ``build_engine`` has it)."""
    from mini_deepinfer.core.engine import EngineConfig
    from mini_deepinfer.runtime.factory import build_engine

    flag = "use_graphs" if "use_graphs" in inspect.signature(build_engine).parameters else "graphs"
    config = EngineConfig(kv_capacity=64, max_num_seqs=1, max_batched_tokens=64)
    return build_engine(model, config, **{flag: graphs})


@contextmanager
def accelerator_forms() -> Iterator[None]:
    """While inside, ``Linear`` computes one bfloat16 row as an accelerator does (no ``torch.mv``)."""
    from mini_deepinfer.models.kernels import cpu

    kept, cpu.MV_DTYPES = cpu.MV_DTYPES, ()
    try:
        yield
    finally:
        cpu.MV_DTYPES = kept


def count_decode_step(model: nn.Module, graphs: bool) -> KernelCount:
    """Prefill one prompt, then count the kernels of one decode step."""
    from mini_deepinfer.core.request import SamplingParams
    from mini_deepinfer.runtime import model_runner

    engine = build_engine_for(model, graphs)
    engine.submit("r", PROMPT, SamplingParams(max_new_tokens=4, ignore_eos=True))
    engine.step()  # the prefill round
    counter = KernelCount()
    targets: list[tuple[object, str]]
    if graphs:
        targets = [(type(engine.runner.graphs), "_step")]
    else:
        targets = [(model, "forward"), (model_runner, "sample"), (model_runner, "flag_non_finite")]
    with ExitStack() as stack:
        stack.enter_context(accelerator_forms())
        for owner, name in targets:
            stack.enter_context(counting_inside(owner, name, counter))
        stack.enter_context(labelled(model, counter))
        stack.enter_context(counter)
        engine.step()
    errors = [e.data["error"] for e in engine.trace.events if e.kind == "error"]
    if errors or not counter.by_part:
        raise RuntimeError(f"the counted decode step failed: {errors or 'nothing ran'}")
    return counter


def random_model(dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """The 0.8B shape with random weights, built in memory."""
    from mini_deepinfer.models import build_model
    from mini_deepinfer.models.presets import qwen3_5_config

    return build_model(qwen3_5_config(PRESET), dtype, "cpu", seed=0)


def layer_counts(model: nn.Module) -> dict[str, int]:
    """How many layers each mixer has, for the per-layer column."""
    config = model.config
    linear = sum(1 for t in config.layer_types if t == "linear_attention")
    return {PARTS[0]: linear, PARTS[1]: len(config.layer_types) - linear,
            PARTS[2]: len(config.layer_types), PARTS[3]: len(config.layer_types),
            PARTS[4]: len(config.layer_types)}


def table(model: nn.Module, counts: dict[str, KernelCount]) -> str:
    """The markdown table: per part, the kernels per layer and in all, eager and graph path."""
    layers = layer_counts(model)
    rows: list[list[str | None]] = []
    for part in PARTS:
        n = layers.get(part, 1)
        cells: list[str | None] = [part, str(n) if part in layers else ""]
        for path in ("eager", "graph path"):
            total = counts[path].by_part[part]
            cells += [f"{total / n:g}" if part in layers else "", f"{total:,}"]
        rows.append(cells)
    totals = [f"**{sum(counts[p].by_part.values()):,}**" for p in ("eager", "graph path")]
    rows.append(["**total**", None, None, totals[0], None, totals[1]])
    header = ["part", "layers", "eager, per layer", "eager", "graph path, per layer", "graph path"]
    return "\n".join(markdown_table(header, rows))


def most_common(counter: KernelCount, n: int = 10) -> str:
    """``mm 187, mul 120, ...``: the most frequent operators of one path."""
    return ", ".join(f"`{name}` {count}" for name, count in counter.by_op.most_common(n))


@functools.cache
def kernels_text() -> str:
    """The snippet: the table, then the most common operators on the graph path."""
    torch.manual_seed(0)
    model = random_model()
    counts = {"eager": count_decode_step(model, graphs=False),
              "graph path": count_decode_step(model, graphs=True)}
    head = (f"Operators per decode step: {PRESET} shape, random weights, bfloat16, batch 1, counted on the "
            "CPU with a dispatch mode (views and allocations excluded); run eagerly on an accelerator, each "
            "is one kernel launch.")
    return (f"{head}\n\n{table(model, counts)}\n\n"
            f"Most common on the graph path: {most_common(counts['graph path'])}.\n")


def kernels_text_zh() -> str:
    """The same snippet in Chinese, for the Chinese performance page."""
    from site_scripts.performance.zh_tables import translate

    return translate(kernels_text())


OUTPUTS: dict[str, Callable[[], str]] = {"bench/kernels.md": kernels_text,
                                          "bench/kernels.zh.md": kernels_text_zh}

if __name__ == "__main__":
    print(kernels_text(), end="")
