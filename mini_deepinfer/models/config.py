"""Model configurations read from a Hugging Face ``config.json`` dictionary.

Scope: the two architectures the engine runs, the Qwen3.5 text model (hybrid gated attention and Gated
DeltaNet) and Qwen2 (plain softmax attention), as frozen dataclasses; reading the real ``config.json``
layouts (Qwen3.5's multimodal file with the text model nested under ``text_config``, the flat
``qwen3_5_text`` file, and Qwen2's legacy or current rotary fields); the range of every field the models read,
checked in one place (:data:`FIELD_RANGES`, :func:`_check_fields`, :func:`_check_shapes`) so that a value out
of range is one line naming the field, not an error inside the first forward pass; derived quantities the
engine needs (layer indices per kind, parameter count).

Non-scope: reading files from disk, weights, tokenizers and generation settings (the loader and the text
module do those), and any rotary scaling other than the plain ``default`` type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"

QWEN3_5_ARCHITECTURES = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")
QWEN2_ARCHITECTURES = ("Qwen2ForCausalLM",)
SUPPORTED_ARCHITECTURES = QWEN3_5_ARCHITECTURES + QWEN2_ARCHITECTURES


class UnknownArchitectureError(ValueError):
    """The ``config.json`` names an architecture this engine does not implement."""


def _rope_settings(d: dict[str, Any], default_partial: float) -> tuple[float, float]:
    """Return ``(rope_theta, partial_rotary_factor)`` from current or legacy rotary fields.

    ``rope_parameters`` (current) wins over ``rope_scaling`` (legacy), which wins over top-level keys.
    """
    key = "rope_parameters" if d.get("rope_parameters") else "rope_scaling"
    params = _object(key, d.get(key) or {})
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"unsupported rope_type {rope_type!r}; only 'default' is implemented")
    theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
    partial = params.get("partial_rotary_factor", d.get("partial_rotary_factor", default_partial))
    return _number("rope_theta", theta), _number("partial_rotary_factor", partial)


def _object(name: str, value: Any) -> dict[str, Any]:
    """A nested ``config.json`` entry that must be an object (``rope_parameters``, ``text_config``)."""
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be an object, got {value!r}")
    return value


def _number(name: str, value: Any) -> float:
    """A number read before the dataclass checks its fields (so the message names the field)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def _positive_int(name: str, value: Any) -> int:
    """An integer >= 1 read before the dataclass checks its fields (a layer count, an interval)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _layer_kinds(layer_types: tuple[str, ...], kind: str) -> list[int]:
    return [i for i, t in enumerate(layer_types) if t == kind]


def _checkpoint_dtype(d: dict[str, Any]) -> str | None:
    value = d.get("dtype", d.get("torch_dtype"))
    return None if value is None else str(value)


@dataclass(frozen=True)
class Range:
    """Where a number read from ``config.json`` may lie, as a message says it and as a test of the value.

    Every test is written so that NaN fails it; the float ranges also refuse infinity.
    """

    words: str
    holds: Callable[[float], bool]


POSITIVE = Range("positive", lambda v: v > 0)
POSITIVE_FINITE = Range("positive and finite", lambda v: 0 < v < math.inf)
NON_NEGATIVE_FINITE = Range("finite and >= 0", lambda v: 0 <= v < math.inf)
FRACTION = Range("in (0, 1]", lambda v: 0 < v <= 1)
DERIVED_OR_POSITIVE = Range("positive (or 0: hidden_size / num_attention_heads)", lambda v: v >= 0)

FIELD_RANGES: dict[str, Range] = {
    "vocab_size": POSITIVE, "hidden_size": POSITIVE, "intermediate_size": POSITIVE,
    "num_hidden_layers": POSITIVE, "num_attention_heads": POSITIVE, "num_key_value_heads": POSITIVE,
    "head_dim": POSITIVE, "rms_norm_eps": POSITIVE_FINITE, "rope_theta": POSITIVE_FINITE,
    "partial_rotary_factor": FRACTION, "linear_conv_kernel_dim": POSITIVE, "linear_key_head_dim": POSITIVE,
    "linear_value_head_dim": POSITIVE, "linear_num_key_heads": POSITIVE, "linear_num_value_heads": POSITIVE,
    "max_position_embeddings": POSITIVE, "initializer_range": NON_NEGATIVE_FINITE,
}
"""The range of every number a model reads (both architectures), besides the relations between fields that
:func:`_check_shapes` checks. Qwen2's ``head_dim`` may also be 0 (derived; see ``Qwen2Config``)."""


def _check_fields(config: Any, ranges: dict[str, Range] = FIELD_RANGES) -> None:
    """Each field of a config has its annotated type, and each number lies in its range (``ranges``); one
    line naming the first field that does not.

    ``config.json`` is read as it is, so a field of the wrong type (``"hidden_size": "abc"``) must stop here,
    not deep inside ``torch.empty``, and so must a value the model cannot compute with.
    """
    for f in fields(config):
        value = getattr(config, f.name)
        if f.type == "bool" and not isinstance(value, bool):
            raise ValueError(f"{f.name} must be true or false, got {value!r}")
        if f.type in ("int", "float"):
            number = isinstance(value, int) if f.type == "int" else isinstance(value, (int, float))
            if isinstance(value, bool) or not number:
                kind = "an integer" if f.type == "int" else "a number"
                raise ValueError(f"{f.name} must be {kind}, got {value!r}")
            if not ranges[f.name].holds(value):
                raise ValueError(f"{f.name} must be {ranges[f.name].words}, got {value!r}")


