"""Lesson 12 (``verify_greedy``): mistakes a learner writing the greedy verify would make."""

from __future__ import annotations

from . import mistake

MISTAKES = (
    mistake("every draft accepted unchecked: the mismatch never stops the loop (the lesson's exercise)",
            ("        if draft != target:\n            break\n", "")),
    mistake("a mismatch skips that draft instead of ending the accepted prefix",
            ("            break\n", "            continue\n")),
    mistake("each draft compared with the target's choice one position later",
            ("zip(drafts, target_argmax)", "zip(drafts, target_argmax[1:])")),
    mistake("no bonus token: when every draft matched, the group ends with the last draft",
            ("    return accepted + [int(target_argmax[len(accepted)])]",
             "    if len(accepted) == len(drafts):\n        return accepted\n"
             "    return accepted + [int(target_argmax[len(accepted)])]")),
    mistake("the target's token taken at the last position, whatever was accepted",
            ("[int(target_argmax[len(accepted)])]", "[int(target_argmax[-1])]")),
    mistake("the rejected draft delivered in place of the target's correction",
            ("            break\n        accepted.append(draft)\n",
             "            accepted.append(draft)\n            break\n        accepted.append(draft)\n")),
)
