"""Speed paths that pay off only on a CPU: a weight-on-the-left ``Linear`` and a multiply-add convolution.

Scope: ``Linear`` (``nn.Linear`` with the CPU GEMM for a few rows) and ``tap_sum`` (the convolution's
multiply-adds over time-major rows). Both give their plain form's result up to float rounding
(``tests/test_kernels.py``).

Non-scope: accelerators (every path here falls back to the plain PyTorch call there, or is not used).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SKINNY_ROWS = range(4, 33)
"""Row counts (decode batches) for which ``Linear`` puts the weight on the left on CPU."""
SKINNY_MIN_INPUT = 512
"""...and the smallest input width for which it does."""


# --8<-- [start:linear]
class Linear(nn.Linear):
    """``nn.Linear`` that computes a few rows on CPU as ``(W @ x^T)^T`` instead of ``x @ W^T``.

    The products and sums are the same (only their order differs, so results agree to float rounding). For
    4 to 32 rows and inputs at least 512 wide (every projection of the 0.8B and 2B shapes), CPU GEMM with the
    large weight as the left operand is faster than ``F.linear``: the batch-8 "every linear layer once" rows
    of ``snippets/bench/cpu-qwen3.5-0.8b.md`` time this class against transformers' ``nn.Linear``. Narrow
    inputs (the ``tiny`` preset) keep ``F.linear``: there the product is small and the transposing copy of
    the output is what costs. One row, long prefills and accelerators keep ``F.linear`` too.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
# --8<-- [end:linear]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear``, or ``(W @ x^T)^T`` for the skinny CPU shapes described in ``Linear``."""
    skinny = x.dim() == 2 and x.shape[0] in SKINNY_ROWS and weight.shape[1] >= SKINNY_MIN_INPUT
    if x.device.type != "cpu" or not skinny:
        return F.linear(x, weight, bias)
    out = torch.mm(weight, x.t())
    if bias is not None:
        out += bias[:, None]
    return out.t().contiguous()


def tap_sum(rows: torch.Tensor, taps: torch.Tensor, out: torch.Tensor) -> None:
    """``out[:, t] = sum_j rows[:, t + j] * taps[:, j]`` for the ``out.shape[1]`` outputs, in float32.

    With K = 4 taps per channel, K multiply-adds over time-major ``[B, L, C]`` rows beat ``F.conv1d`` on CPU,
    which has a fixed cost per call and works channel-major (two transposing copies of the inputs).
    """
    count = out.shape[1]
    torch.mul(rows[:, :count], taps[:, 0], out=out)
    for j in range(1, taps.shape[-1]):
        out.addcmul_(rows[:, j : j + count], taps[:, j])
