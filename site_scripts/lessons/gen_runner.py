"""Lesson 5's printout: the round plans of a small batch and the ``ForwardBatch`` the runner makes of each.

Scope: a random tiny Qwen3.5 (built in code, fixed seed, one CPU thread), a ``BatchEngine`` with a budget of
8 tokens and chunked prefill, and three requests: A (4 prompt tokens) and B (10) arrive first, C (3) after
round 1. Round 2 is then a mixed round: A decodes, B continues its prompt, C starts its prompt. For rounds 1
and 2 the script prints each ``SeqPlan`` and every tensor of the ``ForwardBatch`` that
``ModelRunner.prepare`` built from the plan, then the rows that got logits and the sampled tokens.
``python -m site_scripts.lessons.gen_runner`` prints the same text the generator writes.
Non-scope: explaining the printout (the lesson does), the model maths (lesson 6), the cache (lesson 7).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.plan import RoundPlan, SeqPlan
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.models import ForwardBatch, build_model
from mini_deepinfer.models.presets import qwen3_5_config
from mini_deepinfer.runtime.factory import new_cache
from mini_deepinfer.runtime.model_runner import ModelRunner, Prepared
from site_scripts.build.common import run_module

CONFIG = qwen3_5_config("tiny", vocab_size=1000, tie_word_embeddings=True)
KV_CAPACITY = 32
BUDGET = 8
FIRST = {"A": [11, 12, 13, 14], "B": [21, 22, 23, 24, 25, 26, 27, 28, 29, 30]}
LATER = {"C": [31, 32, 33]}  # submitted after round 1
ROUNDS = 2


@dataclass
class RecordingRunner(ModelRunner):
    """A ``ModelRunner`` that keeps every plan it prepared and the ``ForwardBatch`` made of it."""

    rounds: list[tuple[RoundPlan, ForwardBatch]] = field(default_factory=list)

    def prepare(self, plan: RoundPlan) -> Prepared:
        prepared = super().prepare(plan)
        self.rounds.append((plan, prepared.batch))
        return prepared


def ints(values: Sequence[int] | torch.Tensor) -> str:
    """``[0, 1, 2]`` for a list or a 1-D tensor of ints."""
    items = values.tolist() if isinstance(values, torch.Tensor) else list(values)
    return "[" + ", ".join(map(str, items)) + "]"


def plan_line(seq: SeqPlan) -> str:
    return (f"  {seq.request_id}  {seq.kind:<7}  token_ids={ints(seq.token_ids)}  start_pos={seq.start_pos}  "
            f"new_slots={ints(seq.new_slots)}\n"
            f"              context_slots={ints(seq.context_slots)}  state_slot={seq.state_slot}  "
            f"sample={seq.sample}")


def batch_lines(plan: RoundPlan, batch: ForwardBatch) -> list[str]:
    layout = batch.layout
    ids = [s.request_id for s in plan.seqs]
    kv = " | ".join(f"{ids[b]} {ints(batch.kv_slots[b])}" for b in layout.prefill_seqs) or "-"
    group = ", ".join(ids[b] for b in layout.decode_seqs) or "-"
    index = layout.decode_kv_index if layout.decode_kv_index is not None else []
    keys = " | ".join(f"{ids[b]} {ints(row)}" for b, row in zip(layout.decode_seqs, index))
    rows = [
        ("input_ids", ints(batch.input_ids)),
        ("positions", ints(batch.positions)),
        ("query_lens", ints(batch.query_lens)),
        ("context_lens", ints(batch.context_lens)),
        ("slot_mapping", ints(batch.slot_mapping)),
        ("state_slots", ints(batch.state_slots)),
        ("fresh_slots", ints(batch.fresh_slots)),
        ("logits_indices", ints(batch.logits_indices)),
        ("decode group", f"{group} (one token each: batched attention and recurrent step)"),
        ("decode keys", (keys or "-") + ("  (padded, masked)" if layout.decode_kv_mask is not None else "")),
        ("other kv_slots", kv),
    ]
    return [f"  {name:<15}{value}" for name, value in rows]


def round_text(plan: RoundPlan, batch: ForwardBatch, sampled: dict[str, list[int]]) -> str:
    who = ", ".join(s.request_id for s in plan.seqs)
    lines = [f"round {plan.round_id}: {plan.num_tokens} of {BUDGET} tokens ({who})", "", "RoundPlan.seqs"]
    lines += [plan_line(s) for s in plan.seqs]
    lines += ["", "ModelRunner.prepare(plan) -> ForwardBatch", *batch_lines(plan, batch), ""]
    samplers = [s.request_id for s in plan.seqs if s.sample]
    rows = ", ".join(f"row {r} -> {rid}" for r, rid in zip(batch.logits_indices.tolist(), samplers))
    got = ", ".join(f"{rid} {sampled[rid][0]}" for rid in samplers)
    lines.append(f"logits: {len(samplers)} x {CONFIG.vocab_size} ({rows}); greedy tokens: {got}")
    return "\n".join(lines) + "\n"


def run() -> str:
    """Run the two rounds and return the printout."""
    torch.set_num_threads(1)  # one thread: the float sums, hence the greedy tokens, are the same everywhere
    model = build_model(CONFIG, torch.float32, "cpu", seed=0)
    runner = RecordingRunner(model, new_cache(model, KV_CAPACITY, 3))
    engine = BatchEngine(runner, EngineConfig(kv_capacity=KV_CAPACITY, state_capacity=3, max_num_seqs=3,
                                              max_batched_tokens=BUDGET, chunked_prefill=True))
    params = SamplingParams(max_new_tokens=3)
    for rid, prompt in FIRST.items():
        engine.submit(rid, prompt, params)
    texts = []
    for round_index in range(ROUNDS):
        if round_index == 1:
            for rid, prompt in LATER.items():
                engine.submit(rid, prompt, params)
        deliveries = engine.step()
        plan, batch = runner.rounds[-1]
        texts.append(round_text(plan, batch, {d.request_id: list(d.tokens) for d in deliveries}))
    return "\n".join(texts)


OUTPUTS = {"runner/forward-batch.txt": lambda: run_module("site_scripts.lessons.gen_runner")}

if __name__ == "__main__":
    print(run(), end="")