def _check_eos(eos: Any, vocab_size: int) -> None:
    """``eos_token_id``: absent, or an id (or a list of ids) of the vocabulary."""
    ids = eos if isinstance(eos, tuple) else () if eos is None else (eos,)
    for token_id in ids:
        if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < vocab_size:
            raise ValueError(f"eos_token_id must be an id in 0..{vocab_size - 1} (vocab_size {vocab_size}) "
                             f"or a list of such ids, got {eos!r}")


def _check_shapes(config: Any) -> None:
    """The relations between fields that the layers rely on: heads grouped evenly, rotary dims even and at
    most the head dim, every layer of a known kind, stop ids inside the vocabulary."""
    if config.num_attention_heads % config.num_key_value_heads:
        raise ValueError(f"num_attention_heads ({config.num_attention_heads}) must be a multiple of "
                         f"num_key_value_heads ({config.num_key_value_heads})")
    rotary = config.rotary_dim
    if rotary < 2 or rotary % 2 or rotary > config.head_dim:
        factor = getattr(config, "partial_rotary_factor", None)
        source = f"head_dim {config.head_dim}" + (f" x partial_rotary_factor {factor}" if factor else "")
        raise ValueError(f"{source} gives {rotary} rotary dims; they must be even, at least 2 and at most "
                         "head_dim")
    for kind in config.layer_types:
        if kind not in (FULL_ATTENTION, LINEAR_ATTENTION):
            raise ValueError(f"layer_types holds {kind!r}; each entry must be {FULL_ATTENTION!r} or "
                             f"{LINEAR_ATTENTION!r}")
    _check_eos(config.eos_token_id, config.vocab_size)


def _known_fields(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names and v is not None}


@dataclass(frozen=True)
class Qwen35Config:
    """The Qwen3.5 text model. Defaults are those of transformers' ``Qwen3_5TextConfig``."""

    vocab_size: int = 248320
    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_hidden_layers: int = 32
    num_attention_heads: int = 16
    num_key_value_heads: int = 4
    head_dim: int = 256
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    attention_bias: bool = False
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    layer_types: tuple[str, ...] = ()
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    eos_token_id: int | tuple[int, ...] | None = None
    initializer_range: float = 0.02
    architecture: str = "Qwen3_5ForCausalLM"
    checkpoint_dtype: str | None = None

    def __post_init__(self) -> None:
        _check_fields(self)
        if not self.layer_types:
            object.__setattr__(self, "layer_types", _interval_layer_types(self.num_hidden_layers, 4))
        if len(self.layer_types) != self.num_hidden_layers:
            count, layers = len(self.layer_types), self.num_hidden_layers
            raise ValueError(f"layer_types has {count} entries but num_hidden_layers is {layers}")
        _check_shapes(self)
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(f"linear_num_value_heads ({self.linear_num_value_heads}) must be a multiple of "
                             f"linear_num_key_heads ({self.linear_num_key_heads})")

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> Qwen35Config:
        """Read a Qwen3.5 ``config.json``: multimodal (``text_config`` nested) or flat ``qwen3_5_text``.

        In the multimodal layout a top-level ``tie_word_embeddings`` wins over the nested one, as it does for
        the architecture the file names; a missing value falls back to the nested one, then to False.
        """
        text = dict(_object("text_config", d.get("text_config") or d))
        architectures = d.get("architectures") or []
        default_arch = "Qwen3_5ForConditionalGeneration" if "text_config" in d else "Qwen3_5ForCausalLM"
        if "text_config" in d and "tie_word_embeddings" in d:
            text["tie_word_embeddings"] = d["tie_word_embeddings"]
        theta, partial = _rope_settings(text, default_partial=0.25)
        layer_types = text.get("layer_types")
        if layer_types is None:
            interval = _positive_int("full_attention_interval", text.get("full_attention_interval", 4))
            layers = _positive_int("num_hidden_layers", text.get("num_hidden_layers", 32))
            layer_types = _interval_layer_types(layers, interval)
        elif not isinstance(layer_types, list):
            raise ValueError(f"layer_types must be a list, got {layer_types!r}")
        eos = text.get("eos_token_id", d.get("eos_token_id"))
        values = _known_fields(cls, text)
        values.update(
            rope_theta=theta,
            partial_rotary_factor=partial,
            layer_types=tuple(layer_types),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            architecture=architectures[0] if architectures else default_arch,
            checkpoint_dtype=_checkpoint_dtype(text) or _checkpoint_dtype(d),
        )
        if text.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {text['hidden_act']!r}; Qwen3.5 uses 'silu'")
        return cls(**values)

    @property
    def rotary_dim(self) -> int:
        """Leading dims of each attention head that are rotated (64 of 256 for the released models)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the causal convolution: the concatenated ``[q | k | v]`` projections."""
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def full_attention_layers(self) -> list[int]:
        return _layer_kinds(self.layer_types, FULL_ATTENTION)

    @property
    def linear_attention_layers(self) -> list[int]:
        return _layer_kinds(self.layer_types, LINEAR_ATTENTION)

    def num_parameters(self) -> int:
        """Parameter count computed from the shapes (a tied head is counted once)."""
        h, q_out = self.hidden_size, self.num_attention_heads * self.head_dim
        kv_out = self.num_key_value_heads * self.head_dim
        attn = h * 2 * q_out + 2 * h * kv_out + q_out * h + 2 * self.head_dim
        if self.attention_bias:
            attn += 2 * q_out + 2 * kv_out + h
        conv_dim, value_dim, hv = self.linear_conv_dim, self.linear_value_dim, self.linear_num_value_heads
        linear = h * conv_dim + h * value_dim + 2 * h * hv + conv_dim * self.linear_conv_kernel_dim
        linear += 2 * hv + self.linear_value_head_dim + value_dim * h
        per_layer = 3 * h * self.intermediate_size + 2 * h
        total = self.vocab_size * h * (1 if self.tie_word_embeddings else 2) + h
        total += self.num_hidden_layers * per_layer
        total += len(self.full_attention_layers) * attn + len(self.linear_attention_layers) * linear
        return total


