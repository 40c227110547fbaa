"""mini_deepinfer: a teaching inference engine that follows DeepInfer's execution design.

The scheduling core (this package's top level: requests, slots, engine, batching, cross-round
pipeline, commit, trace, the toy runner) imports only the standard library, so
``python -m mini_deepinfer`` runs on a bare Python 3.10+. The model stack (``models/``, ``runner``,
``sampling``, ``text``) needs PyTorch and is imported only by the commands that use it.
"""

from __future__ import annotations

from .commit import Delivery
from .engine import Engine
from .plan import IN_FLIGHT, RoundPlan, RoundResult, Runner, SeqPlan
from .request import FinishReason, Request, RequestStatus, SamplingParams
from .slots import SlotPool
from .toy import ToyRunner
from .trace import Trace, TraceEvent, format_event

__all__ = [
    "IN_FLIGHT", "Delivery", "Engine", "FinishReason", "Request", "RequestStatus", "RoundPlan",
    "RoundResult", "Runner", "SamplingParams", "SeqPlan", "SlotPool", "ToyRunner", "Trace",
    "TraceEvent", "format_event",
]
