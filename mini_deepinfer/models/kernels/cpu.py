"""Speed paths that pay off only on a CPU: a ``Linear`` for a few rows and a multiply-add convolution.

Scope: ``Linear`` (``nn.Linear`` with the CPU GEMM for a few rows: the weight on the left, or, in float32 on
AVX-512 CPUs, the weight in blocks of rows; one bfloat16 row as a matrix-vector product) and ``tap_sum`` (the
convolution's multiply-adds over time-major rows). Each gives its plain form's result up to float rounding
(``tests/test_kernels.py``). Which form runs depends only on the shapes, the dtype and the vector instructions
torch found on the CPU, never on a timing, so a machine gives the same tokens every run.

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
BLOCKED_ROWS = range(4, 9)
"""Row counts for which a float32 ``Linear`` on an AVX-512 CPU takes ``blocked`` instead."""
BLOCK = 32
"""Weight rows per block in ``blocked``."""
MV_DTYPES = (torch.bfloat16,)
"""Dtypes in which ``Linear`` computes one row as ``torch.mv(W, x)`` on CPU."""
AVX512 = torch.backends.cpu.get_cpu_capability() == "AVX512"
"""Whether torch runs its AVX-512 kernels on this CPU (read once, at import)."""


# --8<-- [start:linear]
class Linear(nn.Linear):
    """``nn.Linear`` that computes a few rows on CPU as ``(W @ x^T)^T`` instead of ``x @ W^T``.

    The products and sums are the same (only their order differs, so results agree to float rounding). For
    4 to 32 rows and inputs at least 512 wide (every projection of the 0.8B and 2B shapes), CPU GEMM with the
    large weight as the left operand is faster than ``F.linear``: the batch-8 "every linear layer once" rows
    of ``snippets/bench/cpu-qwen3.5-0.8b.md`` time this class against transformers' ``nn.Linear``. Narrow
    inputs (the ``tiny`` preset) keep ``F.linear``: there the product is small and the transposing copy of
    the output is what costs. One row, long prefills and accelerators keep ``F.linear`` too.

    On a CPU with AVX-512 (measured on an Intel Xeon with AMX), float32 products of 4 to 8 rows go through
    ``blocked`` instead: there ``F.linear`` reads the weight far slower than it does for one row, and
    ``blocked`` nearer that speed (the "every linear layer once" rows of
    ``snippets/bench/cpu-qwen3.5-0.8b-intel-xeon.md``, this class against transformers' ``nn.Linear`` at
    batch 1, 4 and 8).

    One row in bfloat16 (a decode step at batch 1, the head of a prefill) goes through ``torch.mv``: the same
    products and sums (``tests/test_kernels.py`` compares them), but ``F.linear`` takes a slower kernel for
    it on the Intel Xeon with AMX (``linear_floor`` at batch 1 of the ``ours-bfloat16`` and
    ``transformers-bfloat16`` variants in ``snippets/bench/cpu-qwen3.5-0.8b-intel-xeon.json``). Float32 keeps
    ``F.linear``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
# --8<-- [end:linear]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear``, or on CPU the forms described in ``Linear``: ``mv`` for one bfloat16 row, ``(W @ x^T)^T``
    or ``blocked`` for the skinny shapes."""
    if x.device.type != "cpu":
        return F.linear(x, weight, bias)
    if x.dim() == 2 and x.shape[0] == 1 and weight.dtype in MV_DTYPES:
        out = torch.mv(weight, x[0])[None]
        return out if bias is None else out.add_(bias)
    skinny = x.dim() == 2 and x.shape[0] in SKINNY_ROWS and weight.shape[1] >= SKINNY_MIN_INPUT
    if not skinny:
        return F.linear(x, weight, bias)
    rows, out_features = x.shape[0], weight.shape[0]
    if AVX512 and weight.dtype == torch.float32 and rows in BLOCKED_ROWS and out_features % BLOCK == 0:
        out = blocked(x, weight)
        return out if bias is None else out.add_(bias)
    out = torch.mm(weight, x.t())
    if bias is not None:
        out += bias[:, None]
    return out.t().contiguous()


def blocked(x: torch.Tensor, weight: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """``x @ weight^T`` as one batched product over blocks of ``block`` weight rows: ``[rows, out]``.

    The weight ``[out, in]`` is viewed (not copied) as ``out / block`` matrices of ``[block, in]``: many small
    products, each of which the CPU library runs at nearly the speed of one row (the figures in ``Linear``).
    The result, ``[blocks, rows, block]``, is put in row order by one copy (``rows x out`` numbers, against
    ``out x in`` of weight read).
    """
    out_features, in_features = weight.shape
    per_block = torch.matmul(x, weight.view(out_features // block, block, in_features).transpose(1, 2))
    return per_block.transpose(0, 1).reshape(x.shape[0], out_features)


def tap_sum(rows: torch.Tensor, taps: torch.Tensor, out: torch.Tensor) -> None:
    """``out[:, t] = sum_j rows[:, t + j] * taps[:, j]`` for the ``out.shape[1]`` outputs, in float32.

    With K = 4 taps per channel, K multiply-adds over time-major ``[B, L, C]`` rows beat ``F.conv1d`` on CPU,
    which has a fixed cost per call and works channel-major (two transposing copies of the inputs). Each
    multiply-add reads one tap of every channel: a column of ``[C, K]`` taps, every K-th number, which
    makes the CPU kernel take its slow strided path. So the taps are first laid out tap-major (``[K, C]``,
    C x K numbers copied) and each multiply-add reads one contiguous row of them.
    """
    count, by_tap = out.shape[1], taps.t().contiguous()
    torch.mul(rows[:, :count], by_tap[0], out=out)
    for j in range(1, by_tap.shape[0]):
        out.addcmul_(rows[:, j : j + count], by_tap[j])
