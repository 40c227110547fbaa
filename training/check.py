"""Reproducing the record: ``python -m training --check STEPS`` retrains the target's first steps.

Scope: with the record's seed, schedule and number of threads, train the tokenizer again (its SHA-256 must be
the recorded one) and the target's first STEPS steps; compare the loss curve and the held-out bits per
character at the recorded points up to STEPS (``--check 300`` reaches the first) with the record, print each
figure beside the recorded one, and write what was found to ``target-check.json`` beside the target's folder
(the pages' reproducibility sentence comes from it). A figure more than 2 % off, or another tokenizer, fails.

Non-scope: training the whole model (``run.py``), the drafts (never rechecked: they learn from the target).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from training.corpora import file_sha256
from training.evaluate import evaluator
from training.loop import TARGET_SHAPE, Schedule, Windows, model_config, new_model, next_token_loss, train
from training.record import cpu_model, git_commit, write_json
from training.run import FULL, RUN_CACHE, prepare
from training.tokenizer import stop_ids, token_chars

TOLERANCE = 0.02  # the largest relative difference a figure may have from the recorded one


def compared(made: dict[str, Any], run: dict[str, Any]) -> list[tuple[str, float, float]]:
    """``(what, rerun, recorded)`` for each loss and each held-out figure the rerun logged."""
    recorded = dict((step, loss) for step, loss in made["training"]["loss"])
    pairs = [(f"step {step}: loss", loss, recorded[step]) for step, loss in run["loss"]]
    points = {point["step"]: point for point in made["training"]["held_out_during"]}
    pairs += [(f"step {point['step']}: {key}", point[key], points[point["step"]][key])
              for point in run["held_out_during"] for key in point if key != "step"]
    return pairs


# --8<-- [start:check]
def check_against_record(folder: Path, steps: int) -> int:
    """Retrain the first ``steps`` steps with the record's seed; compare tokenizer, loss curve and held-out
    bits per character with it. Exits 1 if the tokenizer differs or a figure is more than 2 % off."""
    made = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    torch.set_num_threads(made["threads"])  # the same reductions in the same order as the recorded run
    text = prepare()
    scratch = RUN_CACHE / "check-tokenizer.json"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    text.tokenizer.save(str(scratch))
    same_tokenizer = file_sha256(scratch) == made["tokenizer_sha256"]
    model = new_model(model_config(TARGET_SHAPE, text.tokenizer.get_vocab_size(), stop_ids(text.tokenizer)),
                      made["seed"])
    keys = ("steps", "peak_lr", "warmup", "batch", "dropout")
    schedule = Schedule(**{k: made["schedule"][k] for k in keys})
    windows = Windows(text.streams, made["seed"], shares=made["schedule"]["shares"])
    evaluate = evaluator(text.held, token_chars(text.tokenizer), FULL.eval_tokens)
    run = train(model, windows, schedule, next_token_loss, "check", evaluate, FULL.eval_every,
                stop_after=steps)
    pairs = compared(made, run)
    worst = max((abs(got - then) / then for _, got, then in pairs), default=0.0)
    for what, got, then in pairs:
        print(f"{what} {got:.4f}, recorded {then:.4f}")
    print(f"tokenizer {'identical' if same_tokenizer else 'DIFFERENT'}; largest difference {worst:.2%}")
    passed = same_tokenizer and worst <= TOLERANCE
    write_json(folder.parent / "target-check.json", {
        "steps": steps, "cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__,
        "commit": git_commit(), "same_tokenizer": same_tokenizer, "largest_difference": round(worst, 5),
        "passed": passed, "compared": [{"what": what, "rerun": round(got, 4), "recorded": round(then, 4)}
                                       for what, got, then in pairs],
        "command": f"python -m training --check {steps}"})
    return 0 if passed else 1
# --8<-- [end:check]
