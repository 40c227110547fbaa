"""Lesson 15 (``PrefixCache.match``, ``PrefixCache.insert``): mistakes a learner writing the prefix cache's
index would make."""

from __future__ import annotations

from . import mistake

MISTAKES = (
    mistake("match reuses a block end whose state was never saved (usable is not asked)",
            ("        if self.usable(block):\n            best = Hit(pos, tuple(path))\n",
             "        best = Hit(pos, tuple(path))\n")),
    mistake("match reuses the whole prompt, leaving no token to compute for the first output's logits",
            ("    while pos + self.block < len(tokens):", "    while pos + self.block <= len(tokens):"),
            ("len(tokens) - pos - 1)", "len(tokens) - pos)")),
    mistake("match never looks for the tail of a cached prompt, only whole blocks",
            ("    for size in range(min(self.block - 1, len(tokens) - pos - 1), 0, -1):",
             "    for size in range(0):")),
    mistake("match tries the shortest tail first, so a longer cached tail is missed",
            ("range(min(self.block - 1, len(tokens) - pos - 1), 0, -1)",
             "range(1, min(self.block - 1, len(tokens) - pos - 1) + 1)")),
    mistake("match looks every block up under the root, ignoring the prefix before it",
            ("        block = self.blocks.get((parent, tuple(tokens[pos : pos + self.block])))",
             "        block = self.blocks.get((ROOT, tuple(tokens[pos : pos + self.block])))")),
    mistake("insert indexes blocks whose tokens are not computed yet (read back) in a chunked prompt",
            ("        if end > computed:\n            break\n", "")),
    mistake("insert keeps its own snapshot of a block the index already has, and never gives it back",
            ("        elif snapshot is not None:\n            self.snapshot_pool.free([snapshot])", "")),
    mistake("insert replaces the snapshot of a block already indexed, losing the old slot",
            ("        elif snapshot is not None and block.snapshot is None:",
             "        elif snapshot is not None:")),
    mistake("insert does not mark the blocks it finds as recently used, so eviction takes the wrong one",
            ("        block.last_used = self._clock\n", "")),
)
