"""Lesson 7 (``causal_conv_with_window``): mistakes a learner continuing the convolution window would make."""

from __future__ import annotations

from . import mistake

REST = "    if length > history:\n        tap_sum(x, taps, out=y[:, history:])\n"

MISTAKES = (
    mistake("the saved window is ignored: every chunk starts from zeros, as a fresh prompt would",
            ("torch.cat([window.transpose(1, 2), x[:, :history]], dim=1)",
             "torch.cat([torch.zeros_like(window.transpose(1, 2)), x[:, :history]], dim=1)")),
    mistake("a chunk shorter than the window keeps the old window instead of shifting the new inputs in",
            ("else strip[:, length:]", "else strip[:, :history]")),
    mistake("no SiLU after the convolution", ("return F.silu(y, inplace=True), ", "return y, ")),
    mistake("SiLU into a new tensor: the caller's out= keeps the values before the activation",
            ("return F.silu(y, inplace=True), ", "return F.silu(y), ")),
    mistake("out= ignored: the outputs go to a new tensor the layer never reads",
            ("if out is None else out", "")),
    mistake("only the first K - 1 outputs (those that read the window) are computed", (REST, "")),
    mistake("the new window is the last K - 1 inputs but one (off by one)",
            ("new_window = x[:, length - history :] if length >= history",
             "new_window = x[:, length - history - 1 : length - 1] if length > history")),
)
