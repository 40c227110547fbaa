"""Lesson 13 (``rollback``, ``rewind``): mistakes a learner restoring both caches would make."""

from __future__ import annotations

from . import mistake

MISTAKES = (
    mistake("off by one: the last committed token is kept in the caches too (it is the next round's input)",
            ("    keep = req.prompt_len + len(req.output_token_ids) - 1\n",
             "    keep = req.prompt_len + len(req.output_token_ids)\n")),
    mistake("off by one in the cut: the request keeps the KV slot of the first rejected position",
            ("req.kv_slots[keep:], req.kv_slots[:keep]", "req.kv_slots[keep + 1:], req.kv_slots[:keep + 1]")),
    mistake("the rejected positions' KV slots are cut from the request but never given back to the pool",
            ("    self.kv_pool.free(freed)\n", "")),
    mistake("the computed length is not set back, so the next round starts after the rejected drafts",
            ("    req.num_computed = keep\n", "")),
    mistake("the target's state takes the snapshot one position too late (after the first rejected draft)",
            ("length - job.start - 1)", "length - job.start)")),
    mistake("the draft's cache is never rewound: it keeps the rejected drafts",
            ("    self.draft.rewind(job, length)\n", "")),
    mistake("the target's state is never restored: it keeps every verified position, rejected ones included",
            ("    if length < job.start + job.width + 1:\n", "    if False:\n")),
    mistake("snapshots are kept when every draft was accepted",
            ("    else:\n        self.cache.drop_snapshots(job.state_slot)\n", "")),
)
