"""Two-model speculative decoding: a draft model proposes, the target verifies, both caches follow the commit.

Scope:

* :func:`verify_greedy` and :func:`verify_sampled`, pure functions on token ids and probabilities that
  decide which tokens one round delivers (the accepted drafts plus one token from the target);
* :class:`ModelDraft`, the draft model with its own :class:`~mini_deepinfer.cache.HybridCache`. It uses the
  target's slot numbers (a request's KV slots and state slot index both caches), catches up on committed
  tokens it has not seen ("top-up"), proposes ``width`` tokens, and after verification sets its state back
  to the committed prefix from per-step snapshots;
* :class:`SpeculativeRunner`, a :class:`~mini_deepinfer.runner.ModelRunner` whose round runs the draft for
  every speculative decode, then ONE target forward over the whole round (prefill chunks, plain decodes and
  each speculative ``[t0, d1 .. dk]``), verifies, and sets the target's state slot to the state after the
  last committed position (recorded during the forward: ``ForwardBatch.capture_states``).

The engine's part (``engine.py``, ``commit.py``): a speculative decode reserves KV slots for ``1 + k``
positions and costs ``1 + k`` tokens of the round budget; the accepted group is committed one token at a
time; then ``Engine.rollback`` returns the KV slots of rejected positions.

Non-scope: cross-round execution (the verify needs the sampled tokens on the CPU before the next round is
planned, so a speculative engine is synchronous), drafts that share the target's layers (DeepInfer's
DFlash/MTP heads), tree drafts, choosing the width from acceptance rates, and a draft with another
vocabulary (refused).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from .cache import HybridCache
from .models.common import CausalLM, ForwardBatch
from .plan import RoundPlan, RoundResult, SeqPlan
from .request import Request, SamplingParams
from .runner import ModelRunner, new_cache
from .sampling import draw, probabilities, sample

__all__ = [
    "AcceptStep",
    "ModelDraft",
    "Proposal",
    "SpeculativeRunner",
    "check_greedy",
    "check_same_vocabulary",
    "cold_difference",
    "residual",
    "verify_greedy",
    "verify_sampled",
]


# --8<-- [start:verify_greedy]
def verify_greedy(target_argmax: Sequence[int], drafts: Sequence[int]) -> list[int]:
    """The tokens a greedy round delivers: the drafts the target agrees with, then the target's own token.

    Args:
        target_argmax: the target's argmax at each of the ``k + 1`` verified positions.
        drafts: the ``k`` proposed tokens; ``drafts[i]`` was fed at the position after ``target_argmax[i]``'s.

    Returns:
        The longest prefix of ``drafts`` equal to ``target_argmax``, plus the target's next token: the
        correction at the first mismatch, or the bonus token when every draft matched (1 to k + 1 tokens).
    """
    if len(target_argmax) != len(drafts) + 1:
        raise ValueError(f"{len(drafts)} drafts need {len(drafts) + 1} target tokens, "
                         f"got {len(target_argmax)}")
    accepted = []
    for draft, target in zip(drafts, target_argmax):
        if draft != target:
            break
        accepted.append(draft)
    return accepted + [int(target_argmax[len(accepted)])]
# --8<-- [end:verify_greedy]


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``max(0, p - q)``: where the target wants more mass than the draft offered (unnormalised)."""
    return torch.clamp(p - q, min=0.0)


def _uniform(generator: torch.Generator) -> float:
    return float(torch.rand(1, generator=generator, dtype=torch.float64))


def _check_verify_inputs(p: torch.Tensor, q: torch.Tensor, drafts: Sequence[int]) -> None:
    k = len(drafts)
    if p.dim() != 2 or q.dim() != 2 or p.shape[0] != k + 1 or q.shape[0] != k or p.shape[1] != q.shape[1]:
        raise ValueError(f"need p [k+1, V] and q [k, V] for k = {k} drafts, got {tuple(p.shape)} "
                         f"and {tuple(q.shape)}")
    for i, token in enumerate(drafts):
        if not 0 <= token < q.shape[1] or q[i, token] <= 0:
            raise ValueError(f"draft {i} (token {token}) has no probability under q: it cannot come from q")


