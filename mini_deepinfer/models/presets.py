"""Model shapes by name: the released Qwen3.5 sizes, and small ones for demos, tests and benchmarks.

Scope: the shape of every preset the commands accept (layer count and widths, not weights):

* ``tiny``: the Qwen3.5 structure (three Gated DeltaNet layers, then one gated attention layer; twice as many
  value heads as key heads in the linear layers) at toy width; the demos and most tests;
* ``small``: eight layers of the same pattern, wide enough for the round timings of ``bench.rounds``;
* ``qwen3.5-0.8b`` and ``qwen3.5-2b``: the text models of the released checkpoints;
* ``qwen2-1.5b``: DeepSeek-R1-Distill-Qwen-1.5B.

:func:`qwen3_5_config` turns a Qwen3.5 preset into a ``Qwen35Config`` for a model built in code; the
checkpoint writer (``tools.checkpoints``) turns the same numbers into a released-style ``config.json``.
Non-scope: weights (random ones come from ``build_model(..., seed=)`` or the checkpoint writer).
"""

from __future__ import annotations

from typing import Any

from mini_deepinfer.models.config import Qwen35Config

QWEN3_5_VOCAB = 248320
"""The vocabulary of the released Qwen3.5 tokenizer."""

# --8<-- [start:shapes]
QWEN3_5_SHAPES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
                 linear_key_head_dim=16, linear_value_head_dim=16),
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=32, linear_num_key_heads=4, linear_num_value_heads=8,
                  linear_key_head_dim=32, linear_value_head_dim=32),
    "qwen3.5-0.8b": dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                         linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128),
    "qwen3.5-2b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=24, num_attention_heads=8,
                       num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                       linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128),
}
"""Qwen3.5 shapes; every fourth layer is full attention, the others Gated DeltaNet."""
# --8<-- [end:shapes]

QWEN2_SHAPES: dict[str, dict[str, int]] = {
    "qwen2-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2),
}
"""Qwen2 shapes (the released config, flat)."""

DEMO_VOCAB = {"tiny": 256, "small": 4096}
"""The vocabulary a model built in code gets by default: small, since its prompts are token ids."""

PRESET_NAMES = tuple(QWEN3_5_SHAPES) + tuple(QWEN2_SHAPES)


def qwen3_5_config(preset: str, *, vocab_size: int | None = None, initializer_range: float = 0.02,
                   **overrides: Any) -> Qwen35Config:
    """The ``Qwen35Config`` of a Qwen3.5 preset, for a model built in code.

    Args:
        preset: a name of :data:`QWEN3_5_SHAPES`.
        vocab_size: defaults to :data:`DEMO_VOCAB` for the small presets, the released vocabulary otherwise.
        initializer_range: standard deviation of random weights (``build_model(..., seed=)``).
        **overrides: any other ``Qwen35Config`` field (e.g. ``num_hidden_layers`` with ``layer_types``).
    """
    if preset not in QWEN3_5_SHAPES:
        raise ValueError(f"unknown Qwen3.5 preset {preset!r}: use {', '.join(QWEN3_5_SHAPES)}")
    shape = dict(QWEN3_5_SHAPES[preset])
    shape.update(vocab_size=vocab_size or DEMO_VOCAB.get(preset, QWEN3_5_VOCAB),
                 initializer_range=initializer_range)
    shape.update(overrides)
    return Qwen35Config(**shape)
