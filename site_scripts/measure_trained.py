"""``python -m site_scripts.measure_trained``: what the trained target and draft do, measured with the engine.

Usage::

    python -m site_scripts.measure_trained [FOLDER]   # default trained/; writes FOLDER/measurements.json

Run once after ``train_models`` (it needs the corpora in ``.cache/corpora/`` for the held-out prompts and the
corpus-only draft's weights in ``.cache/train-run/``). Everything runs on the CPU, one thread, float32
computation on the bfloat16 weights, through this engine (``runtime.factory.build_engine``):

* greedy speculative decoding with the distilled draft at widths 1 to 8 on held-out prompts of both
  languages: accepted draft tokens per verify round and the share of drafts accepted;
* the same at width 4 with the draft trained on the corpus alone, and with a random draft of the same shape;
* width 4 at temperatures 0.6 and 1.0 (seeded);
* wall time and tokens per second of plain and speculative decoding (median of three runs);
* repetition: distinct 4-grams among the 4-grams of 200 greedy tokens (the first three prompts);
* which tokens the draft predicts as the target does, by kind (line end, punctuation, Chinese character,
  English word), on the target's own greedy text.

The record (``measurements.json``) keeps the prompts, the settings, the CPU model name and every figure; the
site's pages show it through ``gen_trained``. Non-scope: training (``train_models``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from site_scripts.train_models import OUTPUT, RUN_CACHE, cpu_model, git_commit

WIDTHS = (1, 2, 4, 8)
TEMPERATURES = (0.0, 0.6, 1.0)
PROMPTS_PER_LANGUAGE = 6
NEW_TOKENS = 64
REPETITION_TOKENS = 200
REPETITION_PROMPTS = 3
SEED = 1


def held_out_prompts() -> dict[str, list[str]]:
    """Prompts from the held-out split: the opening of a speech of a held-out play (up to and including
    the speaker's name), and the title and author of a held-out poem."""
    from site_scripts.corpora import load_corpus

    held = load_corpus().held_out
    prompts: dict[str, list[str]] = {"en": [], "zh": []}
    play = "\n".join(held["en"])
    speakers = [i for i, line in enumerate(play.split("\n")) if _is_speaker(line)]
    lines = play.split("\n")
    step = len(speakers) // PROMPTS_PER_LANGUAGE
    for k in range(PROMPTS_PER_LANGUAGE):
        i = speakers[k * step + step // 2]
        prompts["en"].append("\n".join(lines[max(0, i - 6): i + 1]).strip("\n") + "\n")
    poems = held["zh"]
    for k in range(PROMPTS_PER_LANGUAGE):
        title, author = poems[k * (len(poems) // PROMPTS_PER_LANGUAGE)].split("\n")[:2]
        prompts["zh"].append(f"{title}\n{author}\n")
    return prompts


def _is_speaker(line: str) -> bool:
    """A speaker's name line of the Gutenberg plays: ``Macb.``, ``First Witch.``."""
    return 2 <= len(line) <= 24 and line.endswith(".") and line[0].isupper() and line.count(" ") <= 2


def load(folder: Path):
    from mini_deepinfer.models.loader import load_checkpoint

    return load_checkpoint(folder, torch.float32).model


def random_like(draft):
    from mini_deepinfer.models import build_model

    return build_model(draft.config, torch.float32, "cpu", seed=0)


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


def speed(target, draft, prompt: list[int], width: int, repeats: int = 3) -> dict[str, Any]:
    """Median wall time of ``2 * NEW_TOKENS`` greedy tokens, plainly (``draft`` None) or speculatively."""
    params = SamplingParams(max_new_tokens=2 * NEW_TOKENS, ignore_eos=True)
    decode(target, draft, prompt, width, params)  # warm-up
    walls = [decode(target, draft, prompt, width, params)["wall_s"] for _ in range(repeats)]
    median = statistics.median(walls)
    return {"wall_s": round(median, 4), "tokens_per_s": round(params.max_new_tokens / median, 1),
            "runs_s": [round(w, 4) for w in walls]}


def distinct_4grams(tokens: Sequence[int]) -> float:
    grams = [tuple(tokens[i: i + 4]) for i in range(len(tokens) - 3)]
    return round(len(set(grams)) / len(grams), 3)


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


def measure(folder: Path) -> dict[str, Any]:
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    from mini_deepinfer.runtime.text import TextTokenizer

    torch.set_num_threads(1)
    tokenizer = TextTokenizer.from_file(folder / "target" / "tokenizer.json")
    target, draft = load(folder / "target"), load(folder / "draft")
    drafts = {"distilled": draft, "corpus only": load(RUN_CACHE / "draft-corpus-only"),
              "random": random_like(draft)}
    texts = held_out_prompts()
    prompts = {lang: [tokenizer.encode(t) for t in ts] for lang, ts in texts.items()}
    record: dict[str, Any] = {"cpu": cpu_model(), "threads": 1, "torch": torch.__version__,
                              "compute_dtype": "float32 (bfloat16 weights)", "commit": git_commit(),
                              "prompts": texts, "new_tokens": NEW_TOKENS, "seed": SEED}
    record["widths"] = {lang: {str(w): acceptance(target, draft, ps, w, 0.0) for w in WIDTHS}
                        for lang, ps in prompts.items()}
    print("widths", record["widths"], flush=True)
    # width 4, greedy, the distilled draft: measured once, in the widths table
    record["drafts"] = {lang: {name: record["widths"][lang]["4"] if name == "distilled" else
                               acceptance(target, d, ps, 4, 0.0) for name, d in drafts.items()}
                        for lang, ps in prompts.items()}
    print("drafts", record["drafts"], flush=True)
    record["temperatures"] = {lang: {str(t): record["widths"][lang]["4"] if t == 0.0 else
                                     acceptance(target, draft, ps, 4, t) for t in TEMPERATURES}
                              for lang, ps in prompts.items()}
    record["speed"] = {lang: {"plain": speed(target, None, ps[0], 0),
                              "speculative k=4": speed(target, draft, ps[0], 4)}
                       for lang, ps in prompts.items()}
    print("speed", record["speed"], flush=True)
    greedy = SamplingParams(max_new_tokens=REPETITION_TOKENS, ignore_eos=True)
    outputs = {lang: [decode(target, None, p, 0, greedy)["tokens"] for p in ps[:REPETITION_PROMPTS]]
               for lang, ps in prompts.items()}
    record["repetition"] = {lang: {"distinct_4grams": [distinct_4grams(o) for o in outs],
                                   "first_text": tokenizer.decode(outs[0])}
                            for lang, outs in outputs.items()}
    target_hf = Qwen3_5ForCausalLM.from_pretrained(folder / "target", dtype=torch.float32).eval()
    draft_hf = Qwen3_5ForCausalLM.from_pretrained(folder / "draft", dtype=torch.float32).eval()
    record["agreement_by_kind"] = {
        lang: agreement_by_kind(target_hf, draft_hf, tokenizer,
                                [(len(p), p + o[:NEW_TOKENS]) for p, o in zip(prompts[lang], outputs[lang])])
        for lang in prompts}
    return record


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else OUTPUT
    record = measure(folder)
    (folder / "measurements.json").write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n",
                                              encoding="utf-8")
    print(json.dumps({k: record[k] for k in ("widths", "drafts", "speed", "repetition")}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
