"""Lessons 12 to 14's scenarios: speculative decoding in the real engine with a tiny random target and draft.

Scope: the two-model demo as the lessons run it (``model_draft_demo --cpu-example NAME --trace-rounds``), a
batched crowd of requests through ``SpeculativeBatchEngine`` (chunked prefill, a small token budget), which
can look at both caches after every round (a cold recomputation, as ``tests/test_speculative_engine.py``
does), the plain greedy reference, and the invariants these lessons share: tokens equal to plain greedy, every
slot of both caches returned, each group made of the accepted drafts and one token of the target. The models
are built once per process (the demo's random tiny Qwen3.5, seed 0, and perturbed copies of it), on one
thread, so every run is exactly reproducible. Non-scope: which scenario a lesson runs (its
``lesson_NN.py``), the sampled distributions (lesson 14's own check).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from mini_deepinfer import model_draft_demo
from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.engine import Engine
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.runtime.factory import build_engine
from mini_deepinfer.tools.checkpoints import perturbed_copy
from mini_deepinfer.tools.checks import cold_difference

from ..words import Words
from .toy_scenes import Run, Stalled, first_difference

MAX_ROUNDS = 60  # every scenario here ends within 25 rounds; an engine that stalls stops here
COLD_TOLERANCE = model_draft_demo.COLD_TOLERANCE  # float32: the live cache against a cold recomputation
CROWD_PROMPTS = {"A": tuple(range(1, 15)), "B": (5, 6, 7), "C": (9, 8, 7, 6, 5, 4, 3), "D": (200,)}
CROWD_NEW_TOKENS = 9


def settle() -> None:
    """The demo's settings: one thread (the same numbers on any machine) and a fixed global seed."""
    torch.set_num_threads(1)
    torch.manual_seed(0)


@functools.cache
def target() -> CausalLM:
    """The demo's target: a random tiny Qwen3.5 (3 Gated DeltaNet layers, 1 attention layer, 256 tokens)."""
    settle()
    return model_draft_demo.demo_target()


@functools.cache
def draft(noise: float, seed: int) -> CausalLM:
    """The target's weights plus ``noise`` x each weight's standard deviation (0: an exact copy)."""
    return perturbed_copy(target(), noise, seed)


def bounded(engine: Engine) -> Engine:
    """The engine, whose ``step`` raises :class:`Stalled` once it has run ``MAX_ROUNDS`` rounds, and which
    raises a runner's exception instead of finishing the round's requests as ``error``: no scenario here has
    a runner that fails, so an exception is the learner's code, and the check shows it."""
    step = engine.step

    def raise_it(exc: Exception) -> None:
        raise exc

    def bounded_step():
        if engine.round_id >= MAX_ROUNDS:
            raise Stalled(f"the engine was still busy after {MAX_ROUNDS} rounds")
        return step()

    engine.step = bounded_step
    engine.abandon_in_flight = raise_it
    return engine


def demo(example: str, width: int = 3) -> Run:
    """``python -m mini_deepinfer.model_draft_demo --cpu-example EXAMPLE --width WIDTH --trace-rounds``: its
    printed lines (rounds, the greedy and cold-cache checks, the free slots), its trace, its engine."""
    settle()
    chosen = model_draft_demo.EXAMPLES[example]
    models = (target(), draft(chosen.noise, chosen.noise_seed))
    run, original = Run(), model_draft_demo.make_engine
    model_draft_demo.make_engine = lambda *args: bounded(original(*args))
    try:
        run.engine, _ = model_draft_demo.run_example(chosen, width, True, run.lines.append, models=models)
    finally:
        model_draft_demo.make_engine = original
    run.events = list(run.engine.trace.events)
    return run


@dataclass(frozen=True)
class Look:
    """One running request after one round: how far each cache is from a cold recomputation of what it should
    hold (``None``: not compared), and what the engine says it holds."""

    round_id: int
    request_id: str
    target: float
    draft: float | None
    num_computed: int
    committed: int | None  # prompt + output - 1: what a decoding request holds; None: no output yet
    kv_slots: int
    snapshots: int  # target snapshots still kept after the round


@dataclass
class SpecRun(Run):
    """A crowd's run: :class:`Run` plus what was seen after every round (with ``cold``)."""

    looks: list[Look] = field(default_factory=list)


def crowd(width: int, noise: float, noise_seed: int, budget: int = 7, cold: bool = False,
          temperature: float = 0.0) -> SpecRun:
    """Four requests (prompts of 1 to 14 tokens, 9 new tokens each) batched with chunked prefill under a
    budget of ``budget`` tokens, drafts of ``width``; with ``cold``, both caches are compared with a cold
    recomputation after every round."""
    settle()
    config = EngineConfig(kv_capacity=96, state_capacity=4, max_num_seqs=4, max_batched_tokens=budget,
                          chunked_prefill=True, spec_width=width)
    engine = bounded(build_engine(target(), config, draft=draft(noise, noise_seed), batching=True))
    for i, (rid, prompt) in enumerate(CROWD_PROMPTS.items()):
        params = SamplingParams(max_new_tokens=CROWD_NEW_TOKENS, temperature=temperature, seed=i)
        engine.submit(rid, list(prompt), params)
    run = SpecRun(engine=engine)
    while engine.has_unfinished():
        engine.step()
        if cold:
            run.looks.extend(look(engine))
    run.events = list(engine.trace.events)
    return run


