"""Lesson 1 (``commit_tokens``, ``Engine.commit_sampled``): mistakes a learner writing the commit makes."""

from __future__ import annotations

from . import mistake

STOP_IN_LOOP = """        req.output_token_ids.append(token)
        reason = stop_reason(req)
        if reason is not None:
            return tokens[: i + 1], tokens[i + 1 :], reason
    return list(tokens), [], None
"""

MISTAKES = (
    mistake("the stop is checked once, after the whole group: the tokens after an eos are committed too",
            (STOP_IN_LOOP, "        req.output_token_ids.append(token)\n"
                           "    return list(tokens), [], stop_reason(req)\n")),
    mistake("off by one: the token that stops the request is counted as discarded, yet it is in the output",
            ("return tokens[: i + 1], tokens[i + 1 :], reason", "return tokens[:i], tokens[i:], reason")),
    mistake("the stop is checked before the token is appended, so it acts one token late",
            ("        req.output_token_ids.append(token)\n        reason = stop_reason(req)\n",
             "        reason = stop_reason(req) if req.output_token_ids else None\n"
             "        req.output_token_ids.append(token)\n")),
    mistake("the kept tokens are appended to the output a second time (commit_tokens already did)",
            ("    if kept:\n        if req.first_token_at", "    req.output_token_ids.extend(kept)\n"
             "    if kept:\n        if req.first_token_at")),
    mistake("no commit group is recorded", ("        req.committed_groups.append(list(kept))\n", "")),
    mistake("the first token's time is overwritten at every commit",
            ("        if req.first_token_at is None:\n            req.first_token_at = time.perf_counter()\n",
             "        req.first_token_at = time.perf_counter()\n")),
    mistake("the commit is labelled with the round that reads it, not the round that sampled it",
            ("tokens=kept, round=round_id,", "tokens=kept, round=self.round_id,")),
    mistake("a request whose token stops it is never finished",
            ("    if reason is not None:\n        self.finish(req, reason)\n", "")),
    mistake("the delivery leaves out why the request stopped",
            ("return Delivery(req.request_id, tuple(kept), reason)",
             "return Delivery(req.request_id, tuple(kept), None)")),
    mistake("the tokens cut after a stop leave no discard event",
            ("    if dropped:\n        self.trace.emit(self.round_id, \"discard\", req.request_id, "
             "tokens=dropped, round=round_id,\n                        why=f\"after {reason.value}\")\n",
             "")),
)
