"""Lesson 5 (``stage_round``): mistakes a learner laying a round out as tensors would make."""

from __future__ import annotations

from . import mistake

FRESH = ("    fresh = [s.state_slot for s in seqs if s.start == 0]  # their states are zeroed before the "
         "round\n")
PAD = """    if pad is not None:  # decodes only (none is fresh), then dummy rows
        seqs, logits_rows = _pad_decodes(seqs, pad)
"""

MISTAKES = (
    mistake("the lesson's exercise: no state slot is ever zeroed, so a reused slot carries an old state",
            ("fresh = [s.state_slot for s in seqs if s.start == 0]", "fresh = []")),
    mistake("positions count from 0 in every chunk instead of from the request's start",
            ("[p for s in seqs for p in range(s.start, s.context_len)]",
             "[p for s in seqs for p in range(len(s.token_ids))]")),
    mistake("slot_mapping takes the request's first slots instead of those of its new positions",
            ("s.kv_slots[s.start : s.context_len]]", "s.kv_slots[: len(s.token_ids)]]")),
    mistake("row offsets are the prefix sums themselves: each sequence's last row + 1, not its first row",
            ("row_offsets = [0, *accumulate(query_lens)][:-1]",
             "row_offsets = list(accumulate(query_lens))")),
    mistake("a prompt chunk reads only its own new slots, not its whole context",
            ("list(seqs[b].kv_slots[: seqs[b].context_len])",
             "list(seqs[b].kv_slots[seqs[b].start : seqs[b].context_len])")),
    mistake("every one-token sequence joins the decode group, verify rows and prefix saves included",
            ("if n == 1 and b not in snapshots and not seqs[b].saves]", "if n == 1]")),
    mistake("prefix saves keep absolute positions instead of positions within the chunk",
            ("(b, p - s.start, slot)", "(b, p, slot)")),
    mistake("fresh slots collected after padding: a graph round zeroes the dummy state slot",
            (FRESH + PAD, PAD + FRESH)),
    mistake("logits for every sequence's last row, not only for the rows the runner asks for (the samplers)",
            ('staging.add("logits_indices", list(logits_rows))',
             'staging.add("logits_indices", [o + n - 1 for o, n in zip(row_offsets, query_lens)])')),
    mistake("context_lens are the new tokens only (query_lens)",
            ("context_lens=[s.context_len for s in seqs]", "context_lens=query_lens")),
)
