"""The steps in order: what ``python -m training`` runs to make ``trained/``, and how its errors read.

Scope: the plan of a full run and of a smoke run (schedules, evaluation sizes, how much of the target's text
the draft learns from), preparing the text (corpora, tokenizer, token streams), training the target, and
training the two drafts (distilled from the target; of the same shape, on the corpus alone, to measure what
distillation adds), each written with its record; and :func:`command`, the wrapper both training commands
(``__main__.py``, ``measure.py``) go through, so that a refusal is one line on stderr and exit code 2.

One full run takes about an hour on two CPU threads (``THREADS``, recorded); it is run by hand, never by
``make test`` or ``make serve``. Non-scope: the steps themselves (``corpora.py`` to ``record.py``), the
command line (``__main__.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mini_deepinfer.tools.cli import run_command
from training import loop
from training.corpora import Corpus, load_corpus
from training.distill import PROMPT_TOKENS, MixedWindows, distillation_loss, target_text
from training.evaluate import bits_per_char, evaluator
from training.loop import Schedule
from training.record import base_record, bf16_copy, git_commit, rescore, shares_text, write_json, write_model
from training.tokenizer import stop_ids, token_chars, token_stream, train_tokenizer

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "trained"
RUN_CACHE = ROOT / ".cache" / "train-run"  # intermediate weights, the corpus-only draft (never committed)
SHARES = {"en": 2, "zh": 1}  # windows of each language per 3 in a batch (English is the smaller corpus)
DRAFT_SHARES = {"en": 1, "zh": 1}  # the drafts' training windows
THREADS = 2  # both cores of the machines this runs on; the record says how many were used
SEED = 20260
DRAFTS = ("draft", "draft-corpus-only")  # distilled from the target; trained on the corpus alone
EXTRAS = {"transformers": "parity", "tokenizers": "model", "safetensors": "model", "opencc": "train"}
"""Which of pyproject's extras installs each package the training commands import."""


@dataclass(frozen=True)
class Plan:
    target: Schedule
    draft: Schedule
    eval_tokens: int
    final_eval_tokens: int
    eval_every: int
    generated_rows: dict[str, int]  # windows of the target's own text, per language, for distilling the draft


# The draft's Chinese is where it agrees least with the target (a character among many plausible ones), so
# four fifths of the target's text it learns from is Chinese.
FULL = Plan(Schedule(3300, 3e-3, 100, batch=18, dropout=0.1), Schedule(2000, 3e-3, 60), 8192, 32768, 300,
            {"en": 1024, "zh": 4096})
SMOKE = Plan(Schedule(6, 2e-3, 2, batch=6, dropout=0.1), Schedule(4, 3e-3, 2), 1024, 2048, 3,
             {"en": 2, "zh": 2})


@dataclass
class Prepared:
    """The text as the models read it: the corpus, the tokenizer trained on it, and the token streams."""

    corpus: Corpus
    tokenizer: Any
    streams: dict[str, torch.Tensor]  # training text, per language
    held: dict[str, torch.Tensor]  # held_out_en, held_out_zh
    unseen: dict[str, torch.Tensor]  # unseen_en, unseen_zh


def prepare(limit_docs: int | None = None) -> Prepared:
    """The corpus, the tokenizer trained on it, and the token streams: training, held-out, unseen."""
    corpus = load_corpus()
    train_docs = {lang: docs[:limit_docs] for lang, docs in corpus.train.items()}
    tokenizer = train_tokenizer([d for docs in train_docs.values() for d in docs])
    streams = {lang: token_stream(tokenizer, docs) for lang, docs in train_docs.items()}
    held = {f"held_out_{lang}": token_stream(tokenizer, docs) for lang, docs in corpus.held_out.items()}
    unseen = {f"unseen_{lang}": token_stream(tokenizer, docs) for lang, docs in corpus.unseen.items()}
    print({k: len(v) for k, v in {**streams, **held, **unseen}.items()}, flush=True)
    return Prepared(corpus, tokenizer, streams, held, unseen)


def final_scores(model, text: Prepared, plan: Plan) -> dict[str, Any]:
    """Bits per character on the held-out and the unseen text, ``plan.final_eval_tokens`` of each."""
    chars = token_chars(text.tokenizer)
    return {name: bits_per_char(model, stream, chars, plan.final_eval_tokens)
            for name, stream in {**text.held, **text.unseen}.items()}


def train_target(text: Prepared, plan: Plan, seed: int, commit: str, output: Path):
    """Train the target on next-token loss, round it to bfloat16 and write it with its record."""
    config = loop.model_config(loop.TARGET_SHAPE, text.tokenizer.get_vocab_size(), stop_ids(text.tokenizer))
    target = loop.new_model(config, seed)
    evaluate = evaluator(text.held, token_chars(text.tokenizer), plan.eval_tokens)
    windows = loop.Windows(text.streams, seed, shares=SHARES)
    run = loop.train(target, windows, plan.target, loop.next_token_loss, "target", evaluate, plan.eval_every,
                     partial=RUN_CACHE)
    target = bf16_copy(target)
    record = base_record(text.corpus, config, seed, plan.target, commit, SHARES)
    record.update(parameters=sum(p.numel() for p in target.parameters()), training=run,
                  objective="next-token cross-entropy", scores=final_scores(target, text, plan),
                  scored="from the bfloat16 weights (rotary frequencies in float32)",
                  train_tokens={k: len(v) for k, v in text.streams.items()})
    write_model(target, text.tokenizer, output / "target", record)
    return target


