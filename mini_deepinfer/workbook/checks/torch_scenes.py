"""The torch lessons' scenes: tiny random models built in code, the real engine run on them, the comparisons.

Scope: :func:`tiny_qwen35` (a random tiny Qwen3.5, built once per process for each seed and shape),
:func:`one_thread` (one CPU thread and a fixed seed while a scene runs, so every float sum, hence every greedy
token, is the same on every run), :func:`serve` (requests through the real engine: ``build_engine`` with the
model, step until done; every round's plan, the tensors the runner staged for it, the logits it handed back
and the engine at the end are kept in a :class:`Served`; an exception of the runner, which the engine turns
into finished requests, is raised again), and the comparisons the torch lessons share: the first token where
two runs part (:func:`first_token_difference`), the largest difference of two tensors
(:func:`tensor_difference`).
Non-scope: which scenes a lesson runs and what it holds (its ``lesson_NN.py``); the toy runner's scenes
(``toy_scenes.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import torch

from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.plan import RoundPlan
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.models import build_model
from mini_deepinfer.models.forward_batch import ForwardBatch
from mini_deepinfer.models.presets import qwen3_5_config
from mini_deepinfer.runtime.factory import build_engine

from ..words import Words

MAX_ROUNDS = 200  # every scene here ends within 40 rounds; a run that stalls stops here
_MODELS: dict[tuple, torch.nn.Module] = {}


@contextmanager
def one_thread(seed: int = 0) -> Iterator[None]:
    """One CPU thread and ``torch.manual_seed(seed)`` inside the block; the thread count is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def tiny_qwen35(seed: int = 0, vocab_size: int = 256, tied: bool = False) -> torch.nn.Module:
    """A random ``tiny`` Qwen3.5 (3 Gated DeltaNet layers, then 1 attention layer), float32 on the CPU.

    ``initializer_range=0.1`` as in ``pipeline_demo.demo_model``, so greedy tokens vary from step to step.
    Built once per process for each (seed, vocabulary, tied head); no scene changes its weights.
    """
    key = (seed, vocab_size, tied)
    if key not in _MODELS:
        config = qwen3_5_config("tiny", vocab_size=vocab_size, initializer_range=0.1,
                                tie_word_embeddings=tied)
        with one_thread(seed):
            _MODELS[key] = build_model(config, torch.float32, "cpu", seed=seed)
    return _MODELS[key]


@dataclass(frozen=True)
class Ask:
    """One request of a scene: submitted once ``after`` rounds have run."""

    request_id: str
    prompt: tuple[int, ...]
    params: SamplingParams = SamplingParams(max_new_tokens=3)
    after: int = 0


@dataclass
class Served:
    """One scene through the engine: each request's output, and per launched round its plan, the tensors
    the runner staged (one dict per target forward) and the logits it handed back per request."""

    tokens: dict[str, list[int]] = field(default_factory=dict)
    rounds: list[tuple[RoundPlan, list[dict[str, object]]]] = field(default_factory=list)
    logits: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    failure: Exception | None = None  # the first exception the runner raised (the engine catches it)
    engine: object = None  # the engine at the end (its runner's cache holds what the last round left)


def staged_fields(batch: ForwardBatch) -> dict[str, object]:
    """Every tensor and host field of a round's batch as plain Python values, by name."""
    values: dict[str, object] = {}
    for name in ("input_ids", "in_flight_rows", "positions", "slot_mapping", "state_slots", "logits_indices",
                 "fresh_slots"):
        values[name] = _plain(getattr(batch, name))
    values["kv_slots"] = {b: _plain(t) for b, t in sorted(batch.kv_slots.items())}
    for item in fields(batch.layout):
        values[f"layout.{item.name}"] = _plain(getattr(batch.layout, item.name))
    return values


def _plain(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, slice):
        return (value.start, value.stop)
    return value


def serve(model: torch.nn.Module, asks: Sequence[Ask], config: EngineConfig, *, batching: bool = True,
          draft: torch.nn.Module | None = None, keep_logits: bool = False) -> Served:
    """Run ``asks`` through the real engine over ``model`` (one thread, seed 0) until all are done."""
    served = Served()
    with one_thread():
        engine = build_engine(model, config, batching=batching, draft=draft, keep_logits=keep_logits)
        _record(engine.runner, served)
        pending = sorted(asks, key=lambda ask: ask.after)
        while pending or engine.has_unfinished():
            while pending and pending[0].after <= engine.round_id:
                ask = pending.pop(0)
                engine.submit(ask.request_id, list(ask.prompt), ask.params)
            engine.step()
            if served.failure is not None:  # the engine finished the requests as errors; the learner sees why
                raise served.failure
            if engine.round_id >= MAX_ROUNDS:
                raise RuntimeError(f"the engine was still busy after {MAX_ROUNDS} rounds")
    served.tokens = {rid: list(req.output_token_ids) for rid, req in engine.requests.items()}
    served.engine = engine
    return served


