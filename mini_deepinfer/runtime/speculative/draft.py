"""The draft model of two-model speculative decoding: it proposes, and follows the commit back.

Scope: :class:`ModelDraft`, the draft model with its own :class:`~mini_deepinfer.models.cache.HybridCache`. It
uses the target's slot numbers (a request's KV slots and state slot index both caches), catches up on
committed tokens it has not seen ("top-up", from the plan's ``history``), proposes ``width`` tokens per
request, and after verification sets its state back to the committed prefix from per-step snapshots
(:meth:`ModelDraft.rewind`). Non-scope: verification (``verify.py``), the target's forward and rewind
(``runner.py``), drafts that share the target's layers (DeepInfer's DFlash/MTP heads), tree drafts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.runtime.sampling import draw, greedy_tokens, probabilities
from mini_deepinfer.runtime.staging import SeqInput, batch_from_inputs

__all__ = ["DraftJob", "DraftSettle", "ModelDraft", "Proposal", "check_same_vocabulary", "draft_keeps"]


def check_same_vocabulary(target: CausalLM, draft: CausalLM) -> None:
    """Refuse a draft whose token ids mean something else: its vocabulary size must equal the target's."""
    t, d = target.config.vocab_size, draft.config.vocab_size
    if t != d:
        raise ValueError(f"the draft model's vocabulary ({d} tokens) differs from the target's ({t}); "
                         "speculative decoding needs the same tokenizer")


@dataclass(kw_only=True)
class DraftJob:
    """One speculative decode as the draft sees it: the committed tokens and where the round starts."""

    request_id: str
    history: list[int]  # tokens at positions 0..start (the last one is the round's input t0)
    start: int  # position n of t0
    width: int  # drafts to propose
    kv_slots: tuple[int, ...]  # slots of positions 0..start + width (the target's)
    state_slot: int
    params: SamplingParams
    generator: torch.Generator | None
    restore: tuple[int, int | None] | None = None  # prefix cache: (length, snapshot) to start the draft from
    saves: tuple[tuple[int, int], ...] = ()  # prefix cache: (position, snapshot) to keep as it catches up


@dataclass(kw_only=True)
class Proposal:
    """What the draft proposed for one request, and the inputs it ran to get there."""

    topup_start: int  # first position of the top-up (the draft cache held positions 0..topup_start-1)
    inputs: list[list[int]]  # the draft's inputs: the top-up tokens, then one token per later step
    drafts: list[int] = field(default_factory=list)
    q: torch.Tensor | None = None  # [width, V] float64 on the CPU; None for greedy requests


@dataclass
class DraftSettle:
    """Where one request's draft cache stands after verification."""

    computed: int  # positions the draft had computed this round (0 .. computed-1)
    kept: int  # positions kept: the committed prefix, or one short of it when every draft was accepted


def draft_keeps(job: DraftJob, length: int) -> DraftSettle:
    """What the draft cache keeps once a request is committed to ``length`` positions: the committed prefix,
    or all it computed (``job.start + job.width`` positions) when that is shorter."""
    computed = job.start + job.width
    return DraftSettle(computed, min(length, computed))


