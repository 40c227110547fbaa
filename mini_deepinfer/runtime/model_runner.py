"""The model runner: from a round plan to tensors, a forward pass, and sampled tokens.

Scope: ``ModelRunner.launch`` lays out one round on the host (token ids, positions, slot mapping, which rows
need logits, the sampling uniforms), sends it to the device in one non-blocking copy, runs the model over the
``HybridCache``, samples on the device, and starts a non-blocking copy of the sampled tokens to the host;
``ModelRunner.read`` waits for that copy, the one place where the host waits for the device. Tokens the host
has not read (``IN_FLIGHT`` in a plan) name their row of the previous round's sampled tokens
(``SeqInput.in_flight_row``) and are taken from it on the device, so round N+1 is prepared and queued while
round N still runs. Decode rounds can run on static buffers, captured as device graphs (``graphs.py``) when
the runner is made, before any request. On CPU every copy is immediate and nothing overlaps, but the protocol
is the same. Non-scope: choosing what runs (the engine), deciding what sampled tokens mean (commit), the model
maths, laying a round out on the host (``staging.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate

import torch

from mini_deepinfer.core.plan import IN_FLIGHT, RoundPlan, RoundResult, SeqPlan
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.forward_batch import ForwardBatch
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.runtime.device import device_module
from mini_deepinfer.runtime.graphs import DecodeGraphs
from mini_deepinfer.runtime.sampling import (
    check_finite,
    draw_uniforms,
    flag_non_finite,
    make_generator,
    sample,
)
from mini_deepinfer.runtime.staging import SeqInput, Staging, batch_from_views, stage_round


@dataclass
class RunnerLaunch:
    """A launched round: sampled tokens on their way to the host, and the event that says they arrived."""

    round_id: int
    sampled_ids: list[str]
    host_tokens: torch.Tensor
    done: object | None  # a device event; None on CPU, where the copy has already happened
    logits: torch.Tensor | None = None
    graph: bool = False  # the round replayed a captured graph (or, on CPU, ran on its static buffers)


@dataclass
class RunnerResult(RoundResult):
    """A round read back by a ``ModelRunner``: the sampled tokens, and with ``keep_logits`` each sampled row's
    float32 logits (request id -> ``[vocab]``; empty otherwise)."""

    logits: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Prepared:
    """One round's inputs on the device: the model's batch, and the sampling uniforms of the sampled rows."""

    batch: ForwardBatch
    uniforms: torch.Tensor | None  # float64 [S]; None when every sampled row is greedy
    seqs: list[SeqInput]


@dataclass
class ModelRunner:
    """Runs a causal LM over a hybrid cache, one round plan at a time.

    Attributes:
        model: the model (``forward(batch, cache) -> logits``).
        cache: KV and state tensors, indexed by the slots in the plans.
        keep_logits: also hand back each sampled row's float32 logits (tests compare them across modes).
        graphs: decode rounds on static buffers, every bucket captured (on an accelerator) when the runner is
            made; None: every round runs eagerly.
        sampled: device memory: the last launched round's sampled tokens, one row per state slot (a round
            samples at most one token per running request). Its size is final: graphs read it in place.
        rounds_by_mode: how many rounds replayed a graph ("graph") or ran eagerly ("eager").
    """

    model: CausalLM
    cache: HybridCache
    keep_logits: bool = False
    graphs: DecodeGraphs | None = None
    generators: dict[str, torch.Generator] = field(default_factory=dict)
    sampled_rows: dict[str, int] = field(default_factory=dict)  # request -> its row in ``sampled``
    sampled: torch.Tensor = field(init=False)
    rounds_by_mode: dict[str, int] = field(default_factory=lambda: {"graph": 0, "eager": 0})

    def __post_init__(self) -> None:
        rows = max(self.cache.state_capacity, 1)
        self.sampled = torch.zeros(rows, dtype=torch.int64, device=self.device)
        if self.graphs is not None:  # before any request: no capture once rounds run
            self.graphs.capture_all(self.sampled)

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device

    @property
    def capture_s(self) -> float:
        """Seconds spent capturing decode graphs when the runner was made (0.0 without graphs)."""
        return self.graphs.capture_s if self.graphs is not None else 0.0

    # --8<-- [start:prepare]
    def sequences(self, plan: RoundPlan) -> list[SeqInput]:
        """The plan as host integers; a token still in flight names its row of the last sampled tokens."""
        def seq_input(s: SeqPlan) -> SeqInput:
            in_flight = IN_FLIGHT in s.token_ids  # only ever a decode's one input
            return SeqInput(token_ids=tuple(0 if in_flight else t for t in s.token_ids), start=s.start_pos,
                            kv_slots=s.context_slots, state_slot=s.state_slot or 0,
                            in_flight_row=self.sampled_rows[s.request_id] if in_flight else None,
                            restore=s.restore, saves=s.saves)

        return [seq_input(s) for s in plan.seqs]

    def prepare(self, plan: RoundPlan) -> Prepared:
        """Flatten a round plan into the tensors of one forward: each sampling row's last token gives logits,
        and each sampled row's uniform number is drawn now, on the host."""
        seqs = self.sequences(plan)
        ends = [end - 1 for end in accumulate(len(s.token_ids) for s in seqs)]
        sampling = [s for s in plan.seqs if s.sample]
        uniforms = draw_uniforms([s.params for s in sampling], [self._generator(s) for s in sampling])
        return self.stage(seqs, [ends[b] for b, s in enumerate(plan.seqs) if s.sample], uniforms)

    def stage(self, seqs: list[SeqInput], logits_rows: list[int],
              uniforms: list[float] | None = None) -> Prepared:
        """Lay the round out in one staging buffer and send it to the device in one non-blocking copy."""
        staging = Staging()
        layout = stage_round(seqs, staging, logits_rows)
        if uniforms is not None:
            staging.add_floats("uniforms", uniforms)
        views = staging.upload(self.device)
        return Prepared(batch_from_views(layout, views), views.get("uniforms"), seqs)
    # --8<-- [end:prepare]

    # --8<-- [start:launch]
    def launch(self, plan: RoundPlan) -> RunnerLaunch:
        """Queue the forward and sampling of one round; start copying the sampled tokens to the host.

        Nothing here waits for the device: the inputs go over in one non-blocking copy, tokens still in flight
        are gathered on the device, and the only host read is in ``read``.
        """
        sampling = [s for s in plan.seqs if s.sample]
        graph = self.graphs is not None and not self.keep_logits and self.graphs.accepts(plan)
        if graph:  # a plain greedy decode round: copy its inputs into a bucket, replay the bucket's graph
            tokens, logits = self.graphs.run(self.sequences(plan)), None
        else:
            tokens, logits = self.forward(plan, sampling)
        self._keep_sampled(sampling, tokens)
        self.rounds_by_mode["graph" if graph else "eager"] += 1
        host, done = self._copy_to_host(tokens, logits if self.keep_logits else None)
        return RunnerLaunch(plan.round_id, [s.request_id for s in sampling], host[0], done, host[1], graph)

    def forward(self, plan: RoundPlan, sampling: list[SeqPlan]) -> tuple[torch.Tensor, torch.Tensor]:
        """An eager round: upload its inputs, fill in the tokens still in flight, run the model, sample."""
        prepared = self.prepare(plan)
        batch = prepared.batch.with_in_flight(self.sampled)
        logits = self.model(batch, self.cache)
        tokens = sample(logits, [s.params for s in sampling], uniforms=prepared.uniforms)
        return flag_non_finite(logits, tokens), logits

    def read(self, handle: RunnerLaunch) -> RunnerResult:
        """Wait until the round's sampled tokens are on the host and return them: the round's one host
        wait."""
        if handle.done is not None:
            handle.done.synchronize()
        tokens = handle.host_tokens.tolist()
        check_finite(handle.round_id, handle.sampled_ids, tokens)
        logits = dict(zip(handle.sampled_ids, handle.logits)) if handle.logits is not None else {}
        return RunnerResult(handle.round_id, {rid: [t] for rid, t in zip(handle.sampled_ids, tokens)}, logits)
    # --8<-- [end:launch]

    def _keep_sampled(self, sampling: list[SeqPlan], tokens: torch.Tensor) -> None:
        """Keep the round's tokens on the device: the next round may need them before the host sees them."""
        if tokens.numel() > self.sampled.numel():
            raise RuntimeError(
                f"a round sampled {tokens.numel()} tokens; the sampled-token buffer holds "
                f"{self.sampled.numel()} (one per state slot) and never grows: captured graphs read it in "
                "place. Give the cache a state slot per request that can run at once")
        # clamped as it is copied (no extra kernel): a row flagged NON_FINITE (-1) is no token id, and the
        # next round, launched before the host reads this flag, must not embed it. 0 goes in instead; the
        # flagged round fails at its read, before anything the next round computes is committed.
        torch.clamp(tokens, min=0, out=self.sampled[: tokens.numel()])
        self.sampled_rows = {s.request_id: i for i, s in enumerate(sampling)}

    # --8<-- [start:copy_to_host]
    def _copy_to_host(self, tokens: torch.Tensor,
                      logits: torch.Tensor | None) -> tuple[tuple[torch.Tensor, torch.Tensor | None], object]:
        """Start copying the tokens (and logits, when kept) into pinned host memory; record an event after."""
        module = device_module(self.device)
        if module is None:  # CPU: the tokens are already where the CPU reads them
            return (tokens.clone(), None if logits is None else logits.float().clone()), None
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        host_logits = None
        if logits is not None:
            host_logits = torch.empty(logits.shape, dtype=torch.float32, pin_memory=True)
            host_logits.copy_(logits, non_blocking=True)
        done = module.Event()
        done.record()
        return (host, host_logits), done
    # --8<-- [end:copy_to_host]

    # --8<-- [start:generator]
    def _generator(self, seq: SeqPlan) -> torch.Generator | None:
        """Each sampling request keeps one generator for its whole life (CPU, so streams match devices)."""
        if seq.params.greedy:
            return None
        if seq.request_id not in self.generators:
            self.generators[seq.request_id] = make_generator(seq.params.seed)
        return self.generators[seq.request_id]
    # --8<-- [end:generator]

    def release(self, request_id: str) -> None:
        """Forget a finished request's generator."""
        self.generators.pop(request_id, None)
