"""The bad-input table of the reliability section: every case run for real, its one stderr line and exit code.

Scope: writing a random ``tiny`` checkpoint and broken copies of it into a temporary folder, running
``python -m mini_deepinfer.generate`` once per bad input, checking that each run ends with exit code 2 and
exactly one stderr line without a traceback, and rendering the results as a Markdown table. Paths under the
temporary folder are shown as ``weights/...``. Non-scope: the error messages themselves (``generate.py``,
the loader, the engine) and injected runner failures (``tests/test_faults.py``).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from site_scripts.common import ROOT, GeneratorError, command_env

PROMPT = ["--prompt", "Hello", "--raw"]
HIDDEN_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # the same message on a machine with or without a GPU
TIMEOUT_S = 300
TORCH_VERSION = re.compile(r"\(torch [^)]*\)")  # the installed build, not part of the message


def edit_config(folder: Path, change) -> None:
    """Apply ``change`` to the parsed ``config.json`` of ``folder`` and write it back."""
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    change(config)
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def truncate_weights(folder: Path) -> None:
    """Keep only the first half of every ``*.safetensors`` file."""
    for path in folder.glob("*.safetensors"):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


def swap_two_tokens(folder: Path) -> None:
    """A tokenizer of the same size whose ids for ``!`` and ``"`` are exchanged."""
    path = folder / "tokenizer.json"
    tokenizer = json.loads(path.read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    vocab["!"], vocab['"'] = vocab['"'], vocab["!"]
    path.write_text(json.dumps(tokenizer), encoding="utf-8")


def nan_embedding(folder: Path) -> None:
    """Every weight of the token embedding (and so of the tied head) set to NaN."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    name = next(n for n in tensors if n.endswith("embed_tokens.weight"))
    tensors[name] = tensors[name].fill_(float("nan"))
    save_file(tensors, str(path), metadata={"format": "pt"})


def prepare(root: Path) -> None:
    """The good checkpoint ``tiny`` and every broken folder or file the cases point at."""
    import torch

    from mini_deepinfer.tools.checkpoints import write_random_checkpoint

    tiny = root / "tiny"
    write_random_checkpoint(tiny, "tiny", seed=0, dtype=torch.float32)
    (root / "empty").mkdir()
    for name in ("corrupt-config", "truncated", "wrong-shapes", "wrong-type", "unknown-arch", "other-vocab",
                 "nan-embedding"):
        shutil.copytree(tiny, root / name)
    (root / "corrupt-config" / "config.json").write_text('{"architectures": [', encoding="utf-8")
    truncate_weights(root / "truncated")
    edit_config(root / "wrong-shapes", lambda c: c["text_config"].update(hidden_size=96))
    edit_config(root / "wrong-type", lambda c: c["text_config"].update(hidden_size="abc"))
    nan_embedding(root / "nan-embedding")
    edit_config(root / "unknown-arch", lambda c: c.update(architectures=["LlamaForCausalLM"],
                                                          model_type="llama"))
    swap_two_tokens(root / "other-vocab")
    (root / "prompts-gbk.txt").write_bytes("你好".encode("gbk"))


def cases() -> list[tuple[str, list[str]]]:
    """(case, arguments after ``--model``-less ``generate``); ``{w}`` is the weights folder."""
    tiny = ["--model", "{w}/tiny", *PROMPT]
    spec = ["--model", "{w}/tiny", "--draft-model", "{w}/other-vocab", "--speculative", *PROMPT]
    self_draft = ["--model", "{w}/tiny", "--draft-model", "{w}/tiny", "--speculative", *PROMPT]
    return [
        ("missing folder", ["--model", "{w}/missing", *PROMPT]),
        ("empty folder", ["--model", "{w}/empty", *PROMPT]),
        ("corrupt config.json", ["--model", "{w}/corrupt-config", *PROMPT]),
        ("truncated safetensors", ["--model", "{w}/truncated", *PROMPT]),
        ("config and weight shapes disagree", ["--model", "{w}/wrong-shapes", *PROMPT]),
        ("config field of the wrong type", ["--model", "{w}/wrong-type", *PROMPT]),
        ("NaN weights (non-finite logits)", ["--model", "{w}/nan-embedding", *PROMPT]),
        ("unknown architecture", ["--model", "{w}/unknown-arch", *PROMPT]),
        ("draft with another vocabulary", spec),
        ("prompt longer than the cache", ["--model", "{w}/tiny", "--prompt", "The capital of France is",
                                          "--raw", "--cache-capacity", "4", "--max-new-tokens", "1"]),
        ("negative --max-new-tokens", [*tiny, "--max-new-tokens", "-1"]),
        ("zero --cache-capacity", [*tiny, "--cache-capacity", "0"]),
        ("zero --max-batched-tokens", [*tiny, "--max-batched-tokens", "0"]),
        ("--draft-width 0", [*self_draft, "--draft-width", "0"]),
        ("--draft-width 17", [*self_draft, "--draft-width", "17"]),
        ("--check-greedy with sampling", [*tiny, "--check-greedy", "--temperature", "1"]),
        ("unknown device", [*tiny, "--device", "tpu"]),
        ("npu without torch_npu", [*tiny, "--device", "npu"]),
        ("cuda:0 without CUDA", [*tiny, "--device", "cuda:0"]),
        ("unknown dtype", [*tiny, "--dtype", "int7"]),
        ("prompt file not UTF-8", ["--model", "{w}/tiny", "--prompt-file", "{w}/prompts-gbk.txt"]),
        ("--output in a missing folder", [*tiny, "--output", "{w}/missing/run.json"]),
    ]


def run_case(args: list[str], root: Path) -> tuple[int, str]:
    """Run ``generate`` with ``args``; return its exit code and its single stderr line (paths masked)."""
    argv = [a.replace("{w}", str(root)) for a in args]
    proc = subprocess.run([sys.executable, "-m", "mini_deepinfer.generate", *argv], cwd=ROOT,
                          env=command_env(HIDDEN_GPU), capture_output=True, text=True, timeout=TIMEOUT_S)
    err = TORCH_VERSION.sub("(torch <version>)", proc.stderr.replace(str(root), "weights"))
    if proc.returncode != 2 or err.count("\n") != 1 or not err.endswith("\n") or "Traceback" in err:
        raise GeneratorError(f"{args}: expected exit 2 and one stderr line, got {proc.returncode}:\n{err}")
    return proc.returncode, err.rstrip("\n")


def cell(text: str) -> str:
    """Inline code for a Markdown table cell (``|`` escaped)."""
    return "`" + text.replace("|", "\\|") + "`"


def shown_command(args: list[str]) -> str:
    return shlex.join(["python", "-m", "mini_deepinfer.generate",
                       *[a.replace("{w}", "weights") for a in args]])


def bad_inputs_table() -> str:
    """The Markdown table: case, command, stderr line, exit code."""
    lines = ["| Case | Command | stderr | Exit |", "| --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        prepare(root)
        for case, args in sorted(cases()):
            code, err = run_case(args, root)
            lines.append(f"| {case} | {cell(shown_command(args))} | {cell(err)} | {code} |")
    return "\n".join(lines) + "\n"


OUTPUTS = {"reliability/bad-inputs.md": bad_inputs_table}
