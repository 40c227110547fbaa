"""Lesson 3 (``BatchEngine.schedule``): mistakes a learner writing the token-budget schedule would make."""

from __future__ import annotations

from . import mistake

DECODE_LOOP = """    for req in [r for r in self.running if r.prefill_done]:
        if budget == 0:
            break
        seqs.append(self.plan_decode(req, budget))
        budget -= seqs[-1].num_tokens  # the positions this decode computes
"""

MISTAKES = (
    mistake("prompts first: the decode loop moved after the prompt loop",
            (DECODE_LOOP, ""),
            ("    return RoundPlan(", DECODE_LOOP.replace("r.prefill_done]", "r.prefill_done and "
             "r.request_id not in {s.request_id for s in seqs}]") + "    return RoundPlan(")),
    mistake("the budget is not spent on prompt chunks", ("        budget -= chunk\n", "")),
    mistake("decodes do not count against the budget",
            ("        budget -= seqs[-1].num_tokens  # the positions this decode computes\n", "")),
    mistake("a request that cannot start is skipped, so later prompts overtake it",
            ("            break  # first come", "            continue  # first come")),
    mistake("no admission: a waiting request is planned without its state slot and never runs",
            ("        if req.status is RequestStatus.WAITING:\n            self.admit(req)\n", "")),
    mistake("off by one: the decode loop stops while one token of budget is left",
            ("        if budget == 0:\n            break\n        seqs.append",
             "        if budget <= 1:\n            break\n        seqs.append")),
)
