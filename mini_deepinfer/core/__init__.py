"""The scheduling core: requests, slots, round plans, the engine loop, batching, cross-round state, commit.

Scope: everything that decides *what* runs in a round and *what a result means*, with no tensors: requests
and their sampling parameters, the slot pools, the round plan and the runner protocol, ``Engine`` and
``BatchEngine``, the in-flight round of cross-round execution, commit and stop rules, the speculative
engines (``speculative.py``: decodes that verify drafts), the trace, and the toy runner of lesson 1.
Non-scope: models and tensors (``models/``, ``runtime/``).
Every module here imports only the standard library, so ``python -S -m mini_deepinfer`` runs on a bare Python.
"""

from __future__ import annotations

from .batch import BatchEngine
from .commit import Delivery
from .config import MAX_SPEC_WIDTH, EngineConfig
from .engine import Engine
from .pipeline import StoppingDecodePipeline
from .plan import IN_FLIGHT, RoundPlan, RoundResult, SeqPlan
from .request import FinishReason, Request, RequestStatus, SamplingParams
from .runner import Runner
from .slots import SlotPool
from .speculative import SpeculativeBatchEngine, SpeculativeEngine
from .toy import ToyRunner
from .trace import Trace, TraceEvent, format_event

__all__ = [
    "IN_FLIGHT", "MAX_SPEC_WIDTH", "BatchEngine", "Delivery", "Engine", "EngineConfig", "FinishReason",
    "Request", "RequestStatus", "RoundPlan", "RoundResult", "Runner", "SamplingParams", "SeqPlan", "SlotPool",
    "SpeculativeBatchEngine", "SpeculativeEngine", "StoppingDecodePipeline", "ToyRunner", "Trace",
    "TraceEvent", "format_event",
]