def read_target(text: Prepared, plan: Plan, output: Path):
    """The target an earlier run wrote to ``output/target`` (waiting while one still trains elsewhere),
    its record rescored from the files as written."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    while not (output / "target" / "training.json").is_file():
        time.sleep(10)
    target = Qwen3_5ForCausalLM.from_pretrained(output / "target", dtype=torch.float32).eval()
    rescore(output / "target", final_scores(target, text, plan))
    return target


def draft_batches(name: str, target, text: Prepared, plan: Plan, seed: int) -> tuple[Any, Callable]:
    """The windows and the loss of a draft: half the target's own text and KL from the target's logits for
    the distilled draft, the training text and next-token loss for the corpus-only one."""
    windows = loop.Windows(text.streams, seed + 1, shares=DRAFT_SHARES)
    if name != "draft":
        return windows, loop.next_token_loss
    started = time.perf_counter()
    eot = text.tokenizer.token_to_id("<|endoftext|>")
    generated = target_text(target, text.streams, plan.generated_rows, seed + 2, eot=eot)
    print(f"target text: {tuple(generated.shape)} in {time.perf_counter() - started:.0f} s", flush=True)
    return MixedWindows(windows, generated, seed + 3), distillation_loss(target)


def train_draft(name: str, target, text: Prepared, plan: Plan, seed: int, commit: str, output: Path) -> None:
    """Train one draft and write it with its record (the corpus-only one's weights stay in the cache; its
    record is committed beside the draft as ``draft-corpus-only-training.json``)."""
    config = loop.model_config(loop.DRAFT_SHAPE, text.tokenizer.get_vocab_size(), stop_ids(text.tokenizer))
    windows, loss_fn = draft_batches(name, target, text, plan, seed)
    evaluate = evaluator(text.held, token_chars(text.tokenizer), plan.eval_tokens)
    draft = loop.new_model(config, seed + 1)
    run = loop.train(draft, windows, plan.draft, loss_fn, name, evaluate, plan.eval_every, partial=RUN_CACHE)
    draft = bf16_copy(draft)
    record = base_record(text.corpus, config, seed + 1, plan.draft, commit, DRAFT_SHARES)
    if name == "draft":
        counts = ", ".join(f"{n} {lang}" for lang, n in plan.generated_rows.items())
        record["schedule"].update(generated_rows=plan.generated_rows, mix=(
            f"half training windows ({shares_text(DRAFT_SHARES)}), half the bfloat16 target's greedy "
            f"continuations of training-text openings of {PROMPT_TOKENS} tokens ({counts}; half at "
            f"document starts; seed {seed + 2})"))
    record.update(parameters=sum(p.numel() for p in draft.parameters()), training=run,
                  objective=("KL(target || draft) over the vocabulary, from the bfloat16 target's logits"
                             if name == "draft" else "next-token cross-entropy (the corpus alone)"),
                  scores=final_scores(draft, text, plan),
                  train_tokens={k: len(v) for k, v in text.streams.items()})
    folder = output / name if name == "draft" else RUN_CACHE / name
    write_model(draft, text.tokenizer, folder, record)
    if name != "draft":
        made = json.loads((folder / "training.json").read_text(encoding="utf-8"))
        write_json(output / f"{name}-training.json", made)


# --8<-- [start:run]
def run(output: Path, plan: Plan, seed: int, limit_docs: int | None = None,
        drafts_only: bool = False, drafts: Sequence[str] = DRAFTS) -> None:
    """Every step; with ``drafts_only`` only the ``drafts`` named, the target read from ``output/target``
    (as written by an earlier run: a draft then learns from exactly the weights it would have learnt from in
    one run, and the corpus-only draft, which does not read the target, can train beside the target)."""
    torch.set_num_threads(THREADS)
    started, commit = time.perf_counter(), git_commit()  # the code that trains
    text = prepare(limit_docs)
    target = None
    if not drafts_only:
        target = train_target(text, plan, seed, commit, output)
    elif "draft" in drafts:
        target = read_target(text, plan, output)
    for name in drafts:
        train_draft(name, target, text, plan, seed, commit, output)
    print(f"done in {time.perf_counter() - started:.0f} s", flush=True)
# --8<-- [end:run]


@contextmanager
def missing_packages() -> Iterator[None]:
    """A package the training commands need but cannot import becomes one line naming the extra to install."""
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in EXTRAS:
            raise
        raise ValueError(f"the training commands need {top}, which is not installed "
                         f"(python -m pip install -e \".[{EXTRAS[top]}]\")") from None


def command(body: Callable[[list[str]], int], argv: Sequence[str] | None = None) -> int:
    """Run a training command's ``body`` as the engine's commands run (``tools.cli.run_command``): a bad
    archive, a missing package, a full disk or an unwritable folder is one line on stderr and exit code 2,
    Ctrl-C one line and 130, never a traceback; the writers leave nothing half-written."""

    def guarded(args: list[str]) -> int:
        with missing_packages():
            return body(args)

    return run_command(guarded, argv, errors=(ValueError, OSError))