@dataclass(frozen=True)
class Qwen2Config:
    """Qwen2 (e.g. DeepSeek-R1-Distill-Qwen-1.5B). Defaults are those of transformers' ``Qwen2Config``."""

    vocab_size: int = 151936
    hidden_size: int = 4096
    intermediate_size: int = 22016
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    head_dim: int = 0
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    eos_token_id: int | tuple[int, ...] | None = None
    initializer_range: float = 0.02
    architecture: str = "Qwen2ForCausalLM"
    checkpoint_dtype: str | None = None

    def __post_init__(self) -> None:
        _check_fields(self, {**FIELD_RANGES, "head_dim": DERIVED_OR_POSITIVE})
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if not self.head_dim:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be at most hidden_size "
                             f"({self.hidden_size}) when head_dim is not given")
        _check_shapes(self)

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> Qwen2Config:
        """Read a Qwen2 ``config.json`` with legacy ``rope_theta`` or current ``rope_parameters``."""
        if d.get("use_sliding_window"):
            raise ValueError("sliding-window attention (use_sliding_window=true) is not implemented")
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {d['hidden_act']!r}; Qwen2 uses 'silu'")
        theta, _ = _rope_settings(d, default_partial=1.0)
        architectures = d.get("architectures") or []
        eos = d.get("eos_token_id")
        values = _known_fields(cls, d)
        values.update(
            rope_theta=theta,
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            architecture=architectures[0] if architectures else "Qwen2ForCausalLM",
            checkpoint_dtype=_checkpoint_dtype(d),
        )
        values.setdefault("num_key_value_heads", values.get("num_attention_heads", 32))
        return cls(**values)

    @property
    def rotary_dim(self) -> int:
        return self.head_dim

    @property
    def layer_types(self) -> tuple[str, ...]:
        return (FULL_ATTENTION,) * self.num_hidden_layers

    @property
    def full_attention_layers(self) -> list[int]:
        return list(range(self.num_hidden_layers))

    @property
    def linear_attention_layers(self) -> list[int]:
        return []

    def num_parameters(self) -> int:
        """Parameter count computed from the shapes (a tied head is counted once)."""
        h, q_out = self.hidden_size, self.num_attention_heads * self.head_dim
        kv_out = self.num_key_value_heads * self.head_dim
        attn = (h + 1) * q_out + 2 * (h + 1) * kv_out + q_out * h
        per_layer = attn + 3 * h * self.intermediate_size + 2 * h
        total = self.vocab_size * h * (1 if self.tie_word_embeddings else 2) + h
        return total + self.num_hidden_layers * per_layer


ModelConfig = Qwen35Config | Qwen2Config


def _interval_layer_types(num_layers: int, interval: int) -> tuple[str, ...]:
    """Every ``interval``-th layer is full attention, the others linear (L, L, L, F for interval 4)."""
    return tuple(FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION for i in range(num_layers))


def config_from_hf_dict(d: dict[str, Any]) -> ModelConfig:
    """Pick the configuration class from ``model_type`` or ``architectures`` and read ``d`` with it.

    Raises:
        UnknownArchitectureError: the dictionary names neither Qwen3.5 nor Qwen2.
    """
    model_type = d.get("model_type")
    architectures = d.get("architectures") or []
    if model_type in ("qwen3_5", "qwen3_5_text") or any(a in QWEN3_5_ARCHITECTURES for a in architectures):
        return Qwen35Config.from_hf_dict(d)
    if model_type == "qwen2" or any(a in QWEN2_ARCHITECTURES for a in architectures):
        return Qwen2Config.from_hf_dict(d)
    got = architectures[0] if architectures else f"model_type {model_type!r}"
    raise UnknownArchitectureError(
        f"unsupported architecture {got}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
    )
