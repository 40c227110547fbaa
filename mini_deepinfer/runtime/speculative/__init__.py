"""Two-model speculative decoding: a draft model proposes, the target verifies, both caches follow the commit.

``verify.py`` decides which drafts a round accepts, ``draft.py`` runs the draft model, ``runner.py`` runs the
target and rewinds both models after a rejection.
"""

from __future__ import annotations

from mini_deepinfer.runtime.speculative.draft import ModelDraft, check_same_vocabulary
from mini_deepinfer.runtime.speculative.runner import SpeculativeRunner
from mini_deepinfer.runtime.speculative.verify import AcceptStep, residual, verify_greedy, verify_sampled

__all__ = [
    "AcceptStep", "ModelDraft", "SpeculativeRunner", "check_same_vocabulary", "residual", "verify_greedy",
    "verify_sampled",
]
