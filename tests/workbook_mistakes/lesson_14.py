"""Lesson 14 (``verify_sampled``): mistakes a learner writing probabilistic acceptance would make."""

from __future__ import annotations

from . import mistake

RESAMPLE = "        return accepted + [draw(rest if float(rest.sum()) > 0 else p[i], generator)]\n"

MISTAKES = (
    mistake("after a rejection the token is drawn from p, not from the residual (the lesson's exercise)",
            ("        rest = residual(p[i], q[i])\n", "        rest = p[i]\n")),
    mistake("the residual the wrong way round: max(0, q - p)",
            ("        rest = residual(p[i], q[i])\n", "        rest = residual(q[i], p[i])\n")),
    mistake("the acceptance ratio upside down: q(d) / p(d)",
            ("float(p[i, token] / q[i, token])", "float(q[i, token] / p[i, token])")),
    mistake("accepted when u is above the acceptance probability",
            ("        accept = u < min(1.0, ratio)\n", "        accept = u > min(1.0, ratio)\n")),
    mistake("the round goes on after a rejection: the resampled token is appended and the next draft tested",
            (RESAMPLE, RESAMPLE.replace("return accepted + [", "accepted.append(").replace(")]", "))"))),
    mistake("the bonus token drawn from the last draft's row of p instead of the row after it",
            ("    return accepted + [draw(p[len(drafts)], generator)]",
             "    return accepted + [draw(p[len(drafts) - 1], generator)]")),
    mistake("one uniform for the whole round instead of one per tested draft",
            ("    for i, token in enumerate(drafts):\n        u, ratio = uniform(generator), ",
             "    u = uniform(generator)\n    for i, token in enumerate(drafts):\n        ratio = ")),
    mistake("no bonus token when every draft is accepted",
            ("    return accepted + [draw(p[len(drafts)], generator)]", "    return accepted")),
)
