"""Step 6 of training: the record, and the models written in the Hugging Face layout beside it.

Scope: what a training record says (the corpora and their SHA-256, the shape, the seed, the schedule, the
tokens seen, the CPU, the number of threads, the library versions, the command, the commit), rounding a
model to bfloat16 as it is committed, and writing a model folder (``config.json``, ``model.safetensors``,
``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``, ``training.json``).

Nothing is ever half-written: a model folder is built under a hidden name beside its place and renamed into
place when complete (``tools.files.staged_folder``), a JSON file is written to a hidden temporary file and
renamed over the old one; on a full disk, an error or Ctrl-C the old files stay as they were, and a full disk
is one line (``NoSpaceError``).

Non-scope: the figures in the record (``loop.py``, ``evaluate.py``), which records a run writes (``run.py``).
"""

from __future__ import annotations

import copy
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

from mini_deepinfer.tools.files import default_file_mode, disk_errors, staged_folder
from training.corpora import ARCHIVES, Corpus, file_sha256
from training.loop import COMPUTE, SEQ_LEN, Schedule
from training.tokenizer import tokenizer_config

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python -m training"


def cpu_model() -> str:
    """``lscpu``'s model name (the machine the figures come from)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        lines = [line for line in out.splitlines() if line.startswith("Model name")]
        return lines[0].split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        return platform.processor() or "unknown"


def git_commit() -> str:
    """The commit of the code that trains, with ``+uncommitted changes`` when the tree differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@torch.no_grad()
def bf16_copy(model):
    """The model as it is committed: its parameters rounded to bfloat16, kept in float32 to compute.

    Only the parameters: the rotary frequencies (a buffer) stay float32, as every loader computes them.
    """
    for param in model.parameters():
        param.copy_(param.to(torch.bfloat16))
    return model


def write_json(path: Path, data: dict[str, Any], indent: int = 1) -> None:
    """``data`` as indented JSON, atomically: a hidden temporary file beside ``path``, renamed over it."""
    text = json.dumps(data, ensure_ascii=False, indent=indent) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with disk_errors(path), os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(scratch, default_file_mode())  # mkstemp makes it owner-only; use the usual mode
        os.replace(scratch, path)
    finally:
        Path(scratch).unlink(missing_ok=True)


# --8<-- [start:write_model]
def write_model(model, tokenizer, folder: Path, record: dict[str, Any]) -> None:
    """The Hugging Face layout in bfloat16, the tokenizer files and ``training.json``, as one folder that
    replaces ``folder`` only when every file is written."""
    from safetensors import SafetensorError

    with staged_folder(folder, force=True) as staging, disk_errors(folder, (SafetensorError,)):
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(staging, safe_serialization=True)
        tokenizer.save(str(staging / "tokenizer.json"))
        write_json(staging / "tokenizer_config.json", tokenizer_config(tokenizer), indent=2)
        write_json(staging / "training.json", dict(
            record, weights_sha256=file_sha256(staging / "model.safetensors"),
            tokenizer_sha256=file_sha256(staging / "tokenizer.json")))
# --8<-- [end:write_model]


def shares_text(shares: dict[str, int]) -> str:
    """``{"en": 2, "zh": 1}`` -> ``"2 English windows to 1 Chinese"``; equal shares -> ``"as many English
    windows as Chinese"``."""
    names = {"en": "English", "zh": "Chinese"}
    if len(set(shares.values())) == 1:
        first, *rest = (names[lang] for lang in shares)
        return f"as many {first} windows as " + " and ".join(rest)
    return " to ".join(f"{n} {names[lang]}" + (" windows" if i == 0 else "")
                       for i, (lang, n) in enumerate(shares.items()))


def base_record(corpus: Corpus, config, seed: int, schedule: Schedule, commit: str,
                shares: dict[str, int]) -> dict[str, Any]:
    """What every training record says before its figures: the text, the shape, the seed, the schedule,
    the machine and the libraries, the command and the commit."""
    import transformers

    return {
        "corpora": [{"registry": a.registry, "name": a.name, "version": a.version, "file": a.file,
                     "sha256": a.sha256, "licence": a.licence} for a in ARCHIVES],
        "sources": corpus.sources,
        "config": {k: v for k, v in config.to_dict().items() if k not in ("transformers_version",)},
        "parameters": None, "seed": seed,
        "schedule": {"steps": schedule.steps, "peak_lr": schedule.peak_lr, "warmup": schedule.warmup,
                     "batch": schedule.batch, "seq_len": SEQ_LEN, "dropout": schedule.dropout,
                     "shares": shares, "mix": shares_text(shares),
                     "optimizer": "AdamW(0.9, 0.95), weight decay 0.1, "
                     "clip 1.0, cosine to 10 %",
                     "compute": f"{str(COMPUTE).removeprefix('torch.')} autocast, float32 weights"},
        "tokens_seen": schedule.steps * schedule.batch * SEQ_LEN,
        "cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "command": COMMAND, "commit": commit,
    }


def rescore(folder: Path, scores: dict[str, Any]) -> None:
    """Replace the scores of a written record with those of the model read back from its files."""
    path = folder / "training.json"
    made = json.loads(path.read_text(encoding="utf-8"))
    made.update(scores=scores, scored="from the bfloat16 files as written (rotary frequencies in float32)")
    write_json(path, made)