# --8<-- [start:model_draft]
@dataclass
class ModelDraft:
    """The draft model, its cache (indexed by the target's slot numbers) and each request's draft length.

    Attributes:
        model: the draft model (same vocabulary as the target).
        cache: the draft's own KV and state tensors; ``cache.snapshots`` keeps its state after each step.
        computed: request id -> positions 0..computed-1 that the draft cache holds for it.
    """

    model: CausalLM
    cache: HybridCache
    computed: dict[str, int] = field(default_factory=dict)
    forwards: int = 0

    def propose(self, jobs: list[DraftJob]) -> dict[str, Proposal]:
        """Top up every request's draft cache to its round input, then propose ``job.width`` tokens each.

        One forward runs every request's top-up (the committed tokens the draft has not seen, ending with
        t0; on the first decode round this is the whole prompt); then one forward per further draft
        position, over the requests that still need one. The state after each step but a request's last
        is snapshotted, so :meth:`rewind` can go back to any accepted length.
        """
        props = {job.request_id: self._top_up(job) for job in jobs}
        active = list(jobs)
        for step in range(max((j.width for j in jobs), default=0)):
            inputs = [props[j.request_id].inputs[-1] for j in active]
            starts = [props[j.request_id].topup_start if step == 0 else j.start + step for j in active]
            logits = self._forward(active, inputs, starts, first=step == 0)
            for job, row in zip(active, logits):
                self._choose(job, row, props[job.request_id])
                self.computed[job.request_id] = job.start + step + 1
            active = [j for j in active if j.width > step + 1]
            self.cache.snapshot_current([j.state_slot for j in active])  # not after a request's last step
            for job in active:
                props[job.request_id].inputs.append([props[job.request_id].drafts[-1]])
        return props
    # --8<-- [end:model_draft]

    # --8<-- [start:top_up]
    def _top_up(self, job: DraftJob) -> Proposal:
        """The request's first draft input: every committed token the draft cache has not seen, up to t0.

        With the prefix cache, the draft's first run starts after the reused prompt tokens: their keys are in
        the shared KV slots of the draft cache and their state in the draft's own snapshot (``job.restore``),
        so the draft never writes a shared slot.
        """
        start = self.computed.get(job.request_id, 0) if job.restore is None else job.restore[0]
        return Proposal(topup_start=start, inputs=[job.history[start : job.start + 1]])

    def _forward(self, jobs: list[DraftJob], inputs: list[list[int]], starts: list[int],
                 first: bool = False) -> torch.Tensor:
        """One draft forward; the first (the top-up) also restores and keeps prefix snapshots."""
        seqs = [SeqInput(token_ids=tuple(tokens), start=start, kv_slots=j.kv_slots, state_slot=j.state_slot,
                         restore=j.restore[1] if first and j.restore else None,
                         saves=j.saves if first else ()) for j, tokens, start in zip(jobs, inputs, starts)]
        self.forwards += 1
        return self.model(batch_from_inputs(seqs, self.model.lm_head.weight.device), self.cache)
    # --8<-- [end:top_up]

    # --8<-- [start:choose]
    def _choose(self, job: DraftJob, row: torch.Tensor, prop: Proposal) -> None:
        """Greedy requests take the draft's argmax; sampled ones draw from its filtered distribution q."""
        if job.generator is None:
            prop.drafts.append(int(greedy_tokens(row)))
            return
        q_row = probabilities(row, job.params)
        prop.drafts.append(draw(q_row, job.generator))
        prop.q = q_row[None] if prop.q is None else torch.cat([prop.q, q_row[None]])
    # --8<-- [end:choose]

    # --8<-- [start:rewind]
    def rewind(self, job: DraftJob, length: int) -> DraftSettle:
        """After verification: keep the draft cache up to the committed prefix (positions 0..length-1).

        The draft computed positions n..n+k-1 (inputs t0, d1..d(k-1)). With ``a <= k - 1`` accepted drafts
        (``length = n + a + 1``) its state goes back to the snapshot after position n+a; with all k accepted
        it keeps everything and lags one position behind (d_k never went through it), which the next top-up
        makes up.
        """
        settle = draft_keeps(job, length)
        if settle.kept < settle.computed:
            self.cache.restore_snapshot(job.state_slot, settle.kept - job.start - 1)
        else:
            self.cache.drop_snapshots(job.state_slot)
        self.computed[job.request_id] = settle.kept
        return settle
    # --8<-- [end:rewind]

    def forget(self, request_id: str, state_slot: int | None) -> None:
        """The request is gone: the draft holds nothing for it any more."""
        self.computed.pop(request_id, None)
        if state_slot is not None:
            self.cache.drop_snapshots(state_slot)

    def free_kv_slots(self) -> int:
        """KV slots of the draft cache that hold no request's positions."""
        return self.cache.kv_capacity - sum(self.computed.values())

    def free_state_slots(self) -> int:
        """State slots of the draft cache that hold no request's state."""
        return self.cache.state_capacity - len(self.computed)
