"""``python -m training.measure``: what the trained target and draft do, measured with the engine.

Usage::

    python -m training.measure [FOLDER]   # default trained/; writes FOLDER/measurements.json
    python -m training.measure --part repetition_sampled   # only that part, the rest of the record kept

Run once after ``python -m training`` (it needs the corpora in ``.cache/corpora/`` for the held-out prompts
and the corpus-only draft's weights in ``.cache/train-run/``). Everything runs on the CPU, one thread, float32
computation on the bfloat16 weights, through this engine (``runtime.factory.build_engine``):

* greedy speculative decoding with the distilled draft at widths 1 to 8 on held-out prompts of both
  languages: accepted draft tokens per verify round and the share of drafts accepted;
* the same at width 4 with the draft trained on the corpus alone, and with a random draft of the same shape;
* width 4 at temperatures 0.6 and 1.0 (seeded);
* wall time and tokens per second of plain and speculative decoding (median of three runs);
* repetition: distinct 4-grams among the 4-grams of 200 greedy tokens (the first three prompts);
* ``--part``, alone or in a whole run, each with its own CPU, threads, torch and commit: the same counts
  for 200 sampled tokens at lesson 8's settings and seeds beside greedy (``repetition_sampled``); the
  corpora's sizes and held-out parts (``corpora``);
* which tokens the draft predicts as the target does, by kind (line end, punctuation, Chinese character,
  English word), on the target's own greedy text.

Scope: the prompts (held-out text of both languages), the settings, the runs above and their record. The
record (``measurements.json``, written whole or not at all) keeps the prompts, the settings, the CPU
model name and every figure; the site's pages show it through ``gen_trained``. Errors are one line on stderr
and exit code 2, as in the training command. Non-scope: training (``python -m training``), the measures
themselves (``evaluate.py``).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.tools.cli import OneLineParser
from training.evaluate import (
    NEW_TOKENS,
    SEED,
    acceptance,
    agreement_by_kind,
    decode,
    distinct_4grams,
    repetition_runs,
)
from training.record import cpu_model, git_commit, write_json
from training.run import OUTPUT, RUN_CACHE, command

WIDTHS = (1, 2, 4, 8)
TEMPERATURES = (0.0, 0.6, 1.0)
PROMPTS_PER_LANGUAGE = 6
REPETITION_TOKENS = 200
REPETITION_PROMPTS = 3
SAMPLED = {  # lesson 8's sampled settings (snippets/trained/sampling.txt), as SamplingParams fields
    "temperature 0.8": {"temperature": 0.8},
    "temperature 1.5": {"temperature": 1.5},
    "temperature 1.5, top-k 5": {"temperature": 1.5, "top_k": 5},
    "temperature 1.5, top-p 0.5": {"temperature": 1.5, "top_p": 0.5},
}
SAMPLED_SEEDS = (0, 1, 2, 3, 4)


def held_out_prompts(corpus=None) -> dict[str, list[str]]:
    """Prompts from the held-out split: the opening of a speech of a held-out play (up to and including
    the speaker's name), and the title and author of a held-out poem."""
    from training.corpora import load_corpus

    held = (corpus or load_corpus()).held_out
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
    """A committed model in this engine, float32 computation on its bfloat16 weights."""
    from mini_deepinfer.models.loader import load_checkpoint

    return load_checkpoint(folder, torch.float32).model


def random_like(draft):
    """A draft of the same shape with seeded random weights: the acceptance of a draft that learnt nothing."""
    from mini_deepinfer.models import build_model

    return build_model(draft.config, torch.float32, "cpu", seed=0)


def speed(target, draft, prompt: list[int], width: int, repeats: int = 3) -> dict[str, Any]:
    """Median wall time of ``2 * NEW_TOKENS`` greedy tokens, plainly (``draft`` None) or speculatively."""
    params = SamplingParams(max_new_tokens=2 * NEW_TOKENS, ignore_eos=True)
    decode(target, draft, prompt, width, params)  # warm-up
    walls = [decode(target, draft, prompt, width, params)["wall_s"] for _ in range(repeats)]
    median = statistics.median(walls)
    return {"wall_s": round(median, 4), "tokens_per_s": round(params.max_new_tokens / median, 1),
            "runs_s": [round(w, 4) for w in walls]}


def acceptances(target, drafts: dict[str, Any], prompts: dict[str, list[list[int]]]) -> dict[str, Any]:
    """Acceptance by width (the distilled draft, greedy), by draft (width 4, greedy) and by temperature
    (the distilled draft, width 4); the greedy width-4 run of the distilled draft is measured once."""
    draft = drafts["distilled"]
    widths = {lang: {str(w): acceptance(target, draft, ps, w, 0.0) for w in WIDTHS}
              for lang, ps in prompts.items()}
    print("widths", widths, flush=True)
    by_draft = {lang: {name: widths[lang]["4"] if name == "distilled" else acceptance(target, d, ps, 4, 0.0)
                       for name, d in drafts.items()} for lang, ps in prompts.items()}
    print("drafts", by_draft, flush=True)
    temperatures = {lang: {str(t): widths[lang]["4"] if t == 0.0 else acceptance(target, draft, ps, 4, t)
                           for t in TEMPERATURES} for lang, ps in prompts.items()}
    return {"widths": widths, "drafts": by_draft, "temperatures": temperatures}


def greedy_text(folder: Path, target, tokenizer, prompts: dict[str, list[list[int]]]) -> dict[str, Any]:
    """Repetition in 200 greedy tokens of the first prompts, and the draft's agreement with the target on
    the first 64 of them, by kind of token (transformers' models, whole sequences)."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    greedy = SamplingParams(max_new_tokens=REPETITION_TOKENS, ignore_eos=True)
    outputs = {lang: [decode(target, None, p, 0, greedy)["tokens"] for p in ps[:REPETITION_PROMPTS]]
               for lang, ps in prompts.items()}
    repetition = {lang: {"distinct_4grams": [distinct_4grams(o) for o in outs],
                         "first_text": tokenizer.decode(outs[0])} for lang, outs in outputs.items()}
    target_hf = Qwen3_5ForCausalLM.from_pretrained(folder / "target", dtype=torch.float32).eval()
    draft_hf = Qwen3_5ForCausalLM.from_pretrained(folder / "draft", dtype=torch.float32).eval()
    agreement = {
        lang: agreement_by_kind(target_hf, draft_hf, tokenizer,
                                [(len(p), p + o[:NEW_TOKENS]) for p, o in zip(prompts[lang], outputs[lang])])
        for lang in prompts}
    return {"repetition": repetition, "agreement_by_kind": agreement}


def provenance() -> dict[str, Any]:
    """Where a part of the record was measured: the CPU, the threads, torch and the commit."""
    return {"cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "commit": git_commit()}


def repetition_sampled(target, prompts: dict[str, list[list[int]]]) -> dict[str, Any]:
    """Repetition of greedy text beside sampled text at each of ``SAMPLED``'s settings, as counts."""
    part: dict[str, Any] = {**provenance(), "new_tokens": REPETITION_TOKENS, "ignore_eos": True,
                            "prompts": REPETITION_PROMPTS, "seeds": list(SAMPLED_SEEDS),
                            "settings": {"greedy": {}, **SAMPLED}}
    for lang, ps in prompts.items():
        part[lang] = {name: repetition_runs(target, ps[:REPETITION_PROMPTS], REPETITION_TOKENS, fields,
                                            SAMPLED_SEEDS if fields else (0,))
                      for name, fields in part["settings"].items()}
        print("repetition_sampled", lang, part[lang], flush=True)
    return part


def later_parts(folder: Path, names: list[str], target=None) -> dict[str, Any]:
    """The parts ``--part`` measures alone (``PARTS``), each with its own provenance."""
    from mini_deepinfer.runtime.text import TextTokenizer
    from training.corpora import describe_corpus, load_corpus

    torch.set_num_threads(1)
    corpus = load_corpus()
    found = {"corpora": {**provenance(), **describe_corpus(corpus)}} if "corpora" in names else {}
    if "repetition_sampled" in names:
        tokenizer = TextTokenizer.from_file(folder / "target" / "tokenizer.json")
        prompts = {lang: [tokenizer.encode(t) for t in ts] for lang, ts in held_out_prompts(corpus).items()}
        found["repetition_sampled"] = repetition_sampled(target or load(folder / "target"), prompts)
    return found


PARTS = ("repetition_sampled", "corpora")


def measure(folder: Path) -> dict[str, Any]:
    """Every figure of ``measurements.json``, in its order."""
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
    record.update(acceptances(target, drafts, prompts))
    record["speed"] = {lang: {"plain": speed(target, None, ps[0], 0),
                              "speculative k=4": speed(target, draft, ps[0], 4)}
                       for lang, ps in prompts.items()}
    print("speed", record["speed"], flush=True)
    record.update(greedy_text(folder, target, tokenizer, prompts))
    record.update(later_parts(folder, list(PARTS), target))
    return record


def body(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m training.measure", description=__doc__.split("\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=OUTPUT,
                        help="folder with target/ and draft/ (default trained/); gets measurements.json")
    parser.add_argument("--part", choices=PARTS, action="append",
                        help="measure only this part (repeatable) and write it into the existing "
                        "measurements.json, every other part kept as it is")
    args = parser.parse_args(argv)
    folder = args.folder
    for name in ("target", "draft"):
        if not (folder / name / "config.json").is_file():
            raise ValueError(f"no trained {name} in {folder}: {folder / name / 'config.json'} is missing "
                             "(train them first: python -m training)")
    if args.part:
        return write_parts(folder, args.part)
    record = measure(folder)
    write_json(folder / "measurements.json", record)
    print(json.dumps({k: record[k] for k in ("widths", "drafts", "speed", "repetition")}, ensure_ascii=False))
    return 0


def write_parts(folder: Path, names: list[str]) -> int:
    """Measure ``names`` and write them into ``folder/measurements.json``, which must exist already."""
    path = folder / "measurements.json"
    if not path.is_file():
        raise ValueError(f"--part adds to {path}, which is missing (first: python -m training.measure)")
    write_json(path, {**json.loads(path.read_text(encoding="utf-8")), **later_parts(folder, names)})
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(body, argv)


if __name__ == "__main__":
    sys.exit(main())
