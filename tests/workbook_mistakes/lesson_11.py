"""Lesson 11 (``Engine.commit_round``): mistakes a learner writing what follows a read makes."""

from __future__ import annotations

from . import mistake

STALE = ("            if req.finished:  # it stopped in an earlier round (or was cancelled): this work is "
         "stale\n"
         "                self.trace.emit(self.round_id, \"discard\", req.request_id, tokens=tokens,\n"
         "                                round=plan.round_id, why=f\"already finished: "
         "{req.finish_reason.value}\")\n"
         "            else:\n"
         "                deliveries.append(self.commit_sampled(plan.round_id, seq, result))\n")
COMMIT = "                deliveries.append(self.commit_sampled(plan.round_id, seq, result))\n"
ROUND_DONE = "        req.rounds_in_flight -= 1\n"
RELEASE = "        self.release_if_idle(req)\n"
SAMPLE_DONE = "            req.samples_in_flight -= 1\n"

MISTAKES = (
    mistake("the token of a request that already finished is committed anyway",
            (STALE, COMMIT.replace("                ", "            "))),
    mistake("the stale token is dropped without a discard event",
            (STALE, "            if not req.finished:\n" + COMMIT)),
    mistake("only a round that samples counts as read: a prompt chunk without a token stays in flight",
            (ROUND_DONE, ""), (SAMPLE_DONE, SAMPLE_DONE + "    " + ROUND_DONE)),
    mistake("the slots are given back only after a commit, never after a discard",
            (RELEASE, ""), (COMMIT, COMMIT + "                self.release_if_idle(req)\n")),
    mistake("the release is tried before the round is counted as read",
            (RELEASE, ""), (ROUND_DONE, RELEASE + ROUND_DONE)),
    mistake("the sample in flight is never counted as read", (SAMPLE_DONE, "")),
    mistake("the prompt blocks a chunk computed are never indexed",
            ("        self.index_prompt(req, seq)\n", "")),
    mistake("the discard is labelled with the round that reads it, not the round that computed it",
            ("round=plan.round_id, why=", "why=")),
    mistake("the commit is made, but what it delivered is not handed back",
            ("deliveries.append(self.commit_sampled(plan.round_id, seq, result))",
             "self.commit_sampled(plan.round_id, seq, result)")),
    mistake("the commit is labelled with the round that reads it",
            ("self.commit_sampled(plan.round_id,", "self.commit_sampled(self.round_id,")),
)
