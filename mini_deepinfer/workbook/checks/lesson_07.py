"""Lesson 7's check: ``causal_conv_with_window``, the convolution of a chunk that continues a saved window.

Scope: a random tiny Qwen3.5 through the real engine: one 40-token prompt cut into chunks of 7 (the lesson's
prompt length), a prompt cut into chunks of 2 beside a decoding request (chunks shorter than the window), and
speculative verification (rows of 3 tokens that keep a window per position); tokens and logits compared with
the engine's. Then the function called alone (1 to 9 new inputs, one and two sequences, fresh and carried
windows, with and without ``out=``) against the engine's, against the textbook ``causal_conv_ref``
(``F.conv1d`` over ``[window | x]``) and against the lesson's rule for the new window (the last ``K - 1``
inputs); and the lesson's invariant, chunked prefill equal to whole prefill (logits and the windows left
in the cache). Non-scope: the one-token convolution of the decode group (``causal_conv_step``), the
recurrent state (lesson 6), zeroing fresh slots (``fresh_slots``, lesson 5).
"""

from __future__ import annotations

import torch

from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.models.kernels import deltanet

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

PROMPT = tuple((7 * i + 3) % 256 for i in range(40))
LONG = Ask("P", PROMPT, SamplingParams(max_new_tokens=1))
CHANNELS, KERNEL = 6, 4
LENGTHS = (1, 2, 3, 4, 9)  # new inputs per call: shorter than, as long as and longer than the window


def _config(budget: int, **options: object) -> EngineConfig:
    return EngineConfig(kv_capacity=96, max_num_seqs=2, max_batched_tokens=budget, chunked_prefill=True,
                        **options)


def chunks_of_7() -> Served:
    """The 40-token prompt in chunks of 7 (the last one 5)."""
    return serve(tiny_qwen35(), [LONG], _config(7), keep_logits=True)


def whole() -> Served:
    """The same prompt in one chunk."""
    return serve(tiny_qwen35(), [LONG], _config(64), keep_logits=True)


def beside_a_decode() -> Served:
    """A decodes while B's 20-token prompt goes in chunks of 2, shorter than the window of 3."""
    asks = (Ask("A", (9, 8, 7, 6), SamplingParams(max_new_tokens=9)),
            Ask("B", PROMPT[:20], SamplingParams(max_new_tokens=3), after=1))
    return serve(tiny_qwen35(), asks, _config(3), keep_logits=True)


def speculative() -> Served:
    """A second random model drafts 2 tokens: each verify row (3 tokens) continues the window."""
    asks = (Ask("S", PROMPT[:9], SamplingParams(max_new_tokens=6)),)
    return serve(tiny_qwen35(), asks, _config(16, spec_width=2), draft=tiny_qwen35(1))


ENGINE_SCENES = (chunks_of_7, beside_a_decode, speculative)


def conv_calls() -> list[dict[str, object]]:
    """The function on random inputs: outputs, windows, and what it wrote into ``out`` when given one."""
    found = []
    gen = torch.Generator().manual_seed(0)
    taps = torch.randn(CHANNELS, KERNEL, generator=gen)
    with one_thread():
        for batch in (1, 2):
            for length in LENGTHS:
                x = torch.randn(batch, length, CHANNELS, generator=gen)
                window = torch.randn(batch, CHANNELS, KERNEL - 1, generator=gen) * (length % 2)
                rows = torch.full((batch, length + 2, CHANNELS), float("nan"))
                out = rows[:, 1 : length + 1]  # strided rows of a larger tensor, as the layer passes them
                y, new = deltanet.causal_conv_with_window(x, window.clone(), taps, out=out)
                plain_y, plain_new = deltanet.causal_conv_with_window(x, window.clone(), taps)
                found.append({"case": (batch, length), "x": x, "window": window, "taps": taps, "y": plain_y,
                              "window_out": plain_new, "into_out": out.clone(), "y_with_out": y,
                              "window_with_out": new})
    return found


def same_as_engine(trial) -> Words | None:
    return served_like_engine(trial, ENGINE_SCENES, ENGINE_SCENES, atol=1e-5)


