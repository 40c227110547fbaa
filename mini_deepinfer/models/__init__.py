"""The models the engine runs: Qwen3.5 (hybrid attention) and Qwen2, behind one ``forward(batch, cache)``.

Scope: building a model from its configuration (``build_model``) and re-exporting the configuration
classes and the batch type. Non-scope: reading checkpoints from disk (the loader).
"""

from __future__ import annotations

import torch

from mini_deepinfer.models.config import (
    SUPPORTED_ARCHITECTURES,
    ModelConfig,
    Qwen2Config,
    Qwen35Config,
    UnknownArchitectureError,
    config_from_hf_dict,
)
from mini_deepinfer.models.forward_batch import ForwardBatch
from mini_deepinfer.models.layers import CausalLM, merged_projections
from mini_deepinfer.models.qwen2 import Qwen2ForCausalLM
from mini_deepinfer.models.qwen3_5 import Qwen35ForCausalLM

__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "CausalLM",
    "ForwardBatch",
    "ModelConfig",
    "Qwen2Config",
    "Qwen2ForCausalLM",
    "Qwen35Config",
    "Qwen35ForCausalLM",
    "UnknownArchitectureError",
    "build_model",
    "config_from_hf_dict",
]


def build_model(
    config: ModelConfig,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    *,
    seed: int | None = None,
) -> CausalLM:
    """Create the model for ``config`` directly on ``device`` in ``dtype``, in eval mode without gradients.

    Args:
        config: A ``Qwen35Config`` or ``Qwen2Config``.
        dtype: Parameter dtype (float32 is the reference; bfloat16 and float16 run too).
        device: Target device.
        seed: ``None`` leaves the parameters uninitialised, to be filled by ``load_state_dict`` (fast for
            large models); an integer fills them randomly, like transformers' initialisation, from that seed.
    """
    model_class = Qwen35ForCausalLM if isinstance(config, Qwen35Config) else Qwen2ForCausalLM
    with torch.device("meta"):
        model = model_class(config)
    model = to_empty(model.to(dtype=dtype), device)
    for merged in merged_projections(model):
        merged.share_storage()  # before any weight is written: loading fills the merged matrices directly
    model.tie_weights()
    if seed is not None:
        model.init_random_weights(seed)
    return model.eval().requires_grad_(False)


def to_empty(model: CausalLM, device: torch.device | str) -> CausalLM:
    """``model.to_empty(device=device)``, through ``torch.empty`` instead of ``torch.empty_like``.

    For a tensor on the meta device, torch runs ``empty_like`` through a Python reference kernel whose first
    call imports sympy and torch's symbolic shapes: about 0.8 s of every command that builds a model.
    ``torch.empty`` of the same shape and dtype goes straight to the allocator. ``_apply`` is what
    ``Module.to_empty`` itself calls, with its own function.
    """
    return model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
