"""Step 5 of training: what the models are scored by, bits per character, acceptance and repetition.

Scope: bits per character of a token stream (cross-entropy over characters, so it compares across
tokenizers), the held-out scores taken during training; one request through this project's engine
(``runtime.factory.build_engine``), plainly or with a draft; speculative acceptance over a set of prompts;
distinct 4-grams (repetition) of greedy or sampled text; and, position by position on the target's own
text, whether the draft's argmax is the target's token, by kind of token.

Non-scope: the prompts, the settings and the record of a measuring run (``measure.py``), the loop that calls
the held-out scores (``loop.py``).
"""

from __future__ import annotations

import math
import time
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from training.loop import SEQ_LEN

NEW_TOKENS = 64  # tokens of each measured request
SEED = 1  # of the first sampled request; request i gets SEED + i


# --8<-- [start:bits_per_char]
@torch.no_grad()
def bits_per_char(model, stream: torch.Tensor, chars: list[int], max_tokens: int,
                  seq_len: int = SEQ_LEN) -> dict[str, float]:
    """Cross-entropy of ``stream``'s first ``max_tokens`` tokens in windows of ``seq_len``, per character.

    Each window starts from an empty context; its first token is not scored. Predicting
    ``<|endoftext|>`` counts in the bits but adds no character.
    """
    stream = stream[: max_tokens]
    windows = stream[: len(stream) // seq_len * seq_len].view(-1, seq_len)
    per_char = torch.tensor(chars, dtype=torch.float64)
    nats, characters, tokens = 0.0, 0.0, 0
    for batch in windows.split(8):
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits.float()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum")
        nats += nll.item()
        characters += per_char[batch[:, 1:]].sum().item()
        tokens += batch[:, 1:].numel()
    return {"bits_per_char": round(nats / math.log(2) / characters, 4),
            "nats_per_token": round(nats / tokens, 4), "tokens": tokens, "chars": int(characters)}
# --8<-- [end:bits_per_char]


def evaluator(streams: dict[str, torch.Tensor], chars: list[int], max_tokens: int
              ) -> Callable[[Any], dict[str, float]]:
    """The held-out scores the loop takes at its held-out points: bits per character of each stream."""
    def evaluate(model) -> dict[str, float]:
        return {name: bits_per_char(model, stream, chars, max_tokens)["bits_per_char"]
                for name, stream in streams.items()}

    return evaluate


def decode(target, draft, prompt: list[int], width: int, params: SamplingParams) -> dict[str, Any]:
    """One request through a fresh engine; its tokens, wall time and the speculative runner's counts."""
    from mini_deepinfer.runtime.factory import build_engine

    config = EngineConfig(kv_capacity=len(prompt) + params.max_new_tokens + 16, spec_width=width)
    engine = build_engine(target, config, draft=draft, batching=False)
    start = time.perf_counter()
    engine.submit("r", prompt, params)
    engine.run()
    wall = time.perf_counter() - start
    stats = dict(engine.runner.stats) if draft is not None else {}
    return {"tokens": engine.requests["r"].output_token_ids, "wall_s": wall, **stats}


# --8<-- [start:acceptance]
def acceptance(target, draft, prompts: Sequence[list[int]], width: int, temperature: float) -> dict[str, Any]:
    """Accepted draft tokens per verify round, and accepted / proposed, over all prompts."""
    accepted = proposed = rounds = 0
    for i, prompt in enumerate(prompts):
        params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True, temperature=temperature,
                                seed=SEED + i if temperature else None)
        run = decode(target, draft, prompt, width, params)
        accepted, proposed, rounds = (accepted + run["accepted"], proposed + run["proposed"],
                                      rounds + run["verify_rounds"])
    return {"accepted_per_round": round(accepted / rounds, 3), "acceptance": round(accepted / proposed, 3),
            "accepted": accepted, "proposed": proposed, "verify_rounds": rounds}
# --8<-- [end:acceptance]


# --8<-- [start:distinct_4grams]
def distinct_4gram_counts(tokens: Sequence[int]) -> dict[str, int]:
    """How many of a text's 4-grams there are, and how many of them are distinct."""
    grams = [tuple(tokens[i: i + 4]) for i in range(len(tokens) - 3)]
    return {"distinct": len(set(grams)), "fourgrams": len(grams)}


def distinct_4grams(tokens: Sequence[int]) -> float:
    """The share of distinct 4-grams among a text's 4-grams: 1 when no run of 4 tokens occurs twice."""
    counts = distinct_4gram_counts(tokens)
    return round(counts["distinct"] / counts["fourgrams"], 3)
# --8<-- [end:distinct_4grams]


def repetition_runs(target, prompts: Sequence[list[int]], tokens: int, fields: dict[str, Any],
                    seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Distinct and all 4-grams of ``tokens`` tokens (eos ignored) after each prompt, for each seed;
    ``fields`` are the sampling settings (none: greedy)."""
    runs = []
    for i, prompt in enumerate(prompts):
        for seed in seeds:
            params = SamplingParams(max_new_tokens=tokens, ignore_eos=True, seed=seed, **fields)
            runs.append({"prompt": i, "seed": seed,
                         **distinct_4gram_counts(decode(target, None, prompt, 0, params)["tokens"])})
    return runs


def token_kind(text: str) -> str:
    """The kind of a token's text: line end, punctuation, Chinese character(s), English word (piece)."""
    if "\n" in text:
        return "line end"
    stripped = text.strip()
    if not stripped:
        return "space"
    if all(unicodedata.category(c).startswith("P") for c in stripped):
        return "punctuation"
    if any("\u4e00" <= c <= "\u9fff" or ord(c) > 0x20000 for c in stripped):
        return "Chinese"
    if text.startswith(" ") or text[:1].isupper():
        return "word start"
    return "word piece"


@torch.no_grad()
def agreement_by_kind(target_hf, draft_hf, tokenizer, sequences: Sequence[tuple[int, list[int]]]
                      ) -> dict[str, dict[str, Any]]:
    """For each position of the target's greedy text: does the draft's argmax equal the target's token?"""
    counts: dict[str, list[int]] = {}
    for prompt_len, ids in sequences:
        x = torch.tensor([ids])
        draft_next = draft_hf(input_ids=x, use_cache=False).logits[0].argmax(-1)
        for pos in range(prompt_len, len(ids)):
            kind = token_kind(tokenizer.decode([ids[pos]]))
            right, total = counts.setdefault(kind, [0, 0])
            counts[kind] = [right + int(draft_next[pos - 1].item() == ids[pos]), total + 1]
    return {kind: {"agree": right, "tokens": total, "share": round(right / total, 3)}
            for kind, (right, total) in sorted(counts.items(), key=lambda kv: -kv[1][1])}
