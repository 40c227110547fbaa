"""The speculative runner: the draft proposes, one target forward verifies, both caches follow the commit.

Scope: :class:`SpeculativeRunner`, a :class:`~mini_deepinfer.runtime.model_runner.ModelRunner` whose round
runs the draft for every speculative decode, then ONE target forward over the whole round (prefill chunks,
plain decodes and each speculative ``[t0, d1 .. dk]``) that keeps a snapshot of the target's state after each
verified position (``SeqInput.snapshot``), then verifies. After the engine has committed the group it calls
:meth:`SpeculativeRunner.rewind`, the one place where both models go back to the committed length.

The engine's part (``core/speculative.py``): a speculative decode reserves KV slots for ``1 + k`` positions
and costs ``1 + k`` tokens of the round budget; the accepted group is committed one token at a time; then
``SpeculativeEngine.rollback`` rewinds the runner and returns the KV slots of rejected positions.

Non-scope: cross-round execution (the verify needs the sampled tokens on the CPU before the next round is
planned, so a speculative engine is synchronous), choosing the width from acceptance rates, and a draft with
another vocabulary (refused by ``build_engine``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from mini_deepinfer.core.plan import RoundPlan
from mini_deepinfer.core.speculative import SpeculativeResult, SpeculativeSeqPlan, Verified
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.runtime.model_runner import ModelRunner
from mini_deepinfer.runtime.sampling import (
    check_finite,
    flag_non_finite,
    greedy_tokens,
    probabilities,
    sample,
)
from mini_deepinfer.runtime.speculative.draft import DraftJob, DraftSettle, ModelDraft, Proposal, draft_keeps
from mini_deepinfer.runtime.speculative.verify import AcceptStep, verify_greedy, verify_sampled

__all__ = ["RoundDetail", "SpeculativeLaunch", "SpeculativeRunner"]


@dataclass
class SpeculativeLaunch:
    """A speculative round: verification needs the tokens on the CPU, so it is complete at launch."""

    round_id: int
    tokens: dict[str, list[int]]
    verified: dict[str, Verified]


@dataclass(kw_only=True)
class RoundDetail:
    """Everything one speculative decode did in a round (the demo prints it; tests inspect it)."""

    request_id: str
    start: int
    proposal: Proposal
    target_inputs: list[int]
    target_choice: list[int]  # the target's argmax at each verified position (greedy requests)
    accepted: int
    group: list[int]
    draft: DraftSettle
    steps: list[AcceptStep] = field(default_factory=list)  # sampled requests: each acceptance test


class SpeculativeRunner(ModelRunner):
    """A ``ModelRunner`` that drafts and verifies every decode that the plan gives a ``spec_width``.

    Build it with :func:`~mini_deepinfer.runtime.factory.build_engine`, which gives both caches the same
    capacities (the engine's slot numbers index both) and checks that the vocabularies agree.

    Args:
        model: the target model.
        cache: the target's cache.
        draft: the draft model and its cache.
    """

    def __init__(self, model: CausalLM, cache: HybridCache, draft: ModelDraft) -> None:
        super().__init__(model, cache)
        self.draft = draft
        self.jobs: dict[str, DraftJob] = {}  # the last round's speculative decodes, until rewound or released
        self.details: dict[str, RoundDetail] = {}  # what they did (the demo prints it; tests inspect it)
        self.stats = {"target_forwards": 0, "proposed": 0, "accepted": 0, "verify_rounds": 0}

    # --8<-- [start:launch]
    def launch(self, plan: RoundPlan) -> SpeculativeLaunch:
        """Draft, then one target forward for the whole round, then verify; ``rewind`` restores the caches."""
        self._drop_stale_snapshots()
        speculative = [s for s in plan.seqs if isinstance(s, SpeculativeSeqPlan) and s.spec_width]
        jobs = {s.request_id: self._job(s) for s in speculative}
        self.jobs = dict(jobs)
        proposals = self.draft.propose(list(jobs.values()))
        logits, row_of = self._target_forward(plan, jobs, proposals)
        tokens = self._sample_plain(plan, jobs, logits, row_of)
        self.details = {}
        for rid, job in jobs.items():
            tokens[rid] = self._verify(plan.round_id, job, proposals[rid], logits[row_of[rid]])
        verified = {rid: self._verified(d) for rid, d in self.details.items()}
        return SpeculativeLaunch(plan.round_id, tokens, verified)
    # --8<-- [end:launch]

    def _target_forward(self, plan: RoundPlan, jobs: dict[str, DraftJob],
                        proposals: dict[str, Proposal]) -> tuple[torch.Tensor, dict[str, slice]]:
        """One target forward over the whole round, each speculative decode as ``[t0, d1 .. dk]`` with a
        snapshot of the state after each position; the logits and each request's rows in them."""
        expanded = RoundPlan(plan.round_id, tuple(
            replace(s, token_ids=s.token_ids + tuple(proposals[s.request_id].drafts), spec_width=0)
            if s.request_id in jobs else s for s in plan.seqs))
        rows, row_of = self._logit_rows(expanded, jobs)
        seqs = [replace(seq, snapshot=plan_seq.request_id in jobs)
                for seq, plan_seq in zip(self.sequences(expanded), expanded.seqs)]
        logits = self.model(self.stage(seqs, rows).batch, self.cache)
        self.stats["target_forwards"] += 1
        self.rounds_by_mode["eager"] += 1
        return logits, row_of

    def _drop_stale_snapshots(self) -> None:
        """``rewind`` and ``release`` consume every snapshot: only a round that failed half-way leaves any."""
        self.cache.snapshots.clear()
        self.draft.cache.snapshots.clear()

    def read(self, handle: SpeculativeLaunch) -> SpeculativeResult:
        return SpeculativeResult(handle.round_id, dict(handle.tokens), verified=dict(handle.verified))

    # --8<-- [start:rewind]
    def rewind(self, request_id: str, length: int) -> None:
        """Set both models back to the request's committed prefix (positions ``0 .. length - 1``).

        The target computed positions n..n+k this round and kept a snapshot of its state after each; its state
        slot takes the snapshot after position ``length - 1`` (none is needed when every draft was accepted).
        The draft's cache follows in :meth:`ModelDraft.rewind`.
        """
        job = self.jobs.pop(request_id)
        if length < job.start + job.width + 1:
            self.cache.restore_snapshot(job.state_slot, length - job.start - 1)
        else:
            self.cache.drop_snapshots(job.state_slot)
        self.draft.rewind(job, length)
    # --8<-- [end:rewind]

    def release(self, request_id: str) -> None:
        """Forget a finished request in both models, including the snapshots of its last round."""
        super().release(request_id)
        job = self.jobs.pop(request_id, None)
        state_slot = job.state_slot if job is not None else None
        if state_slot is not None:
            self.cache.drop_snapshots(state_slot)
        self.draft.forget(request_id, state_slot)

    def _job(self, seq: SpeculativeSeqPlan) -> DraftJob:
        return DraftJob(request_id=seq.request_id, history=list(seq.history), start=seq.start_pos,
                        width=seq.spec_width, kv_slots=seq.context_slots, state_slot=seq.state_slot,
                        params=seq.params, generator=self._generator(seq), restore=seq.draft_restore,
                        saves=seq.draft_saves)

    def _logit_rows(self, plan: RoundPlan, jobs: dict) -> tuple[list[int], dict[str, slice]]:
        """Rows that need logits: each verified position of a speculative decode, else the sampled row."""
        rows: list[int] = []
        row_of: dict[str, slice] = {}
        end = 0
        for seq in plan.seqs:
            end += seq.num_tokens
            first = end - seq.num_tokens if seq.request_id in jobs else end - 1
            if seq.sample:
                row_of[seq.request_id] = slice(len(rows), len(rows) + end - first)
                rows.extend(range(first, end))
        return rows, row_of

    def _sample_plain(self, plan: RoundPlan, jobs: dict, logits: torch.Tensor,
                      row_of: dict[str, slice]) -> dict[str, list[int]]:
        """Sample the round's other rows (last prefill chunks, plain decodes) exactly as ModelRunner does."""
        plain = [s for s in plan.seqs if s.sample and s.request_id not in jobs]
        if not plain:
            return {}
        rows = torch.cat([logits[row_of[s.request_id]] for s in plain])
        chosen = sample(rows, [s.params for s in plain], [self._generator(s) for s in plain])
        chosen = flag_non_finite(rows, chosen).tolist()
        check_finite(plan.round_id, [s.request_id for s in plain], chosen)
        return {s.request_id: [token] for s, token in zip(plain, chosen)}

    # --8<-- [start:verify]
    def _verify(self, round_id: int, job: DraftJob, prop: Proposal, rows: torch.Tensor) -> list[int]:
        """Accept a prefix of the drafts: the group this request delivers (``rewind`` follows the commit)."""
        argmax = flag_non_finite(rows, greedy_tokens(rows)).tolist()
        check_finite(round_id, [job.request_id] * len(argmax), argmax)
        steps: list[AcceptStep] = []
        if job.generator is None:
            group = verify_greedy(argmax, prop.drafts)
        else:
            group = verify_sampled(probabilities(rows, job.params), prop.q, prop.drafts, job.generator, steps)
        accepted = len(group) - 1
        settled = draft_keeps(job, job.start + accepted + 1)  # what the draft will keep once rewound
        self.stats["proposed"] += job.width
        self.stats["accepted"] += accepted
        self.stats["verify_rounds"] += 1
        self.details[job.request_id] = RoundDetail(
            request_id=job.request_id, start=job.start, proposal=prop,
            target_inputs=[job.history[job.start]] + prop.drafts, target_choice=argmax, accepted=accepted,
            group=group, draft=settled, steps=steps)
        return group
    # --8<-- [end:verify]

    @staticmethod
    def _verified(detail: RoundDetail) -> Verified:
        return Verified(detail.proposal.drafts, detail.accepted,
                        f"computed {detail.draft.computed} -> keep {detail.draft.kept}")
