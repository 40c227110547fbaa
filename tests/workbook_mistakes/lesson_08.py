"""Lesson 8 (``_distribution``): mistakes a learner filtering a row by temperature, top-k and top-p would
make."""

from __future__ import annotations

from . import mistake

MISTAKES = (
    mistake("the temperature multiplies the logits instead of dividing them",
            ("(work - work.max()) / params.temperature", "(work - work.max()) * params.temperature")),
    mistake("divided before the maximum is subtracted: a tiny temperature overflows to inf",
            ("(work - work.max()) / params.temperature", "work / params.temperature")),
    mistake("top-p counts each token's own probability: the token that crosses top_p is dropped",
            ("mass_before = torch.cumsum(probs, dim=0) - probs", "mass_before = torch.cumsum(probs, dim=0)")),
    mistake("the kept tokens are not renormalised after the top-p cut",
            ("        probs = probs / probs.sum()\n", "")),
    mistake("softmax over the whole vocabulary, so top-p reads the mass before top-k renormalised it",
            ("probs = torch.softmax(values, dim=0)", "probs = torch.softmax(scaled, dim=0)[ids]")),
    mistake("the row is filtered in its own dtype: a bfloat16 row loses its small probabilities",
            ("work = row.to(_working_dtype(row))", "work = row")),
    mistake("top-p keeps the tokens after the cut instead of those before it",
            ("torch.where(mass_before < params.top_p, probs, torch.zeros_like(probs))",
             "torch.where(mass_before >= params.top_p, probs, torch.zeros_like(probs))")),
)
