"""Lesson 6's check: ``recurrent_delta_step`` (one token of the gated delta rule) and
``GatedDeltaNet.split_heads`` (q, k and v cut into heads), inside a random tiny Qwen3.5 run by the engine.

Scope: two requests decoded greedily through the engine (every decode token takes the learner's step, every
token the learner's ``split_heads``), compared token by token and logit by logit with the engine's; the step
called alone on random inputs with no, one and two leading dims (outputs, returned state and the state passed
in, which the step updates in place) against the engine's step and the textbook ``recurrent_delta_step_ref``;
``split_heads`` on random inputs (unit keys, queries scaled by ``dk^-0.5``, key heads repeated for the value
heads); and decoding after a prefill against a whole prefill, whose chunked form never calls the step.
Speculative verification (``recurrent_delta_states``) also calls the step, by the module's name, so a swapped
step runs there too. Non-scope: the chunked form's maths (``chunked_delta_rule``), attention, the cache.
"""

from __future__ import annotations

import torch

from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.models.kernels import deltanet
from mini_deepinfer.models.qwen3_5 import GatedDeltaNet

from ..exercise import Check
from ..words import Words
from .torch_scenes import (
    THE_ENGINE,
    Ask,
    Served,
    one_thread,
    serve,
    served_like_engine,
    tensor_difference,
    tiny_qwen35,
)

PROMPT = (3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46)
ASKS = (Ask("A", PROMPT, SamplingParams(max_new_tokens=6)),
        Ask("B", (27, 18, 28), SamplingParams(max_new_tokens=5)))
CONFIG = EngineConfig(kv_capacity=64, max_num_seqs=2, max_batched_tokens=32, chunked_prefill=True)
SHAPES = ((), (3,), (2, 4))  # leading dims of the step's inputs
DK, DV = 8, 5


def decode() -> Served:
    """Two requests, prefilled together, then decoded in one group: each decode token is one step."""
    return serve(tiny_qwen35(), ASKS, CONFIG, keep_logits=True)


def whole_prefill() -> Served:
    """A's prompt and its first four tokens as one prompt: the chunked form only, never the step."""
    first = serve(tiny_qwen35(), ASKS, CONFIG).tokens["A"][:4]
    asks = [Ask("A", PROMPT + tuple(first), SamplingParams(max_new_tokens=1))]
    return serve(tiny_qwen35(), asks, CONFIG, keep_logits=True)


def speculative() -> Served:
    """A second random model drafts 2 tokens: the verify keeps the state after each token, one step each."""
    config = EngineConfig(kv_capacity=64, max_num_seqs=2, max_batched_tokens=32, chunked_prefill=True,
                          spec_width=2)
    return serve(tiny_qwen35(), ASKS, config, draft=tiny_qwen35(1))


