"""Root-mean-square and L2 normalisation in three or four kernels instead of five to ten.

Scope: ``rms_norm`` (``x_hat * scale`` with a float32 scale, for RMSNorm, zero-centred RMSNorm and the
gated norm) and ``l2_normalize``, each beside its textbook form (``*_ref``). The fast forms read the sum of
squares from one ``torch.linalg.vector_norm`` in float32 (no float32 copy of a bfloat16 input) and fold the
epsilon in with ``torch.hypot``: ``sqrt(sum + n eps) = hypot(||x||, sqrt(n eps))``. They agree with the
references up to float rounding (``tests/test_kernels.py``).

Non-scope: the modules that own the weights (``layers.py``, ``qwen3_5.py``); where a scale comes from.
"""

from __future__ import annotations

import torch

L2NORM_EPS = 1e-6


def rms_scale(weight: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
    """The float32 scale ``rms_norm`` takes for weight ``w``: ``(offset + w) * sqrt(dim)``, computed once.

    ``offset`` is 1 for the zero-centred norm (``x_hat * (1 + w)``), 0 for the plain one. The ``sqrt(dim)``
    turns the norm of ``x`` into its root mean square.
    """
    return (weight.float() + offset) * weight.shape[-1] ** 0.5


def rms_norm(
    x: torch.Tensor, scale: torch.Tensor, eps: float, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * scale / sqrt(dim)`` over the last dim, in float32, cast to ``dtype``.

    ``scale`` comes from ``rms_scale``; ``dtype`` defaults to the input's.
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
    factor = scale / torch.hypot(norm, torch.tensor((x.shape[-1] * eps) ** 0.5))
    # One kernel multiplies in float32 and rounds once into the output's dtype (no separate cast).
    return torch.mul(x, factor, out=torch.empty_like(x, dtype=dtype or x.dtype))


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0) -> torch.Tensor:
    """Textbook RMSNorm: normalise in float32, scale by ``offset + w`` in float32, cast to the input dtype."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (normed * (offset + weight.float())).to(x.dtype)


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + 1e-6)`` over the last dim, in float32 (the epsilon sits inside the sum)."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
    return x / torch.hypot(norm, torch.tensor(L2NORM_EPS**0.5))


def l2_normalize_ref(x: torch.Tensor) -> torch.Tensor:
    """Textbook L2 normalisation: ``x * rsqrt(sum(x^2) + 1e-6)`` in float32."""
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + L2NORM_EPS)