CALL = Words("{batch} sequence(s), {length} new inputs, {part}", "{batch} 条序列、{length} 个新输入，{part}")
PARTS = {"y": Words("the outputs", "输出"), "window_out": Words("the new window", "新窗口"),
         "into_out": Words("what was written into out=", "写入 out= 的结果"),
         "window_with_out": Words("the new window (with out=)", "新窗口（给了 out= 时）")}


def _call_words(case: dict, part: str) -> Words:
    batch, length = case["case"]
    return Words(CALL.en.format(batch=batch, length=length, part=PARTS[part].en),
                 CALL.zh.format(batch=batch, length=length, part=PARTS[part].zh))


def _differs(case: dict, part: str, reference: Words, want: torch.Tensor, got: object) -> Words | None:
    return tensor_difference(_call_words(case, part), reference, want, got, 1e-6)


def calls_equal_engine(trial) -> Words | None:
    for want, got in zip(trial.engine(conv_calls), trial.learner(conv_calls)):
        for part in PARTS:
            broken = _differs(got, part, THE_ENGINE, want[part], got[part])
            if broken is not None:
                return broken
    return None


CONV1D = Words("F.conv1d over [window | x], then SiLU (causal_conv_ref)",
               "对 [window | x] 做 F.conv1d 再 SiLU（causal_conv_ref）")
LAST_INPUTS = Words("the last K - 1 inputs of [window | x]", "[window | x] 的最后 K - 1 个输入")


def outputs_are_the_convolution(trial) -> Words | None:
    for case in trial.learner(conv_calls):
        weight = case["taps"][:, None, :]
        want = deltanet.causal_conv_ref(case["x"], case["window"], weight)
        broken = _differs(case, "y", CONV1D, want, case["y"])
        if broken is not None:
            return broken
    return None


def window_is_the_last_inputs(trial) -> Words | None:
    for case in trial.learner(conv_calls):
        strip = torch.cat([case["window"], case["x"].transpose(1, 2)], dim=-1)
        broken = _differs(case, "window_out", LAST_INPUTS, strip[..., -(KERNEL - 1):], case["window_out"])
        if broken is not None:
            return broken
    return None


WHOLE = Words("the whole prompt in one chunk (the engine's)", "整段 prompt 一次算完（引擎的结果）")


def chunked_equals_whole(trial) -> Words | None:
    chunked, single = trial.learner(chunks_of_7), trial.engine(whole)
    what = Words("the logits after the prompt in chunks of 7", "每块 7 个算完 prompt 后的 logits")
    broken = tensor_difference(what, WHOLE, single.logits["P"][0], chunked.logits["P"][0], 1e-4)
    if broken is not None:
        return broken
    mine, theirs = chunked.engine.runner.cache.conv_state, single.engine.runner.cache.conv_state
    for layer, window in theirs.items():
        what = Words(f"the window layer {layer} keeps after the prompt",
                     f"第 {layer} 层在 prompt 之后留下的窗口")
        broken = tensor_difference(what, WHOLE, window[0], mine[layer][0], 1e-4)
        if broken is not None:
            return broken
    return None


CHECKS = (
    Check(Words("a tiny Qwen3.5's tokens and logits (chunks of 7, chunks of 2 beside a decode, speculative "
                "verify) equal the engine's",
                "小 Qwen3.5 的 token 与 logits（每块 7 个、解码旁每块 2 个、投机验证）与引擎一致"),
          same_as_engine),
    Check(Words("the outputs are the causal convolution of [window | x], then SiLU",
                "输出是对 [window | x] 的因果卷积再 SiLU"), outputs_are_the_convolution, "window"),
    Check(Words("the new window holds the last K - 1 inputs", "新窗口是最后 K - 1 个输入"),
          window_is_the_last_inputs, "window"),
    Check(Words("chunked prefill equals whole prefill: logits and the windows left in the cache",
                "分块 prefill 与整段 prefill 一致：logits 以及缓存里留下的窗口"), chunked_equals_whole,
          "what-to-notice"),
    Check(Words("outputs and windows equal the engine's for 1 to 9 new inputs, with and without out=",
                "1 到 9 个新输入、有无 out= 时，输出与窗口都与引擎一致"), calls_equal_engine, "window"),
)
