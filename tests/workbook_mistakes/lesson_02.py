"""Lesson 2 (``stop_reason``, ``Engine.release_if_idle``): mistakes a learner writing the stop and the release
makes."""

from __future__ import annotations

from . import mistake

EOS = """    if not params.ignore_eos and req.output_token_ids[-1] in params.eos_token_ids:
        return FinishReason.EOS
"""
LENGTH = """    if len(req.output_token_ids) >= params.max_new_tokens:
        return FinishReason.LENGTH
"""

MISTAKES = (
    mistake("length is checked before eos, so a last token that is also eos reports length",
            (EOS + LENGTH, LENGTH + EOS)),
    mistake("ignore_eos is ignored", ("if not params.ignore_eos and req.output_token_ids[-1]",
                                      "if req.output_token_ids[-1]")),
    mistake("off by one: the output may grow one token past max_new_tokens",
            (">= params.max_new_tokens", "> params.max_new_tokens")),
    mistake("the eos test looks at the first output token instead of the one just committed",
            ("req.output_token_ids[-1] in params", "req.output_token_ids[0] in params")),
    mistake("the slots come back at once, even while a launched round still uses them",
            ("if not req.finished or req.rounds_in_flight > 0 or req.slots_released:",
             "if not req.finished or req.slots_released:")),
    mistake("a request that has not finished gives its slots back as soon as no round uses it",
            ("if not req.finished or req.rounds_in_flight > 0 or req.slots_released:",
             "if req.rounds_in_flight > 0 or req.slots_released:")),
    mistake("the state slot is never given back",
            ("    if state_slot is not None:\n        self.state_pool.free([state_slot])\n", "")),
    mistake("the request keeps its list of KV slots after giving them back",
            ("    slots, req.kv_slots = req.kv_slots, []\n", "    slots = req.kv_slots\n")),
    mistake("the runner is never told to forget the request",
            ("    self.runner.release(req.request_id)\n", "")),
    mistake("the prefix cache keeps the request's hold on the blocks it reused",
            ("    if self.prefix_cache is not None:\n        self.prefix_cache.release(req.request_id)\n",
             "")),
)
