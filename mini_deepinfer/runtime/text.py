"""The text layer: tokenizer, chat template and streaming detokenizer.

Scope:

- ``TextTokenizer`` wraps a Hugging Face ``tokenizers.Tokenizer`` read from ``tokenizer.json``
  (encode text to ids, decode ids to text).
- ``ChatTemplate`` renders the Jinja ``chat_template`` shipped in ``tokenizer_config.json`` (or in
  ``chat_template.jinja``) with jinja2, in a sandbox configured the way transformers configures it, so
  that the checkpoint's own template decides the prompt format; nothing is re-typed by hand.
- ``StreamDetokenizer`` turns token ids committed one group at a time into text pieces, never cutting a
  multi-byte character in half.
- ``load_text`` reads all of this, plus the stop ids, from a checkpoint folder.

Non-scope: training-time features of chat templates (assistant masks, ``continue_final_message``), tool
schemas generated from Python functions, and tokenizers stored in any format other than ``tokenizer.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from mini_deepinfer.models.loader import read_generation_config, read_json

REPLACEMENT_CHAR = "\ufffd"
# Template variables that a tokenizer_config.json may define and that chat templates read.
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


class TextError(ValueError):
    """A tokenizer or chat-template file is missing, corrupt, or cannot be rendered."""


class TextTokenizer:
    """Text to token ids and back, through a ``tokenizers.Tokenizer``.

    ``encode`` adds no special tokens of its own: a chat prompt already carries them, rendered by the
    chat template.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def from_file(cls, path: str | Path) -> TextTokenizer:
        """Read a ``tokenizer.json`` file.

        Raises:
            TextError: the file is missing or is not a valid ``tokenizer.json``.
        """
        path = Path(path)
        if not path.is_file():
            raise TextError(f"tokenizer file not found: {path}")
        try:
            return cls(Tokenizer.from_file(str(path)))
        except Exception as exc:  # tokenizers raises a bare Exception for every parse error
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise TextError(f"corrupt tokenizer file {path}: {first_line}") from exc

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce, added tokens included."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings in the text map to their ids."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; an incomplete UTF-8 sequence decodes to U+FFFD."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        """Id of one token string (e.g. ``"<|im_end|>"``), or None when the vocabulary lacks it."""
        return self.tokenizer.token_to_id(token)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kwargs: Any) -> str:
    # Jinja's own tojson escapes HTML characters; chat templates expect plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kwargs)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _template_environment() -> ImmutableSandboxedEnvironment:
    """A sandbox with the settings and globals that Hugging Face chat templates are written for."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A checkpoint's Jinja chat template, rendered to a prompt string."""

    def __init__(self, source: str, special_tokens: Mapping[str, str | None] | None = None) -> None:
        """Compile ``source``.

        Args:
            source: the Jinja text of the template.
            special_tokens: ``bos_token``, ``eos_token``, ... as the template should see them.

        Raises:
            TextError: the template does not compile.
        """
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        try:
            self._template = _template_environment().from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as exc:
            raise TextError(f"chat template syntax error at line {exc.lineno}: {exc.message}") from exc

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        enable_thinking: bool = False,
        **extra: Any,
    ) -> str:
        """Render a conversation, e.g. ``[{"role": "user", "content": "你好"}]``, to the prompt text.

        Args:
            messages: dicts with at least ``role`` and ``content``.
            add_generation_prompt: end with the opening of an assistant turn.
            enable_thinking: passed to the template; Qwen3.5 0.8B/2B templates open a ``<think>`` block
                when true and emit an empty one when false.
            **extra: further template variables (``tools``, ``documents``, ...).

        Raises:
            TextError: a message is not a dict with a role, or the template raised an exception.
        """
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping) or "role" not in message:
                raise TextError(f"message {index} must be a dict with a 'role' key, got {message!r}")
        variables = {**self.special_tokens, **extra}
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                enable_thinking=enable_thinking,
                **variables,
            )
        except jinja2.exceptions.TemplateError as exc:
            raise TextError(f"chat template error: {exc}") from exc


