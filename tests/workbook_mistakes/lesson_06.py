"""Lesson 6 (``recurrent_delta_step``, ``GatedDeltaNet.split_heads``): mistakes a learner writing one step of
the gated delta rule and the head split would make."""

from __future__ import annotations

from . import mistake

MISTAKES = (
    mistake("the lesson's exercise: the prediction reads the state before its decay",
            ("delta = beta[..., None] * (v - decay * k_state)", "delta = beta[..., None] * (v - k_state)")),
    mistake("the output is read from the state before the correction (q^T S instead of q^T S_new)",
            ("out = torch.addcmul(decay * q_state, (q * k).sum(-1, keepdim=True), delta)",
             "out = decay * q_state")),
    mistake("the whole value is written, not the error of the prediction (no delta rule)",
            ("delta = beta[..., None] * (v - decay * k_state)", "delta = beta[..., None] * v")),
    mistake("the state is not decayed before the correction",
            ("state.mul_(decay[..., None]).addcmul_(", "state.addcmul_(")),
    mistake("the correction is written transposed: delta k^T instead of k delta^T",
            ("addcmul_(k[..., :, None], delta[..., None, :])",
             "addcmul_(delta[..., :, None], k[..., None, :])")),
    mistake("the decay is exp(-g) instead of exp(g) (g is already a log-decay <= 0)",
            ("decay = g.exp()[..., None]", "decay = (-g).exp()[..., None]")),
    mistake("the state is corrected into a new tensor: the state passed in is left as it was",
            ("state.mul_(decay[..., None]).addcmul_(", "state = (state * decay[..., None]).addcmul_(")),
    mistake("the query is not scaled by dk^-0.5", ("    qk[:, 0].mul_(self.k_head_dim**-0.5)\n", "")),
    mistake("key heads are tiled (repeat) instead of each serving its neighbouring value heads "
            "(repeat_interleave)",
            ("qk = qk.repeat_interleave(repeat, dim=2)", "qk = qk.repeat(1, 1, repeat, 1)")),
    mistake("q and k viewed as [tokens, heads, 2, dk]: each head's query and key from the wrong channels",
            ("qk.view(tokens, 2, self.num_k_heads, self.k_head_dim)",
             "qk.view(tokens, self.num_k_heads, 2, self.k_head_dim).transpose(1, 2)")),
)