def _record(runner: object, served: Served) -> None:
    """Keep each launched plan, what ``stage`` laid out for it, and the logits ``read`` hands back."""
    launch, stage, read = runner.launch, runner.stage, runner.read

    def launching(plan: RoundPlan) -> object:
        served.rounds.append((plan, []))
        return _noting(served, launch, plan)

    def staging(*args: object, **kwargs: object) -> object:
        prepared = stage(*args, **kwargs)
        if served.rounds:
            served.rounds[-1][1].append(staged_fields(prepared.batch))
        return prepared

    def reading(handle: object) -> object:
        result = _noting(served, read, handle)
        for rid, row in (getattr(result, "logits", None) or {}).items():
            served.logits.setdefault(rid, []).append(row)
        return result

    runner.launch, runner.stage, runner.read = launching, staging, reading


def _noting(served: Served, call: Callable[[object], object], argument: object) -> object:
    """``call(argument)``; an exception is kept in ``served`` (the first one) and raised on to the engine."""
    try:
        return call(argument)
    except Exception as exc:
        served.failure = served.failure or exc
        raise


TOKEN_DIFFERS = Words("{scene}: request {request}, token {index}: the engine gives {expected}, yours "
                      "{actual} (the engine's tokens {want}, yours {got})",
                      "{scene}：请求 {request} 的第 {index} 个 token：引擎给出 {expected}，你的给出 {actual}"
                      "（引擎的 token {want}，你的 {got}）")


def first_token_difference(scene: str, want: dict[str, list[int]], got: dict[str, list[int]]) -> Words | None:
    """None if every request got the same tokens; else the first token where they part (index from 0)."""
    for rid, expected in want.items():
        actual = got.get(rid, [])
        for index in range(max(len(expected), len(actual))):
            a = expected[index] if index < len(expected) else "nothing"
            b = actual[index] if index < len(actual) else "nothing"
            if a != b:
                return TOKEN_DIFFERS.format(scene=scene, request=rid, index=index, expected=a, actual=b,
                                            want=expected, got=actual)
    return None


TENSOR_DIFFERS = Words("{what}: yours differs from {reference} by up to {diff:.2e} (allowed {atol:.0e})",
                       "{what}：你的结果与{reference}相差最多 {diff:.2e}（允许 {atol:.0e}）")
SHAPE_DIFFERS = Words("{what}: yours has shape {actual}, {reference} has {expected}",
                      "{what}：你的结果形状是 {actual}，{reference}是 {expected}")


def tensor_difference(what: str | Words, reference: Words, want: torch.Tensor, got: object,
                      atol: float = 1e-5) -> Words | None:
    """None if ``got`` is a tensor of ``want``'s shape within ``atol`` of it (NaN never is)."""
    what = what if isinstance(what, Words) else Words(what, what)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return Words(*(SHAPE_DIFFERS(lang).format(what=what(lang), actual=shape, reference=reference(lang),
                                                  expected=tuple(want.shape)) for lang in ("en", "zh")))
    diff = (want.double() - got.double()).abs().max().item() if want.numel() else 0.0
    if diff <= atol:
        return None
    return Words(*(TENSOR_DIFFERS(lang).format(what=what(lang), reference=reference(lang), diff=diff,
                                               atol=atol) for lang in ("en", "zh")))


def fill(template: Words, **values: object) -> Words:
    """``template`` with ``values`` filled in each language (a ``Words`` value gives its own language)."""
    def one(lang: str) -> str:
        return template(lang).format(**{k: v(lang) if isinstance(v, Words) else v for k, v in values.items()})
    return Words(one("en"), one("zh"))


THE_ENGINE = Words("the engine's", "引擎的结果")


LOGITS_OF = Words("{scene}, request {request}, the logits of token {index}",
                  "{scene}：请求 {request} 第 {index} 个 token 的 logits")


def served_like_engine(trial, scenes: Sequence[Callable], logits_of: Sequence[Callable],
                       atol: float = 1e-5) -> Words | None:
    """Each scene's tokens equal the engine's, then the logits of the scenes in ``logits_of``: the first
    step of the lessons whose function runs inside the model (a served run: ``serve``)."""
    for scene in scenes:
        want, got = trial.engine(scene).tokens, trial.learner(scene).tokens
        differs = first_token_difference(scene.__name__, want, got)
        if differs is not None:
            return differs
    for scene in logits_of:
        got = trial.learner(scene).logits
        for rid, rows in trial.engine(scene).logits.items():
            for index, (want_row, got_row) in enumerate(zip(rows, got.get(rid, []))):
                what = LOGITS_OF.format(scene=scene.__name__, request=rid, index=index)
                differs = tensor_difference(what, THE_ENGINE, want_row, got_row, atol)
                if differs is not None:
                    return differs
    return None