# --8<-- [start:stream]
class StreamDetokenizer:
    """Turns token ids, committed a few at a time, into the text they add.

    Invariant: the concatenation of every string returned by ``push`` and ``finish`` equals
    ``tokenizer.decode(all_ids)``.

    A byte-level BPE token may end in the middle of a multi-byte character (one Chinese character is three
    UTF-8 bytes, an emoji four). Decoding such a prefix yields U+FFFD at the end, so text ending in U+FFFD is
    held back until a later token completes the character. Each step decodes only a short window: the ids
    since the last emitted piece, plus the ids of that piece as left context (some decoders treat the
    first token of a sequence differently, so a token is never decoded without its predecessor).
    """

    def __init__(self, tokenizer: TextTokenizer, skip_special_tokens: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._context_start = 0  # first id of the window: the ids of the last emitted piece
        self._read_start = 0  # ids before this index are already part of the emitted text

    def _decode(self, start: int, stop: int | None = None) -> str:
        return self.tokenizer.decode(self.ids[start:stop], self.skip_special_tokens)

    def _emit(self, hold_incomplete: bool) -> str:
        context = self._decode(self._context_start, self._read_start)
        window = self._decode(self._context_start)
        if len(window) <= len(context) or (hold_incomplete and window.endswith(REPLACEMENT_CHAR)):
            return ""
        self._context_start, self._read_start = self._read_start, len(self.ids)
        return window[len(context) :]

    def push(self, ids: Sequence[int]) -> str:
        """Add committed ids; return the newly completed text (possibly empty)."""
        self.ids.extend(int(i) for i in ids)
        return self._emit(hold_incomplete=True)

    def finish(self) -> str:
        """Return whatever is still held back (an incomplete character decodes to U+FFFD)."""
        return self._emit(hold_incomplete=False)
# --8<-- [end:stream]


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json stores it: a string or ``{"content": ...}``."""
    if isinstance(value, Mapping):
        return value.get("content")
    return value if isinstance(value, str) else None


def _chat_template_source(folder: Path, tokenizer_config: Mapping[str, Any]) -> str | None:
    """The template text from ``tokenizer_config.json`` or, failing that, ``chat_template.jinja``."""
    source = tokenizer_config.get("chat_template")
    if isinstance(source, list):  # a list of named templates: take the default one
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, Mapping)}
        source = named.get("default")
    if isinstance(source, str):
        return source
    jinja_file = folder / "chat_template.jinja"
    return jinja_file.read_text(encoding="utf-8") if jinja_file.is_file() else None


def _stop_ids(folder: Path, tokenizer: TextTokenizer, special_tokens: Mapping[str, str | None]) -> list[int]:
    """Stop ids: ``generation_config.json``'s eos list (or config.json's), then the tokenizer's eos token.

    The tokenizer's eos token (``<|im_end|>`` for Qwen3.5) ends an assistant turn; adding it keeps a
    checkpoint without ``generation_config.json`` from generating past the end of its answer.
    """
    try:
        eos_ids = list(read_generation_config(folder)["eos_token_id"])
    except ValueError as exc:
        raise TextError(str(exc)) from exc
    eos_text = special_tokens.get("eos_token")
    eos_id = tokenizer.token_to_id(eos_text) if eos_text else None
    if eos_id is not None and eos_id not in eos_ids:
        eos_ids.append(eos_id)
    return eos_ids


def load_text(folder: str | Path) -> tuple[TextTokenizer, ChatTemplate | None, list[int]]:
    """Read the tokenizer, the chat template (None when the checkpoint has none) and the stop ids.

    Raises:
        TextError: the folder or its ``tokenizer.json`` is missing, or a file is corrupt.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise TextError(f"checkpoint folder not found: {folder}")
    config_path = folder / "tokenizer_config.json"
    tokenizer_config = read_json(config_path, TextError) if config_path.is_file() else {}
    special_tokens = {key: _token_text(tokenizer_config.get(key)) for key in SPECIAL_TOKEN_KEYS}
    source = _chat_template_source(folder, tokenizer_config)
    template = ChatTemplate(source, special_tokens) if source is not None else None
    tokenizer = TextTokenizer.from_file(folder / "tokenizer.json")
    return tokenizer, template, _stop_ids(folder, tokenizer, special_tokens)
