"""The text layer: tokenizer, chat template and streaming detokenizer.

Scope:

- ``TextTokenizer`` wraps a Hugging Face ``tokenizers.Tokenizer`` read from ``tokenizer.json``
  (encode text to ids, decode ids to text). The file's ids are checked when it is read (each vocabulary id
  belongs to one token; an added token keeps its own id) and, by ``check_ids_below``, against the model's
  ``vocab_size`` before any weight loads: a collision would change what the model reads without a word, and
  an id past the vocabulary would fail inside the first forward pass.
- ``ChatTemplate`` renders the Jinja ``chat_template`` shipped in ``tokenizer_config.json`` (or in
  ``chat_template.jinja``) with jinja2, in a sandbox configured the way transformers configures it, so
  that the checkpoint's own template decides the prompt format; nothing is re-typed by hand. A template is
  code from the checkpoint: rendering stops after ``RENDER_SECONDS`` or ``RENDER_MAX_CHARS`` characters, and
  every way it can fail is one ``TextError`` line naming the template.
- ``encode_user_prompt`` encodes a one-message conversation so that the user's text stays text: a special
  token's string typed into it (``<|im_end|>``) is never the control token.
- ``StreamDetokenizer`` turns token ids committed one group at a time into text pieces, never cutting a
  multi-byte character in half.
- ``load_text`` reads all of this, plus the stop ids, from a checkpoint folder.

Non-scope: training-time features of chat templates (assistant masks, ``continue_final_message``), tool
schemas generated from Python functions, and tokenizers stored in any format other than ``tokenizer.json``.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from mini_deepinfer.models.loader import checkpoint_folder, read_generation_config, read_json

REPLACEMENT_CHAR = "\ufffd"
RENDER_SECONDS = 5.0
"""A chat template that renders longer than this is stopped (a real one takes milliseconds)."""
RENDER_MAX_CHARS = 8 * 2**20
"""A rendered prompt longer than this many characters is refused (8 Mi, far beyond any context window)."""
PARSED_TOKENIZERS = 4
"""How many parsed tokenizers a process keeps, by the SHA-256 of their ``tokenizer.json`` (``from_file``)."""
# Template variables that a tokenizer_config.json may define and that chat templates read.
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


class TextError(ValueError):
    """A tokenizer or chat-template file is missing, corrupt, or cannot be rendered."""


class TextTokenizer:
    """Text to token ids and back, through a ``tokenizers.Tokenizer``.

    ``encode`` adds no special tokens of its own: a chat prompt already carries them, rendered by the
    chat template.
    """

    def __init__(self, tokenizer: Tokenizer, path: Path | None = None,
                 largest: LargestId | None = None) -> None:
        self.tokenizer, self.path = tokenizer, path
        self.largest = largest or _largest_in(tokenizer)

    @classmethod
    def from_file(cls, path: str | Path) -> TextTokenizer:
        """Read a ``tokenizer.json`` file and check its ids (:func:`check_token_ids`).

        Raises:
            TextError: the file is missing, is not a valid ``tokenizer.json``, or gives one id to two tokens.
        """
        path = Path(path)
        if not path.is_file():
            raise TextError(f"tokenizer file not found: {path}")
        try:
            tokenizer, largest = _parse_once(path.read_bytes())
        except TokenIdError as exc:
            raise TextError(f"{path}: {exc}") from None
        except Exception as exc:  # tokenizers raises a bare Exception for every parse error
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise TextError(f"corrupt tokenizer file {path}: {first_line}") from exc
        return cls(tokenizer, path, largest)

    def check_ids_below(self, vocab_size: int, model: str) -> None:
        """Refuse a tokenizer that can produce an id the model has no embedding row for (``vocab_size`` from
        ``model``'s ``config.json``). Counting tokens is not enough: ids may have gaps."""
        if self.largest.token_id >= vocab_size:
            largest = self.largest
            raise TextError(f"{self.path or 'tokenizer'}: {largest.kind} {largest.token!r} has id "
                            f"{largest.token_id}, but {model} has vocab_size {vocab_size}: the model has no "
                            "embedding row for it")

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce, added tokens included."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``. Special-token strings in it map to their ids; with ``special_tokens=False``
        they are split into ordinary tokens like any other text (transformers' ``split_special_tokens``)."""
        self.tokenizer.encode_special_tokens = not special_tokens
        try:
            return self.tokenizer.encode(text, add_special_tokens=False).ids
        finally:
            self.tokenizer.encode_special_tokens = False

    def makes_special_token(self, text: str, start: int, stop: int) -> bool:
        """Whether encoding ``text`` turns characters of ``text[start:stop]`` into a special token."""
        special = {i for i, token in self.tokenizer.get_added_tokens_decoder().items() if token.special}
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        spans = zip(encoding.ids, encoding.offsets)
        return any(i in special and a < stop and b > start for i, (a, b) in spans)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; an incomplete UTF-8 sequence decodes to U+FFFD."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        """Id of one token string (e.g. ``"<|im_end|>"``), or None when the vocabulary lacks it."""
        return self.tokenizer.token_to_id(token)


class TokenIdError(ValueError):
    """``tokenizer.json`` gives an id to two tokens, or an id that is not a non-negative integer."""


@dataclass(frozen=True)
class LargestId:
    """The token with the largest id a tokenizer produces, and where it is listed (for messages)."""

    token_id: int
    token: str
    kind: str = "token"


def _largest_in(tokenizer: Tokenizer) -> LargestId:
    """The largest id a parsed tokenizer produces (when no file was read)."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    token = max(vocab, key=vocab.__getitem__, default="")
    return LargestId(vocab.get(token, -1), token)


def _vocabulary(data: Any) -> dict[str, Any]:
    """The model's token -> id table as the file lists it (BPE, WordPiece and WordLevel store a JSON object;
    Unigram a list whose order gives the ids)."""
    model = data.get("model") if isinstance(data, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        return vocab
    if isinstance(vocab, list):
        return {str(entry[0]) if isinstance(entry, list) and entry else str(entry): i
                for i, entry in reversed(list(enumerate(vocab)))}
    return {}


def _check_id(kind: str, token: Any, token_id: Any) -> None:
    if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
        raise TokenIdError(f"{kind} {token!r} has id {token_id!r}, not an integer >= 0")


def check_token_ids(data: dict[str, Any], tokenizer: Tokenizer) -> LargestId:
    """Check the ids a parsed ``tokenizer.json`` (``data``) gives; return the largest.

    The ``tokenizers`` library accepts two vocabulary entries with one id (both strings then encode to it, and
    the id decodes to one of them), and it gives an added token its own id whatever the file says. Either
    way the ids the model receives are not the ones the file describes, and nothing says so. Refused here:
    an id that is not an integer >= 0, two vocabulary entries with one id, an added token listed with the id
    of another string (vocabulary entry or added token), and an added token the library reads as another id.

    Raises:
        TokenIdError: one line naming the first offending entry, in file order.
    """
    owner = _vocabulary_owners(_vocabulary(data))  # id -> token
    kind = dict.fromkeys(owner, "vocabulary entry")
    largest = LargestId(max(owner), owner[max(owner)], "vocabulary entry") if owner else LargestId(-1, "")
    for entry in data.get("added_tokens") or []:
        token, token_id = entry.get("content"), entry.get("id")
        _check_id("added token", token, token_id)
        if owner.get(token_id, token) != token:
            raise TokenIdError(f"added token {token!r} has id {token_id}, the id of {kind[token_id]} "
                               f"{owner[token_id]!r}")
        if tokenizer.token_to_id(token) != token_id:
            raise TokenIdError(f"added token {token!r} has id {token_id} in the file, but the tokenizer "
                               f"reads it as id {tokenizer.token_to_id(token)}")
        owner[token_id], kind[token_id] = token, "added token"
        if token_id > largest.token_id:
            largest = LargestId(token_id, token, "added token")
    return largest


def _vocabulary_owners(vocab: dict[str, Any]) -> dict[int, str]:
    """Id -> token of a vocabulary whose ids are integers >= 0, each given once.

    Checked in bulk first (a real vocabulary has a quarter of a million entries); only a vocabulary that fails
    is walked entry by entry, to name the first entry at fault.
    """
    ids = list(vocab.values())
    valid = all(type(token_id) is int for token_id in ids) and (not ids or min(ids) >= 0)
    owners = dict(zip(ids, vocab)) if valid else {}
    if valid and len(owners) == len(vocab):
        return owners
    owners = {}
    for token, token_id in vocab.items():
        _check_id("vocabulary entry", token, token_id)
        if token_id in owners:
            raise TokenIdError(f"vocabulary entry {token!r} has id {token_id}, the id of vocabulary entry "
                               f"{owners[token_id]!r}")
        owners[token_id] = token
    return owners


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _members_until(text: str, pos: int, stop: str) -> tuple[dict[str, Any], int | None]:
    """The members of the JSON object at ``text[pos]`` that come before the member ``stop``, and where
    ``stop``'s value starts (None when the object has no such member)."""
    members: dict[str, Any] = {}
    pos = _SPACE.match(text, pos + 1).end()
    while text[pos] == '"':  # a key, after "{" or ","
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _SPACE.match(text, _SPACE.match(text, pos).end() + 1).end()  # past the colon
        if key == stop:
            return members, pos
        members[key], pos = _DECODER.raw_decode(text, pos)
        pos = _SPACE.match(text, pos).end()
        if text[pos] == ",":
            pos = _SPACE.match(text, pos + 1).end()
    return members, None


def _ids_part(text: str) -> dict[str, Any]:
    """``added_tokens`` and ``model`` up to its ``vocab`` from a ``tokenizer.json`` the library has parsed.

    ``tokenizers`` writes ``added_tokens`` before ``model``, and ``vocab`` before ``merges`` (two thirds of a
    Qwen file): stopping after the vocabulary saves decoding the merges. A file with ``model`` first is
    decoded whole; members of ``model`` before its ``vocab`` are decoded on the way.
    """
    top, at = _members_until(text, _SPACE.match(text).end(), "model")
    if at is None or "added_tokens" not in top or text[at] != "{":
        return json.loads(text)
    model, at = _members_until(text, at, "vocab")
    if at is None:
        return json.loads(text)
    model["vocab"] = _DECODER.raw_decode(text, at)[0]
    return {"added_tokens": top["added_tokens"], "model": model}


_parsed: OrderedDict[str, tuple[Tokenizer, LargestId]] = OrderedDict()


def _parse_once(data: bytes) -> tuple[Tokenizer, LargestId]:
    """The ``tokenizers.Tokenizer`` of a ``tokenizer.json``'s bytes and its largest id, parsed and checked
    (:func:`check_token_ids`) once per process for equal bytes.

    Parsing Qwen3.5's (248k tokens, 500k merges) takes about 0.8 s; a draft model usually ships the target's
    file byte for byte, and a process that loads a checkpoint again reads it again. The last
    ``PARSED_TOKENIZERS`` are kept, by SHA-256. Sharing is safe because nothing here changes a parsed
    tokenizer for longer than one call (``TextTokenizer.encode`` sets ``encode_special_tokens`` back).
    """
    digest = hashlib.sha256(data).hexdigest()
    if digest not in _parsed:
        text = data.decode("utf-8")
        tokenizer = Tokenizer.from_str(text)
        _parsed[digest] = tokenizer, check_token_ids(_ids_part(text), tokenizer)
        if len(_parsed) > PARSED_TOKENIZERS:
            _parsed.popitem(last=False)
    _parsed.move_to_end(digest)
    return _parsed[digest]


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kwargs: Any) -> str:
    # Jinja's own tojson escapes HTML characters; chat templates expect plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kwargs)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox, with ``*`` and ``**`` refused before they build a value too large to render (a string or
    list repeated beyond ``RENDER_MAX_CHARS`` items, a power of more than a million bits: Python computes both
    in C, where no time limit reaches) and ``+`` refused after it built one."""

    intercepted_binops = frozenset(["*", "**", "+"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and _is_int(left) and _is_int(right) and abs(left) > 1:
            if right * abs(left).bit_length() > 2**20:
                raise OverflowError(f"{left} ** {right} has more than a million bits")
        if operator == "*" and _repeated_size(left, right) > RENDER_MAX_CHARS:
            raise OverflowError(f"a repetition of {_repeated_size(left, right)} items is too large")
        return _bounded(super().call_binop(context, operator, left, right))


def _bounded(value: Any) -> Any:
    """``value``, unless it is a string or list longer than ``RENDER_MAX_CHARS``."""
    if isinstance(value, (str, list, tuple)) and len(value) > RENDER_MAX_CHARS:
        raise OverflowError(f"a value of {len(value)} items passed the limit of {RENDER_MAX_CHARS}")
    return value


def _bound_concatenation(template: jinja2.Template) -> None:
    """Make the template's ``~`` (compiled to calls of ``str_join`` and ``markup_join`` in the template's
    module) refuse a result longer than ``RENDER_MAX_CHARS``: doubling a string in a loop would otherwise
    fill memory long before the time limit."""
    namespace = template.root_render_func.__globals__
    for name in ("str_join", "markup_join"):
        join = namespace[name]
        namespace[name] = lambda seq, join=join: _bounded(join(seq))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _repeated_size(left: Any, right: Any) -> int:
    """Items in ``left * right`` when one side is a sequence and the other an integer (else 0)."""
    for seq, count in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and _is_int(count):
            return len(seq) * count
    return 0


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Stop the template's own code once ``seconds`` have passed.

    Only frames of the compiled template (file name ``<template>``) are traced, line by line, so an empty
    loop nested in an empty loop is stopped too; the tracer the process had (a debugger, coverage) is put
    back afterwards.
    """
    deadline = time.monotonic() + seconds

    def in_template(frame: Any, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise TimeoutError(f"rendering took longer than {seconds:g} s")
        return in_template

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        return in_template if frame.f_code.co_filename == "<template>" else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(previous)


def _template_environment() -> ImmutableSandboxedEnvironment:
    """A sandbox with the settings and globals that Hugging Face chat templates are written for."""
    env = _BoundedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A checkpoint's Jinja chat template, rendered to a prompt string."""

    def __init__(self, source: str, special_tokens: Mapping[str, str | None] | None = None,
                 name: str = "chat template") -> None:
        """Compile ``source``.

        Args:
            source: the Jinja text of the template.
            special_tokens: ``bos_token``, ``eos_token``, ... as the template should see them.
            name: where the template comes from, for error messages (``load_text`` names the file).

        Raises:
            TextError: the template does not compile.
        """
        self.source, self.name = source, name
        self.special_tokens = dict(special_tokens or {})
        try:
            self._template = _template_environment().from_string(source)
            _bound_concatenation(self._template)
        except jinja2.exceptions.TemplateSyntaxError as exc:
            raise TextError(f"{name}: syntax error at line {exc.lineno}: {exc.message}") from exc

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
            TextError: a message is not a dict with a role, or the template failed in any way: it raised,
                ran longer than ``RENDER_SECONDS`` or wrote more than ``RENDER_MAX_CHARS`` characters.
        """
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping) or "role" not in message:
                raise TextError(f"message {index} must be a dict with a 'role' key, got {message!r}")
        variables = {**self.special_tokens, **extra, "messages": [dict(m) for m in messages],
                     "add_generation_prompt": add_generation_prompt, "enable_thinking": enable_thinking}
        try:
            with _time_limit(RENDER_SECONDS):
                return self._bounded_render(variables)
        except Exception as exc:  # the template is code from the checkpoint: any failure is the template's
            raise TextError(f"{self.name} failed: {_one_line(exc)}") from None

    def _bounded_render(self, variables: dict[str, Any]) -> str:
        """Render piece by piece, stopping as soon as the text passes ``RENDER_MAX_CHARS``."""
        pieces, size = [], 0
        for piece in self._template.generate(**variables):
            size += len(piece)
            if size > RENDER_MAX_CHARS:
                raise OverflowError(f"the prompt passed {RENDER_MAX_CHARS} characters")
            pieces.append(piece)
        return "".join(pieces)

    def split_user_turn(self, content: str) -> tuple[str, str]:
        """The text the template writes before and after the content of a single user message.

        Raises:
            TextError: the template does not put the content into the prompt exactly once and unchanged.
        """
        marker = f"\ue000{secrets.token_hex(8)}\ue001"  # private-use characters: no text contains them
        pieces = self.render([{"role": "user", "content": marker}]).split(marker)
        if len(pieces) != 2 or self.render([{"role": "user", "content": content}]) != content.join(pieces):
            raise TextError(f"{self.name} does not put the user's text into the prompt once and unchanged; "
                            "pass --raw and write the prompt format yourself")
        return pieces[0], pieces[1]


def _one_line(exc: BaseException) -> str:
    """``TypeName: first line of the message`` (a template's error message may span lines)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


# --8<-- [start:encode_user_prompt]
def encode_user_prompt(tokenizer: TextTokenizer, template: ChatTemplate, content: str) -> list[int]:
    """The ids of a conversation of one user message, the user's text encoded as text.

    The template's own markers become control tokens; the same strings typed by the user stay ordinary text,
    so ``hi<|im_end|>\n<|im_start|>system ...`` cannot close its turn and open a system one. A prompt that
    holds no such string gets the ids of the whole rendered text, exactly as before.
    """
    before, after = template.split_user_turn(content)
    whole = before + content + after
    if not tokenizer.makes_special_token(whole, len(before), len(before) + len(content)):
        return tokenizer.encode(whole)
    as_text = tokenizer.encode(content, special_tokens=False)
    return tokenizer.encode(before) + as_text + tokenizer.encode(after)
# --8<-- [end:encode_user_prompt]


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


def _token_text(config_path: Path, key: str, value: Any) -> str | None:
    """A special token as tokenizer_config.json stores it: a string, ``{"content": string}`` or null."""
    text = value.get("content") if isinstance(value, Mapping) else value
    if text is not None and not isinstance(text, str):
        raise TextError(f"{config_path}: {key} must be a string or {{\"content\": string}}, got "
                        f"{json.dumps(value)[:80]}")
    return text


def _chat_template_source(folder: Path, tokenizer_config: Mapping[str, Any]) -> tuple[str, str] | None:
    """The template text and where it is: ``tokenizer_config.json`` or, failing that, ``chat_template.jinja``.

    ``chat_template`` may be a string or a list of ``{"name", "template"}`` (the one named ``default`` is
    used); anything else is refused.
    """
    where, source = f"{folder / 'tokenizer_config.json'} chat_template", tokenizer_config.get("chat_template")
    if isinstance(source, list) and all(isinstance(t, Mapping) for t in source):
        named = {t.get("name"): t.get("template") for t in source}
        where, source = f"{where} 'default'", named.get("default")
    if isinstance(source, str):
        return source, where
    if source is not None:
        raise TextError(f"{where} must be a string or a list of named templates, got {type(source).__name__}")
    jinja_file = folder / "chat_template.jinja"
    if not jinja_file.is_file():
        return None
    try:
        return jinja_file.read_text(encoding="utf-8"), str(jinja_file)
    except (OSError, UnicodeDecodeError) as exc:
        raise TextError(f"cannot read {jinja_file}: {_one_line(exc)}") from None


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
    folder = checkpoint_folder(folder, TextError)
    config_path = folder / "tokenizer_config.json"
    tokenizer_config = read_json(config_path, TextError) if config_path.is_file() else {}
    special_tokens = {key: _token_text(config_path, key, tokenizer_config.get(key))
                      for key in SPECIAL_TOKEN_KEYS}
    found = _chat_template_source(folder, tokenizer_config)
    template = ChatTemplate(found[0], special_tokens, name=found[1]) if found is not None else None
    tokenizer = TextTokenizer.from_file(folder / "tokenizer.json")
    return tokenizer, template, _stop_ids(folder, tokenizer, special_tokens)