def step_inputs(shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
    """A state, normalised q and k (q scaled), v, a log-decay <= 0 and a write strength in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    state = torch.randn(*shape, DK, DV, generator=gen)
    qk = torch.nn.functional.normalize(torch.randn(*shape, 2, DK, generator=gen), dim=-1)
    qk[..., 0, :] *= DK**-0.5
    v = torch.randn(*shape, DV, generator=gen)
    g = -torch.rand(shape, generator=gen) * 2.0
    beta = torch.sigmoid(torch.randn(shape, generator=gen))
    return state, qk, v, g, beta


def steps() -> list[dict[str, torch.Tensor]]:
    """The step on random inputs: its output, the state it returns, and the state passed in afterwards."""
    found = []
    with one_thread():
        for seed, shape in enumerate(SHAPES):
            state, qk, v, g, beta = step_inputs(shape, seed)
            passed = state.clone()
            out, new = deltanet.recurrent_delta_step(passed, qk, v, g, beta)
            q, k = qk[..., 0, :], qk[..., 1, :]
            ref_out, ref_state = deltanet.recurrent_delta_step_ref(state, q, k, v, g, beta)
            found.append({"shape": shape, "out": out, "state": new, "passed": passed, "ref_out": ref_out,
                          "ref_state": ref_state})
    return found


def heads() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``split_heads`` of each Gated DeltaNet layer of the tiny model on random ``[T, q | k | v]`` inputs."""
    layers = [m for m in tiny_qwen35().modules() if isinstance(m, GatedDeltaNet)]
    found = []
    with one_thread():
        for index, layer in enumerate(layers):
            gen = torch.Generator().manual_seed(index)
            mixed = torch.randn(3 + index, 2 * layer.key_dim + layer.value_dim, generator=gen)
            found.append((layer, mixed, *layer.split_heads(mixed)))
    return found


def same_as_engine(trial) -> Words | None:
    return served_like_engine(trial, (decode, speculative), (decode,), atol=1e-5)


OF_SHAPE = Words("the step with leading dims {shape}, {part}", "前导维度为 {shape} 的一步，{part}")
PARTS = {"out": Words("its output o", "输出 o"), "state": Words("the state it returns", "返回的状态"),
         "passed": Words("the state passed in (updated in place)", "传入的状态（原地更新）")}
THE_REFERENCE = Words("the textbook recurrent_delta_step_ref (decay, predict, correct, read)",
                      "教科书式的 recurrent_delta_step_ref（衰减、预测、修正、读出）")


def _part(case: dict, part: str) -> Words:
    return Words(OF_SHAPE.en.format(shape=case["shape"], part=PARTS[part].en),
                 OF_SHAPE.zh.format(shape=case["shape"], part=PARTS[part].zh))


def _broken(what: Words, reference: Words, want: torch.Tensor, got: torch.Tensor,
            atol: float) -> Words | None:
    return tensor_difference(what, reference, want, got, atol)


def step_equals_engine(trial) -> Words | None:
    for want, got in zip(trial.engine(steps), trial.learner(steps)):
        for part in ("out", "state", "passed"):
            broken = _broken(_part(got, part), THE_ENGINE, want[part], got[part], 1e-6)
            if broken is not None:
                return broken
    return None


def step_equals_reference(trial) -> Words | None:
    for case in trial.learner(steps):
        for part, ref in (("out", "ref_out"), ("state", "ref_state")):
            broken = _broken(_part(case, part), THE_REFERENCE, case[ref], case[part], 1e-5)
            if broken is not None:
                return broken
    return None


HEADS = Words("split_heads of layer {layer}, {part}", "第 {layer} 层的 split_heads，{part}")
HEAD_PARTS = {"qk": Words("q and k", "q 与 k"), "v": Words("v", "v"),
              "unit": Words("the length of every key", "每个 key 的长度"),
              "scale": Words("the length of every query (dk^-0.5)", "每个 query 的长度（dk^-0.5）")}


def _head_words(layer: int, part: str) -> Words:
    return Words(HEADS.en.format(layer=layer, part=HEAD_PARTS[part].en),
                 HEADS.zh.format(layer=layer, part=HEAD_PARTS[part].zh))


def heads_equal_engine(trial) -> Words | None:
    for index, (want, got) in enumerate(zip(trial.engine(heads), trial.learner(heads))):
        for part, position in (("qk", 2), ("v", 3)):
            broken = _broken(_head_words(index, part), THE_ENGINE, want[position], got[position], 1e-6)
            if broken is not None:
                return broken
    return None


def heads_normalised(trial) -> Words | None:
    """Keys of length 1 and queries of length dk^-0.5, for every token and value head."""
    for index, (layer, _, qk, _) in enumerate(trial.learner(heads)):
        lengths = qk.norm(dim=-1)
        for part, column, want in (("unit", 1, 1.0), ("scale", 0, layer.k_head_dim**-0.5)):
            broken = _broken(_head_words(index, part), Words("the lesson", "本课所说"),
                             torch.full_like(lengths[..., column], want), lengths[..., column], 1e-3)
            if broken is not None:
                return broken
    return None


NOT_WHOLE = Words("decoding token by token after the prompt gives logits {diff:.2e} away from one whole "
                  "prefill of the same tokens (the chunked form, which never calls your step)",
                  "prompt 之后逐个 decode 得到的 logits 与把同样的 token 整段 prefill"
                  "（分块形式，不调用你的一步）相差 {diff:.2e}")


def decode_equals_whole(trial) -> Words | None:
    stepped = trial.learner(decode).logits["A"][4]
    whole = trial.engine(whole_prefill).logits["A"][0]
    diff = (stepped - whole).abs().max().item()
    return None if diff <= 1e-4 else NOT_WHOLE.format(diff=diff)


CHECKS = (
    Check(Words("a tiny Qwen3.5's greedy tokens and logits (plain and speculative decoding) equal the "
                "engine's",
                "小 Qwen3.5 的 greedy token 与 logits（普通与投机解码）与引擎一致"), same_as_engine),
    Check(Words("the step equals the textbook form: decay, predict, correct, read",
                "一步与教科书形式一致：衰减、预测、修正、读出"), step_equals_reference, "delta-rule"),
    Check(Words("keys have length 1 and queries length dk^-0.5", "key 的长度为 1，query 的长度为 dk^-0.5"),
          heads_normalised, "gated-deltanet"),
    Check(Words("decoding after a prefill gives the logits of one whole prefill",
                "prefill 之后逐个 decode 的 logits 与整段 prefill 一致"), decode_equals_whole, "delta-rule"),
    Check(Words("the step's output, returned state and updated state equal the engine's step",
                "一步的输出、返回的状态与原地更新的状态与引擎的一步一致"), step_equals_engine, "delta-rule"),
    Check(Words("split_heads gives the engine's q, k and v heads", "split_heads 切出的 q、k、v 与引擎一致"),
          heads_equal_engine, "gated-deltanet"),
)
