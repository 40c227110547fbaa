"""mini_deepinfer: a teaching inference engine that follows DeepInfer's execution design.

The package is laid out by role:

* ``core/``: the scheduling core (requests, slots, the engine loop, batching, cross-round state, commit, the
  toy runner). Standard library only, so ``python -m mini_deepinfer`` runs on a bare Python 3.10+.
* ``models/``: Qwen3.5 and Qwen2 in PyTorch, their configuration, the hybrid cache, the loader, the presets.
* ``runtime/``: what runs a model for the engine: the model runner, sampling, speculative decoding, devices,
  text, and ``build_engine``.
* ``tools/``: what the commands share: the one-line-error parser, run records, checks, checkpoint writers.
* the commands: ``python -m mini_deepinfer`` (this package's ``__main__``), ``.generate``,
  ``.pipeline_demo``, ``.model_draft_demo``, ``.random_checkpoint`` and ``.bench``.

Importing this package imports only the scheduling core.
"""

from __future__ import annotations

from .core import (
    IN_FLIGHT,
    BatchEngine,
    Delivery,
    Engine,
    EngineConfig,
    FinishReason,
    Request,
    RequestStatus,
    RoundPlan,
    RoundResult,
    Runner,
    SamplingParams,
    SeqPlan,
    SlotPool,
    ToyRunner,
    Trace,
    TraceEvent,
    format_event,
)

__all__ = [
    "IN_FLIGHT", "BatchEngine", "Delivery", "Engine", "EngineConfig", "FinishReason", "Request",
    "RequestStatus", "RoundPlan", "RoundResult", "Runner", "SamplingParams", "SeqPlan", "SlotPool",
    "ToyRunner", "Trace", "TraceEvent", "format_event",
]
