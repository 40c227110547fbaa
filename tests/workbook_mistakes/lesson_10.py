"""Lesson 10 (``Engine.step``): mistakes a learner writing one round, synchronous or cross-round, makes."""

from __future__ import annotations

from . import mistake

LAUNCH = "        launched = (plan, self.launch(plan)) if plan.seqs else None\n"
READ_FIRST = """            previous = self.pipeline.swap(None)
            delivered = []
            if previous is not None:
                self.trace.emit(self.round_id, "read", None, round=previous[0].round_id)
                delivered = self.commit_round(previous[0], self.runner.read(previous[1]))
            self.pipeline.swap((plan, self.launch(plan)) if plan.seqs else None)
            return delivered
"""

MISTAKES = (
    mistake("cross-round reads the round it has just launched, never the one launched before",
            ("        else:\n            to_read = self.pipeline.swap(launched)",
             "        else:\n            to_read = launched")),
    mistake("cross-round reads and commits the previous round first, then launches this one",
            (LAUNCH, "        if self.pipeline is not None:\n" + READ_FIRST + LAUNCH)),
    mistake("an empty plan is launched too", ("launched = (plan, self.launch(plan)) if plan.seqs else None",
                                               "launched = (plan, self.launch(plan))")),
    mistake("the read is recorded as the round of this step, not the round it read",
            ('"read", None, round=done_plan.round_id)', '"read", None, round=self.round_id)')),
    mistake("the round read is committed with the plan just made",
            ("return self.commit_round(done_plan, result)", "return self.commit_round(plan, result)")),
    mistake("a runner failure is swallowed: nothing in flight is abandoned",
            ("        return self.abandon_in_flight(exc)\n", "        return []\n")),
    mistake("what the round committed is not returned",
            ("    return self.commit_round(done_plan, result)\n",
             "    self.commit_round(done_plan, result)\n    return []\n")),
    mistake("the round number does not move on", ("    self.round_id += 1\n", "")),
)
