"""The model runner: from a round plan to tensors, a forward pass, and sampled tokens.

Scope: ``ModelRunner.launch`` lays out one round (token ids, positions, slot mapping, which rows need
logits), runs the model over the ``HybridCache``, samples on the device, and starts a non-blocking copy
of the sampled tokens to the CPU; ``ModelRunner.read`` waits for that copy. Tokens the CPU has not read
(``IN_FLIGHT`` in a plan) are taken from the previous round's sampled tokens, still in device memory, so
round N+1 can be launched before round N is read. On CPU the copy is synchronous and nothing overlaps,
but the protocol is the same.
Non-scope: choosing what runs (the engine), deciding what sampled tokens mean (commit), the model maths.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mini_deepinfer.core.plan import IN_FLIGHT, RoundPlan, RoundResult, SeqPlan
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.forward_batch import ForwardBatch
from mini_deepinfer.models.layers import CausalLM
from mini_deepinfer.runtime.device import device_module
from mini_deepinfer.runtime.sampling import make_generator, sample


@dataclass
class RunnerLaunch:
    """A launched round: sampled tokens on their way to the CPU, and the event that says they arrived."""

    round_id: int
    sampled_ids: list[str]
    host_tokens: torch.Tensor
    done: object | None  # a device event; None on CPU, where the copy has already happened
    logits: torch.Tensor | None = None


@dataclass
class ModelRunner:
    """Runs a causal LM over a hybrid cache, one round plan at a time.

    Attributes:
        model: the model (``forward(batch, cache) -> logits``).
        cache: KV and state tensors, indexed by the slots in the plans.
        keep_logits: also hand back each sampled row's float32 logits (tests compare them across modes).
    """

    model: CausalLM
    cache: HybridCache
    keep_logits: bool = False
    generators: dict[str, torch.Generator] = field(default_factory=dict)
    last_token: dict[str, torch.Tensor] = field(default_factory=dict)  # device memory, per request

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device

    # --8<-- [start:prepare]
    def prepare(self, plan: RoundPlan) -> ForwardBatch:
        """Flatten a round plan into the tensors of one forward."""
        dev = self.device
        ids = [0 if t is IN_FLIGHT else t for s in plan.seqs for t in s.token_ids]
        input_ids = torch.tensor(ids, dtype=torch.int64, device=dev)
        self._fill_in_flight(plan, input_ids)
        ends = torch.tensor([s.num_tokens for s in plan.seqs]).cumsum(0) - 1
        sampled_rows = [int(ends[i]) for i, s in enumerate(plan.seqs) if s.sample]

        def tensor(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=dev)

        state_ids = [s.state_slot if s.state_slot is not None else 0 for s in plan.seqs]

        return ForwardBatch(
            input_ids=input_ids,
            positions=tensor([p for s in plan.seqs for p in s.positions]),
            query_lens=[s.num_tokens for s in plan.seqs],
            context_lens=[len(s.context_slots) for s in plan.seqs],
            slot_mapping=tensor([x for s in plan.seqs for x in s.new_slots]),
            kv_slots=[tensor(list(s.context_slots)) for s in plan.seqs],
            state_slots=tensor(state_ids),
            fresh_state=[s.start_pos == 0 for s in plan.seqs],
            logits_indices=tensor(sampled_rows),
            state_slot_ids=tuple(state_ids),
        )

    def _fill_in_flight(self, plan: RoundPlan, input_ids: torch.Tensor) -> None:
        """Copy tokens the CPU has not read yet from device memory into the input (no synchronisation)."""
        row = 0
        for seq in plan.seqs:
            for token in seq.token_ids:
                if token is IN_FLIGHT:
                    input_ids[row] = self.last_token[seq.request_id]
                row += 1
    # --8<-- [end:prepare]

    # --8<-- [start:launch]
    def launch(self, plan: RoundPlan) -> RunnerLaunch:
        """Run the forward and sampling of one round; start copying the sampled tokens to the CPU."""
        batch = self.prepare(plan)
        logits = self.model(batch, self.cache)
        sampling = [s for s in plan.seqs if s.sample]
        tokens = sample(logits, [s.params for s in sampling], [self._generator(s) for s in sampling])
        tokens = flag_non_finite(logits, tokens)
        for i, seq in enumerate(sampling):
            self.last_token[seq.request_id] = tokens[i]  # the next round may read it before the CPU does
        host, done = self._copy_to_host(tokens)
        kept = logits.float().cpu() if self.keep_logits else None
        return RunnerLaunch(plan.round_id, [s.request_id for s in sampling], host, done, kept)

    def read(self, handle: RunnerLaunch) -> RoundResult:
        """Wait until the round's sampled tokens are on the CPU and return them."""
        if handle.done is not None:
            handle.done.synchronize()
        result = RoundResult(handle.round_id)
        tokens = handle.host_tokens.tolist()
        check_finite(handle.round_id, handle.sampled_ids, tokens)
        for rid, token in zip(handle.sampled_ids, tokens):
            result.tokens[rid] = [token]
        if handle.logits is not None:
            result.extra["logits"] = dict(zip(handle.sampled_ids, handle.logits))
        return result
    # --8<-- [end:launch]

    # --8<-- [start:copy_to_host]
    def _copy_to_host(self, tokens: torch.Tensor) -> tuple[torch.Tensor, object | None]:
        module = device_module(self.device)
        if module is None:  # CPU: the tokens are already where the CPU reads them
            return tokens.clone(), None
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        done = module.Event()
        done.record()
        return host, done
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

    def rewind(self, request_id: str, length: int) -> None:
        """A plain runner computes no draft positions, so there is never anything to rewind."""
        raise RuntimeError(f"{request_id}: this runner runs no draft model; use a SpeculativeRunner")

    def release(self, request_id: str) -> None:
        """Forget a finished request's generator and device-side token."""
        self.generators.pop(request_id, None)
        self.last_token.pop(request_id, None)


# --8<-- [start:non_finite]
NON_FINITE = -1
"""The token a row gets when its logits hold NaN or infinity: no vocabulary has it, so it cannot be
sampled."""


class NonFiniteLogitsError(RuntimeError):
    """A round produced NaN or infinite logits for some request (broken weights, or an overflow)."""


def flag_non_finite(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Replace the token of every row whose logits are not all finite by ``NON_FINITE``, on the device.

    The flag travels with the tokens, so the CPU learns of it in the read it makes anyway: checking here with
    ``bool(...)`` would make the host wait for the round.
    """
    finite = torch.isfinite(logits).all(dim=-1)
    return torch.where(finite, tokens, torch.full_like(tokens, NON_FINITE))


def check_finite(round_id: int, request_ids: list[str], tokens: list[int]) -> None:
    """Raise ``NonFiniteLogitsError`` naming the round and the requests whose token carries the flag."""
    bad = list(dict.fromkeys(rid for rid, token in zip(request_ids, tokens) if token == NON_FINITE))
    if bad:
        raise NonFiniteLogitsError(f"round {round_id}: non-finite logits (NaN or inf) for {', '.join(bad)}")
# --8<-- [end:non_finite]