def look(engine: Engine) -> list[Look]:
    """Every running request's two caches against a cold recomputation of the prefix each should hold."""
    runner, found = engine.runner, []
    for req in engine.running:
        tokens = (list(req.prompt_token_ids) + list(req.output_token_ids))[: req.num_computed]
        diff = cold_difference(runner.model, runner.cache, tokens, req.kv_slots, req.state_slot)
        held = runner.draft.computed.get(req.request_id, 0)
        draft_diff = None
        if held:
            draft_diff = max(cold_difference(runner.draft.model, runner.draft.cache, tokens[:held],
                                             req.kv_slots, req.state_slot).values())
        committed = req.prompt_len + len(req.output_token_ids) - 1 if req.output_token_ids else None
        snapshots = sum(len(layers) for kinds in runner.cache.snapshots.values() for layers in kinds.values())
        found.append(Look(engine.round_id, req.request_id, max(diff.values()), draft_diff, req.num_computed,
                          committed, len(req.kv_slots), snapshots))
    return found


@functools.cache
def plain_greedy(prompt: tuple[int, ...], max_new_tokens: int) -> list[int]:
    """The reference: the target alone, plain greedy decoding (no draft), in a fresh cache."""
    settle()
    engine = build_engine(target(), EngineConfig(kv_capacity=len(prompt) + max_new_tokens), batching=False)
    engine.submit("plain", list(prompt), SamplingParams(max_new_tokens=max_new_tokens))
    engine.run()
    return list(engine.requests["plain"].output_token_ids)


def same_runs(scenarios: tuple[tuple, ...]) -> callable:
    """A comparison step: each scenario (a function and its arguments) prints the same lines (its trace lines
    where it prints none) with the learner's functions as with the engine's; the first difference is named."""
    def compare(trial) -> Words | None:
        for scenario, *args in scenarios:
            want, got = trial.engine(scenario, *args), trial.learner(scenario, *args)
            differs = first_difference(want.lines or want.event_lines, got.lines or got.event_lines)
            if differs is not None:
                name = f"{scenario.__name__}{tuple(args)}"
                return Words(f"scenario {name}: {differs.en}", f"场景 {name}：{differs.zh}")
        return None
    return compare


NOT_GREEDY = Words("{scenario}: request {request} delivered {got}; plain greedy decoding of the target gives "
                   "{want} (first difference at token {index})",
                   "{scenario}：请求 {request} 交付了 {got}；目标模型普通 greedy 解码得到 {want}"
                   "（第一个不同在第 {index} 个 token）")


def equals_plain_greedy(name: str, run: Run) -> Words | None:
    """Every request's output equals plain greedy decoding of its prompt by the target alone."""
    for rid, req in run.engine.requests.items():
        got = list(req.output_token_ids)
        want = plain_greedy(tuple(req.prompt_token_ids), len(got) or req.params.max_new_tokens)
        if got != want:
            index = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            return NOT_GREEDY.format(scenario=name, request=rid, got=got, want=want, index=index)
    return None


NOT_RETURNED = Words("{scenario}: after every request finished, the {cache} cache has {free} of {capacity} "
                     "{kind} slots free (a slot was never given back)",
                     "{scenario}：所有请求结束后，{cache} 缓存只有 {free}/{capacity} 个 {kind} 槽位空闲"
                     "（有槽位没有归还）")


def both_caches_returned(name: str, run: Run) -> Words | None:
    """With nothing running, every KV and state slot is free again, in the engine's pools and in the draft's
    cache, and no snapshot is left in either cache."""
    engine, draft_runner = run.engine, run.engine.runner.draft
    counts = (("target", "KV", engine.kv_pool.num_free, engine.kv_pool.capacity),
              ("target", "state", engine.state_pool.num_free, engine.state_pool.capacity),
              ("draft", "KV", draft_runner.free_kv_slots(), draft_runner.cache.kv_capacity),
              ("draft", "state", draft_runner.free_state_slots(), draft_runner.cache.state_capacity),
              ("target", "snapshot", -len(engine.runner.cache.snapshots), 0),
              ("draft", "snapshot", -len(draft_runner.cache.snapshots), 0))
    for cache, kind, free, capacity in counts:
        if free != capacity:
            return NOT_RETURNED.format(scenario=name, cache=cache, kind=kind, free=free, capacity=capacity)
    return None


BAD_GROUP = Words("{scenario}, round {round}: {request} delivered {group} after the drafts {drafts}; a group "
                  "is the drafts the target accepted ({accepted} of them), then one token of the target",
                  "{scenario}，第 {round} 轮：{request} 在草稿 {drafts} 之后交付了 {group}；一组 token 应当是"
                  "目标模型接受的草稿（{accepted} 个），再加目标模型自己的一个 token")


def groups_follow_drafts(name: str, run: Run) -> Words | None:
    """Each speculative round's group is the accepted drafts (a prefix of the drafts) plus one token."""
    verified = {}
    for event in run.events:
        if event.kind == "verify":
            verified[(event.round_id, event.request_id)] = event.data
        elif event.kind == "commit" and (event.round_id, event.request_id) in verified:
            data = verified[(event.round_id, event.request_id)]
            group, drafts, accepted = event.data["tokens"], data["drafts"], data["accepted"]
            # a stop inside the group cuts it: only the committed part is compared
            if len(group) > accepted + 1 or group[:accepted] != drafts[: min(accepted, len(group))]:
                return BAD_GROUP.format(scenario=name, round=event.round_id, request=event.request_id,
                                        group=group, drafts=drafts, accepted=accepted)
    return None
