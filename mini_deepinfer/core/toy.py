"""The toy runner: "next token = last input + 1", with no torch and no model.

Scope: a runner that follows the same ``launch``/``read`` protocol as the model runner, so lesson 1
can watch the engine without a model. It keeps a tiny "device memory" (the token each request sampled
last), so a cross-round plan whose input is still in flight (``IN_FLIGHT``) works exactly as on a GPU.
It also keeps a fake KV cache (slot -> token) and checks every plan against it, so a test notices a
plan that points at the wrong slots.
Non-scope: sampling parameters (the toy is deterministic), speculative drafts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .plan import IN_FLIGHT, RoundPlan, RoundResult, SeqPlan


@dataclass
class ToyLaunch:
    """A launched toy round: results are computed at launch, but handed over only by ``read``."""

    result: RoundResult


# --8<-- [start:toy_runner]
@dataclass
class ToyRunner:
    """Next token = last input token + 1."""

    last_sampled: dict[str, int] = field(default_factory=dict)  # plays the role of device memory
    cache: dict[int, int] = field(default_factory=dict)  # KV slot -> the token stored there
    launches: int = 0

    def launch(self, plan: RoundPlan) -> ToyLaunch:
        result = RoundResult(plan.round_id)
        for seq in plan.seqs:
            tokens = self._resolve(seq)
            self._write_cache(seq, tokens)
            if seq.sample:
                next_token = tokens[-1] + 1
                result.tokens[seq.request_id] = [next_token]
                self.last_sampled[seq.request_id] = next_token
        self.launches += 1
        return ToyLaunch(result)

    def read(self, handle: ToyLaunch) -> RoundResult:
        return handle.result

    def release(self, request_id: str) -> None:
        self.last_sampled.pop(request_id, None)
# --8<-- [end:toy_runner]

    def _resolve(self, seq: SeqPlan) -> list[int]:
        """Replace the in-flight marker by the token this request sampled last (from "device memory")."""
        return [self.last_sampled[seq.request_id] if t is IN_FLIGHT else t for t in seq.token_ids]

    def _write_cache(self, seq: SeqPlan, tokens: list[int]) -> None:
        expected_context = len(seq.context_slots) - len(tokens)
        if expected_context != seq.start_pos or tuple(seq.context_slots[seq.start_pos:]) != seq.new_slots:
            raise AssertionError(f"{seq.request_id}: context slots do not end with the new slots")
        for slot, token in zip(seq.new_slots, tokens):
            self.cache[slot] = token

    def cached_tokens(self, slots: list[int]) -> list[int]:
        """The tokens stored in ``slots`` (tests compare them with prompt + output[:-1])."""
        return [self.cache[s] for s in slots]
