"""Lesson 4 (``BatchEngine._chunk_size``, ``Engine.plan_prefill``): mistakes a learner writing chunked prefill
would make."""

from __future__ import annotations

from . import mistake

MISTAKES = (
    mistake("the cached prefix is forgotten: a waiting request is sized as if it started at position 0",
            ("        start = self.prefix_hit(req).length  # where it will start: after its cached prompt "
             "tokens\n", "")),
    mistake("off by one: a prompt that exactly fills the budget waits (without chunking, for ever)",
            ("    if remaining <= budget:\n", "    if remaining < budget:\n")),
    mistake("the prompt is cut even without chunked prefill",
            ("    return budget if self.chunked_prefill else 0\n", "    return budget\n")),
    mistake("what the request has computed is not subtracted: the whole prompt is counted every round",
            ("    remaining = req.prompt_len - start\n", "    remaining = req.prompt_len\n")),
    mistake("max_num_seqs is not checked before admitting a waiting request",
            ("        if len(self.running) >= self.max_num_seqs or not self.can_admit(req):\n",
             "        if not self.can_admit(req):\n")),
    mistake("every chunk samples, not only the one that ends the prompt",
            ("sample=start + n == req.prompt_len)", "sample=True)")),
    mistake("every chunk is cut from the start of the prompt, not from num_computed",
            ("    tokens = req.prompt_token_ids[start : start + n]\n",
             "    tokens = req.prompt_token_ids[:n]\n")),
    mistake("with a prefix cache the chunk gets no restore and no saves (prefix_states is not called)",
            ("    return seq if self.prefix_cache is None else self.prefix_states(req, seq)\n",
             "    return seq\n")),
)
