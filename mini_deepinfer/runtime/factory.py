"""One way to build an engine over a model: caches, runner and engine sized together.

Scope: :func:`build_engine`, the only place that wires a model (and an optional draft model) to an engine. It
gives every cache the capacities the engine hands out, so a slot number means the same row in every cache, and
checks what only makes sense together (a draft needs a draft width, and the same vocabulary as the target).
Non-scope: loading checkpoints (``models.loader``), the numbers themselves (``core.engine.EngineConfig``
checks them when they are made).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.engine import Engine
from mini_deepinfer.core.speculative import SpeculativeBatchEngine, SpeculativeEngine
from mini_deepinfer.core.trace import Trace
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.runtime.graphs import DecodeGraphs
from mini_deepinfer.runtime.model_runner import ModelRunner
from mini_deepinfer.runtime.speculative.draft import ModelDraft, check_same_vocabulary
from mini_deepinfer.runtime.speculative.runner import SpeculativeRunner

__all__ = ["build_engine", "check_draft", "default_snapshots", "engine_class", "new_cache", "new_runner",
           "use_graphs", "with_prefix_snapshots"]


GRAPHS_BY_DEFAULT: frozenset[str] = frozenset()
"""Device types on which decode rounds run as captured graphs unless ``--eager`` is given. Empty until the
graph path has been measured on such a device (``python -m mini_deepinfer.bench.gpu``): until then
``--graphs`` asks for it, so that a reader with a GPU never gets an untried path by default."""


def new_cache(model: CausalLM, kv_capacity: int, state_capacity: int,
              dummy_slots: bool = False, snapshot_capacity: int = 0) -> HybridCache:
    """A cache for ``model`` on its device and in its dtype (with the dummy slots that graphs need, and the
    prefix cache's snapshots)."""
    weight = model.lm_head.weight
    return HybridCache(model.config, kv_capacity, state_capacity, weight.dtype, weight.device, dummy_slots,
                       snapshot_capacity)


def default_snapshots(config: EngineConfig) -> int:
    """Prefix snapshots when none are asked for: one per block the KV slots can hold, plus one prompt end
    per request that can run at once."""
    return config.kv_capacity // config.prefix_block + config.max_num_seqs


def with_prefix_snapshots(config: EngineConfig, *models: CausalLM | None) -> EngineConfig:
    """A prefix cache over a model with recurrent layers needs snapshot slots; over one without (Qwen2)
    none, and every block end is a reuse point."""
    if not config.prefix_cache:
        return replace(config, prefix_snapshots=None)
    stateful = any(m is not None and m.config.linear_attention_layers for m in models)
    if not stateful:
        return replace(config, prefix_snapshots=None)
    return replace(config, prefix_snapshots=config.prefix_snapshots or default_snapshots(config))


def use_graphs(device: torch.device, asked: bool | None) -> bool:
    """``--graphs`` (True), ``--eager`` (False), or neither (None): the device's default."""
    return asked if asked is not None else device.type in GRAPHS_BY_DEFAULT


def check_draft(config: EngineConfig, has_draft: bool) -> None:
    """A draft model and ``spec_width`` go together: at least one draft token with a draft, none without."""
    if has_draft != (config.spec_width > 0):
        width = config.spec_width
        raise ValueError(f"spec_width must be >= 1 with a draft model and 0 without one, got {width}")


# --8<-- [start:build_engine]
def build_engine(model: CausalLM, config: EngineConfig, *, draft: CausalLM | None = None,
                 batching: bool = True, trace: Trace | None = None, keep_logits: bool = False,
                 use_graphs: bool = False, compile_step: bool = False,
                 runner: ModelRunner | None = None) -> Engine:
    """Build the engine that runs ``model``: its cache, its runner (with the draft's, if any), the engine.

    Args:
        model: the model that computes every committed token (the target, with a draft).
        config: capacities and modes. Without ``state_capacity`` every cache gets as many state slots as
            requests can run at once: ``max_num_seqs`` for a ``BatchEngine``, one for an ``Engine``. With
            ``prefix_cache``, every cache over a model with recurrent layers gets ``prefix_snapshots``
            snapshot slots (``default_snapshots`` when not given).
        draft: a draft model for speculative decoding; ``config.spec_width`` must then be at least 1.
        batching: a ``BatchEngine`` (budget, chunking, many requests) rather than one request at a time.
        trace: where the engine's trace events go.
        keep_logits: the runner also hands back each sampled row's logits (tests compare them).
        use_graphs: run plain greedy decode rounds on static buffers, every bucket captured as a graph (on an
            accelerator) now, before any request (``runtime.graphs``); a speculative runner always runs
            eagerly.
        compile_step: the graph path's decode step goes through ``torch.compile``, every bucket compiled now
            (``DecodeGraphs(compile=True)``); it needs ``use_graphs`` and no draft.
        runner: reuse the runner of an earlier engine whose requests have all finished (its cache, and the
            graphs it has captured, as a server keeps them from one batch of requests to the next).
    """
    check_draft(config, draft is not None)
    if compile_step and (not use_graphs or draft is not None):
        raise ValueError("compile_step compiles the graph path's decode step: it needs use_graphs=True and "
                         "no draft model")
    if config.state_capacity is None:
        config = replace(config, state_capacity=config.max_num_seqs if batching else 1)
    config = with_prefix_snapshots(config, model, draft)
    if runner is None:
        runner = new_runner(model, config, draft, keep_logits, use_graphs and draft is None, compile_step)
    held = (runner.cache.kv_capacity, runner.cache.state_capacity, runner.cache.snapshot_capacity)
    if held != (config.kv_capacity, config.state_capacity, config.prefix_snapshots or 0):
        raise ValueError(f"the runner's cache holds {held} KV, state and snapshot slots, the config asks for "
                         f"{(config.kv_capacity, config.state_capacity, config.prefix_snapshots or 0)}")
    return engine_class(speculative=config.spec_width > 0, batching=batching)(runner, config, trace)
# --8<-- [end:build_engine]


def engine_class(*, speculative: bool, batching: bool) -> type[Engine]:
    """The engine for a mode: batching or one request at a time, with draft positions or without."""
    if speculative:
        return SpeculativeBatchEngine if batching else SpeculativeEngine
    return BatchEngine if batching else Engine


def new_runner(model: CausalLM, config: EngineConfig, draft: CausalLM | None, keep_logits: bool,
               use_graphs: bool, compile_step: bool = False) -> ModelRunner:
    """A runner and its caches, sized as ``config`` says (graphs are compiled, with ``compile_step``, and
    captured here, before any request)."""
    snapshots = config.prefix_snapshots or 0
    cache = new_cache(model, config.kv_capacity, config.state_capacity, use_graphs, snapshots)
    if draft is None:
        graphs = DecodeGraphs(model, cache, compile=compile_step) if use_graphs else None
        return ModelRunner(model, cache, keep_logits, graphs)
    check_same_vocabulary(model, draft)
    draft_cache = new_cache(draft, config.kv_capacity, config.state_capacity, snapshot_capacity=snapshots)
    return SpeculativeRunner(model, cache, ModelDraft(draft, draft_cache))