@dataclass(frozen=True)
class AcceptStep:
    """One acceptance test of :func:`verify_sampled`, for traces: the draft, p and q of it, the uniform u."""

    token: int
    p: float
    q: float
    u: float
    accepted: bool


# --8<-- [start:verify_sampled]
def verify_sampled(
    p: torch.Tensor, q: torch.Tensor, drafts: Sequence[int], generator: torch.Generator,
    steps: list[AcceptStep] | None = None,
) -> list[int]:
    """Speculative sampling: the delivered tokens are distributed exactly as sampling the target alone.

    Draft ``i`` is accepted with probability ``min(1, p_i(d_i) / q_i(d_i))``. At the first rejection the
    token is drawn from ``norm(max(0, p_i - q_i))`` and the round stops; when every draft is accepted a
    bonus token is drawn from ``p_k``. Everything is computed in float64 on the CPU.

    Args:
        p: ``[k + 1, V]`` the target's (filtered) distributions at the verified positions.
        q: ``[k, V]`` the distributions the drafts were drawn from.
        drafts: the ``k`` drafted tokens.
        generator: the request's generator (one uniform per tested draft, one per final draw).
        steps: if given, each acceptance test is appended to it.

    Returns:
        1 to ``k + 1`` tokens: the accepted drafts, then the resampled or bonus token.
    """
    p, q = (t.detach().to(device="cpu", dtype=torch.float64) for t in (p, q))
    _check_verify_inputs(p, q, drafts)
    accepted: list[int] = []
    for i, token in enumerate(drafts):
        u, ratio = _uniform(generator), float(p[i, token] / q[i, token])
        accept = u < min(1.0, ratio)
        if steps is not None:
            steps.append(AcceptStep(int(token), float(p[i, token]), float(q[i, token]), u, accept))
        if accept:
            accepted.append(int(token))
            continue
        rest = residual(p[i], q[i])
        # p == q never rejects; a rejection left with no residual mass can only come from rounding
        return accepted + [draw(rest if float(rest.sum()) > 0 else p[i], generator)]
    return accepted + [draw(p[len(drafts)], generator)]
# --8<-- [end:verify_sampled]


def check_same_vocabulary(target: CausalLM, draft: CausalLM) -> None:
    """Refuse a draft whose token ids mean something else: its vocabulary size must equal the target's."""
    t, d = target.config.vocab_size, draft.config.vocab_size
    if t != d:
        raise ValueError(f"the draft model's vocabulary ({d} tokens) differs from the target's ({t}); "
                         "speculative decoding needs the same tokenizer")


@dataclass
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


@dataclass
class Proposal:
    """What the draft proposed for one request, and the inputs it ran to get there."""

    drafts: list[int]
    q: torch.Tensor | None  # [width, V] float64 on the CPU; None for greedy requests
    topup_start: int  # first position of the top-up (the draft cache held positions 0..topup_start-1)
    inputs: list[list[int]]  # the draft's inputs: the top-up tokens, then one token per later step


@dataclass
class DraftSettle:
    """Where one request's draft cache stands after verification."""

    computed: int  # positions the draft had computed this round (0 .. computed-1)
    kept: int  # positions kept: the committed prefix, or one short of it when every draft was accepted


