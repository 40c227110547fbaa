"""Shared test fixtures: small random checkpoints written once per test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A random ``tiny`` Qwen3.5 checkpoint in the released layout, with the real Qwen3.5 tokenizer."""
    import torch

    from mini_deepinfer.random_checkpoint import write_random_checkpoint

    folder = tmp_path_factory.mktemp("weights") / "tiny"
    write_random_checkpoint(folder, "tiny", seed=0, dtype=torch.float32)
    return folder
