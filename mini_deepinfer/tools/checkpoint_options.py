"""What a random checkpoint can be written as: presets, dtype names, the shard size.

Scope: the names ``python -m mini_deepinfer.random_checkpoint`` offers as choices, kept apart from the writer
(``tools.checkpoints``) so that the command checks its flags before torch is imported. Standard library only.
Non-scope: the presets' shapes and the writing itself (``tools.checkpoints``).
"""

from __future__ import annotations

__all__ = ["CHECKPOINT_DTYPE_NAMES", "CHECKPOINT_PRESETS", "DEFAULT_MAX_SHARD_SIZE"]

CHECKPOINT_PRESETS = ("tiny", "qwen3.5-0.8b", "qwen3.5-2b", "qwen2-1.5b")
"""The presets a checkpoint can be written for (``small`` exists only as a model built in code)."""

CHECKPOINT_DTYPE_NAMES = ("bfloat16", "float32")
"""The weight dtypes a checkpoint can be written in (``tools.checkpoints.CHECKPOINT_DTYPES`` maps them)."""

DEFAULT_MAX_SHARD_SIZE = 2 * 10**9
"""The largest weight file before the weights are split into shards, in bytes."""