# --8<-- [start:model_draft]
@dataclass
class ModelDraft:
    """The draft model, its cache (indexed by the target's slot numbers) and each request's draft length.

    Attributes:
        model: the draft model (same vocabulary as the target).
        cache: the draft's own KV and state tensors; ``cache.captured`` keeps per-step state snapshots.
        width: drafts proposed per round (the ``--draft-width`` k).
        computed: request id -> positions 0..computed-1 that the draft cache holds for it.
    """

    model: CausalLM
    cache: HybridCache
    width: int
    computed: dict[str, int] = field(default_factory=dict)
    forwards: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.width, int) or not 1 <= self.width <= 16:
            raise ValueError(f"draft width must be an integer in 1..16, got {self.width!r}")

    def propose(self, jobs: list[DraftJob]) -> dict[str, Proposal]:
        """Top up every request's draft cache to its round input, then propose ``job.width`` tokens each.

        One forward runs every request's top-up (the committed tokens the draft has not seen, ending with
        t0; on the first decode round this is the whole prompt); then one forward per further draft
        position, over the requests that still need one. The state after each step but a request's last
        is snapshotted, so :meth:`settle` can go back to any accepted length.
        """
        props: dict[str, Proposal] = {}
        for job in jobs:
            start = self.computed.get(job.request_id, 0)
            props[job.request_id] = Proposal([], None, start, [job.history[start : job.start + 1]])
        active = list(jobs)
        for step in range(max((j.width for j in jobs), default=0)):
            inputs = [props[j.request_id].inputs[-1] for j in active]
            starts = [props[j.request_id].topup_start if step == 0 else j.start + step for j in active]
            logits = self._forward(active, inputs, starts)
            for job, row in zip(active, logits):
                self._choose(job, row, props[job.request_id])
                self.computed[job.request_id] = job.start + step + 1
            active = [j for j in active if j.width > step + 1]
            self.cache.capture_current([j.state_slot for j in active])  # not after a request's last step
            for job in active:
                props[job.request_id].inputs.append([props[job.request_id].drafts[-1]])
        return props
    # --8<-- [end:model_draft]

    def _forward(self, jobs: list[DraftJob], inputs: list[list[int]], starts: list[int]) -> torch.Tensor:
        device = self.model.lm_head.weight.device
        batch = ForwardBatch.from_sequences(inputs, starts, [j.kv_slots for j in jobs],
                                            [j.state_slot for j in jobs], device=device)
        self.forwards += 1
        return self.model(batch, self.cache)

    # --8<-- [start:choose]
    def _choose(self, job: DraftJob, row: torch.Tensor, prop: Proposal) -> None:
        """Greedy requests take the draft's argmax; sampled ones draw from its filtered distribution q."""
        if job.generator is None:
            prop.drafts.append(int(torch.argmax(row)))
            return
        q_row = probabilities(row, job.params)
        prop.drafts.append(draw(q_row, job.generator))
        prop.q = q_row[None] if prop.q is None else torch.cat([prop.q, q_row[None]])
    # --8<-- [end:choose]

    # --8<-- [start:settle]
    def settle(self, job: DraftJob, accepted: int) -> DraftSettle:
        """After verification: keep the draft cache up to the committed prefix (positions 0..n+a).

        The draft computed positions n..n+k-1 (inputs t0, d1..d(k-1)). With ``a <= k - 1`` accepted drafts
        its state goes back to the snapshot after position n+a; with all k accepted it keeps everything
        and lags one position behind (d_k never went through it), which the next top-up makes up.
        """
        computed = job.start + job.width
        kept = min(job.start + accepted + 1, computed)
        if kept < computed:
            self.cache.restore_captured(job.state_slot, kept - job.start - 1)
        else:
            self.cache.drop_captured(job.state_slot)
        self.computed[job.request_id] = kept
        return DraftSettle(computed, kept)
    # --8<-- [end:settle]

    def forget(self, request_id: str, state_slot: int | None = None) -> None:
        """The request is gone: the draft holds nothing for it any more."""
        self.computed.pop(request_id, None)
        if state_slot is not None:
            self.cache.drop_captured(state_slot)

    def free_kv_slots(self) -> int:
        """KV slots of the draft cache that hold no request's positions."""
        return self.cache.kv_capacity - sum(self.computed.values())

    def free_state_slots(self) -> int:
        """State slots of the draft cache that hold no request's state."""
        return self.cache.state_capacity - len(self.computed)


@dataclass
class SpeculativeLaunch:
    """A speculative round: verification needs the tokens on the CPU, so it is complete at launch."""

    round_id: int
    tokens: dict[str, list[int]]
    verify: dict[str, dict]


@dataclass
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

    Args:
        model: the target model.
        cache: the target's cache.
        draft: the draft model and its cache (same capacities, so the engine's slot numbers fit both).
    """

    def __init__(self, model: CausalLM, cache: HybridCache, draft: ModelDraft) -> None:
        super().__init__(model, cache)
        check_same_vocabulary(model, draft.model)
        if (draft.cache.kv_capacity, draft.cache.state_capacity) != (cache.kv_capacity, cache.state_capacity):
            raise ValueError("the draft cache must have the target cache's KV and state capacities")
        self.draft = draft
        self.history: dict[str, list[int]] = {}  # tokens at the positions the target cache holds
        self.details: dict[str, RoundDetail] = {}  # the last round's speculative decodes
        self.stats = {"target_forwards": 0, "proposed": 0, "accepted": 0, "verify_rounds": 0}

    # --8<-- [start:launch]
    def launch(self, plan: RoundPlan) -> SpeculativeLaunch:
        """Draft, then one target forward for the whole round, then verify and restore both caches."""
        self.cache.captured.clear()  # left over only if an earlier round failed half-way
        self.draft.cache.captured.clear()
        self._remember_inputs(plan)
        jobs = {s.request_id: self._job(s) for s in plan.seqs if s.spec_width}
        proposals = self.draft.propose(list(jobs.values()))
        expanded = RoundPlan(plan.round_id, tuple(
            replace(s, token_ids=s.token_ids + tuple(proposals[s.request_id].drafts), spec_width=0)
            if s.request_id in jobs else s for s in plan.seqs))
        batch = self.prepare(expanded)
        batch.logits_indices, row_of = self._logit_rows(expanded, jobs)
        batch.capture_states = [s.request_id in jobs for s in plan.seqs]
        logits = self.model(batch, self.cache)
        self.stats["target_forwards"] += 1
        tokens = self._sample_plain(plan, jobs, logits, row_of)
        self.details = {}
        for rid, job in jobs.items():
            tokens[rid] = self._verify(job, proposals[rid], logits[row_of[rid]])
        verify = {rid: self._trace_data(d) for rid, d in self.details.items()}
        return SpeculativeLaunch(plan.round_id, tokens, verify)
    # --8<-- [end:launch]

    def read(self, handle: SpeculativeLaunch) -> RoundResult:
        return RoundResult(handle.round_id, dict(handle.tokens), {"verify": handle.verify})

    def release(self, request_id: str) -> None:
        """Forget a finished request in both models."""
        super().release(request_id)
        self.history.pop(request_id, None)
        self.draft.forget(request_id)
        # Snapshots live within one round; any left between rounds come from a round that failed half-way.
        self.cache.captured.clear()
        self.draft.cache.captured.clear()

    def _remember_inputs(self, plan: RoundPlan) -> None:
        """Mirror the target cache's tokens: each seq's inputs land at its start position."""
        for seq in plan.seqs:
            history = self.history.setdefault(seq.request_id, [])
            del history[seq.start_pos :]
            history.extend(seq.token_ids)

    def _job(self, seq: SeqPlan) -> DraftJob:
        return DraftJob(seq.request_id, self.history[seq.request_id], seq.start_pos, seq.spec_width,
                        seq.context_slots, seq.state_slot, seq.params, self._generator(seq))

    def _logit_rows(self, plan: RoundPlan, jobs: dict) -> tuple[torch.Tensor, dict[str, slice]]:
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
        return torch.tensor(rows, dtype=torch.int64, device=self.device), row_of

    def _sample_plain(self, plan: RoundPlan, jobs: dict, logits: torch.Tensor,
                      row_of: dict[str, slice]) -> dict[str, list[int]]:
        """Sample the round's other rows (last prefill chunks, plain decodes) exactly as ModelRunner does."""
        plain = [s for s in plan.seqs if s.sample and s.request_id not in jobs]
        if not plain:
            return {}
        rows = torch.cat([logits[row_of[s.request_id]] for s in plain])
        chosen = sample(rows, [s.params for s in plain], [self._generator(s) for s in plain]).tolist()
        return {s.request_id: [token] for s, token in zip(plain, chosen)}

    # --8<-- [start:verify]
    def _verify(self, job: DraftJob, prop: Proposal, rows: torch.Tensor) -> list[int]:
        """Accept a prefix of the drafts, then set both state slots to the last committed position."""
        argmax = torch.argmax(rows, dim=-1).tolist()
        steps: list[AcceptStep] = []
        if job.generator is None:
            group = verify_greedy(argmax, prop.drafts)
        else:
            group = verify_sampled(probabilities(rows, job.params), prop.q, prop.drafts, job.generator, steps)
        accepted = len(group) - 1
        if accepted < job.width:  # the target's state slot goes back to the state after position n+a
            self.cache.restore_captured(job.state_slot, accepted)
        else:
            self.cache.drop_captured(job.state_slot)
        settled = self.draft.settle(job, accepted)
        self.history[job.request_id].extend(prop.drafts[:accepted])
        self.stats["proposed"] += job.width
        self.stats["accepted"] += accepted
        self.stats["verify_rounds"] += 1
        self.details[job.request_id] = RoundDetail(job.request_id, job.start, prop, [job.history[job.start]]
                                                   + prop.drafts, argmax, accepted, group, settled, steps)
        return group
    # --8<-- [end:verify]

    @staticmethod
    def _trace_data(detail: RoundDetail) -> dict:
        return {"drafts": detail.proposal.drafts, "accepted": detail.accepted,
                "draft_cache": f"computed {detail.draft.computed} -> keep {detail.draft.kept}"}


# --8<-- [start:cold_difference]
@torch.no_grad()
def cold_difference(model: CausalLM, cache: HybridCache, tokens: Sequence[int], kv_slots: Sequence[int],
                    state_slot: int) -> dict[str, float]:
    """How far a request's live cache is from a cold recomputation of ``tokens`` in a fresh cache.

    Args:
        model: the model that wrote ``cache``.
        cache: the live cache.
        tokens: the prefix the cache should hold (positions 0..len-1).
        kv_slots: the request's KV slots, position order (at least ``len(tokens)``).
        state_slot: the request's state slot.

    Returns:
        The largest absolute difference of each part: ``kv`` (keys and values of every full-attention layer
        at the prefix's slots), ``conv`` (convolution windows) and ``recurrent`` (recurrent states).
    """
    n = len(tokens)
    cold = HybridCache(model.config, n, 1, cache.dtype, cache.device)
    model(ForwardBatch.from_sequences([list(tokens)], [0], [list(range(n))], [0], device=cache.device), cold)
    rows = torch.tensor(list(kv_slots[:n]), dtype=torch.int64, device=cache.device)

    def worst(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
        return max((float((a.float() - b.float()).abs().max()) for a, b in pairs), default=0.0)

    return {
        "kv": worst([(cache.key_cache[i][rows], cold.key_cache[i]) for i in cache.key_cache]
                    + [(cache.value_cache[i][rows], cold.value_cache[i]) for i in cache.value_cache]),
        "conv": worst([(cache.conv_state[i][state_slot], cold.conv_state[i][0]) for i in cache.conv_state]),
        "recurrent": worst([(cache.recurrent_state[i][state_slot], cold.recurrent_state[i][0])
                            for i in cache.recurrent_state]),
    }
# --8<-- [end:cold_difference]


# --8<-- [start:check_greedy]
def check_greedy(model: CausalLM, requests: Sequence[Request]) -> dict:
    """Compare what each request delivered with an independent plain greedy run of ``model`` (the target).

    Each request runs alone, without a draft, in a fresh cache, for as many tokens as it delivered. Only
    that prefix is compared: a request cancelled after N tokens says nothing about the tokens after N.
    """
    from .engine import Engine

    compared, differing = 0, []
    for req in requests:
        delivered = list(req.output_token_ids)
        if not delivered:
            continue
        capacity = req.prompt_len + len(delivered)
        plain = Engine(ModelRunner(model, new_cache(model, capacity, 1)), capacity, 1)
        params = replace(req.params, max_new_tokens=len(delivered), temperature=0.0)
        plain.submit(req.request_id, list(req.prompt_token_ids), params)
        plain.run()
        compared += len(delivered)
        if plain.requests[req.request_id].output_token_ids != delivered:
            differing.append(req.request_id)
    return {"compared_tokens": compared, "passed": not differing, "differing_requests": differing,
            "note": "only the delivered prefix is compared"}
# --8<-- [end:check_greedy]
