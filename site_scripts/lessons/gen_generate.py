"""``python -m mini_deepinfer.generate`` as lesson 9 and the text-generation page show it.

Scope: ``--help``; the pages' example commands (one prompt, two prompts batched with chunked prefill,
staggered arrival with the round trace, cross-round ``--pipeline``, sampled ``--stream``,
``--cancel-after-tokens``, ``--output`` with a look into the record), each run on a random ``tiny``
checkpoint, and those with one prompt again with the question in English for the English pages; and lesson
9's look at the text layer (the rendered chat prompt, its token ids, the stop ids, and the streaming
detokenizer fed one id at a time).

Each page's block (:data:`SHOWN_BLOCKS`) is its first line, :data:`CHECKPOINT_LINE`, then an example. The
generator runs that first line once, in a temporary working folder (it writes the same ``weights/tiny`` every
time), and each example there as the page prints it, so paths in their output and in the records they write
are the pages' relative ones, and the repository's own ``weights/`` and ``outputs/`` are never touched. As
the blocks run here, the doc tests do not run them again (``conftest.py``: a block a generator runs).

Non-scope: explaining any of it (the pages do), and the committed run records under ``snippets/records/``
(made once by hand with ``--output``; see the text-generation page).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from site_scripts.build.common import GeneratorError, command_env, run_module

CHECKPOINT = "weights/tiny"
QUESTION = "用两句话解释 KV Cache 的作用。"
QUESTION_EN = "Explain in two sentences what the KV cache is for."
"""The English pages ask the same question in English where a command has this one prompt (README.en.md
does the same); a command of two prompts, and every command behind a committed record, keeps this one."""
STREAM_TEXT = "缓存😀龘"  # an emoji (one token, four bytes) and a rare character split over two tokens

CHECKPOINT_LINE = ("python -m mini_deepinfer.random_checkpoint --preset tiny --dtype float32 --force "
                   "weights/tiny > /dev/null")
"""The first line of every block below: a random ``tiny`` checkpoint, the same files each time it runs."""

# The pages' commands after the checkpoint line, keyed by the snippet each one's output goes to.
EXAMPLES: dict[str, str] = {
    "generate/single.txt": f"""\
python -m mini_deepinfer.generate --model weights/tiny --prompt "{QUESTION}" \\
  --max-new-tokens 8 --cache-capacity 256""",
    "generate/batched.txt": f"""\
python -m mini_deepinfer.generate --model weights/tiny --prompt "{QUESTION}" \\
  --prompt "What is 1 plus 1? Answer in one short sentence." --max-new-tokens 8 --cache-capacity 256 \\
  --max-num-seqs 2 --max-batched-tokens 16 --chunked-prefill --temperature 0.8 --seed 0""",
    "generate/staggered.txt": """\
python -m mini_deepinfer.generate --model weights/tiny --raw --prompt "The capital of France is" \\
  --prompt "KV cache" --max-new-tokens 3 --cache-capacity 64 --max-num-seqs 2 \\
  --max-batched-tokens 4 --chunked-prefill --stagger-prompts --trace-rounds""",
    "generate/pipeline.txt": f"""\
python -m mini_deepinfer.generate --model weights/tiny --prompt "{QUESTION}" \\
  --prompt "What is 1 plus 1? Answer in one short sentence." --max-new-tokens 8 --cache-capacity 256 \\
  --max-num-seqs 2 --max-batched-tokens 16 --chunked-prefill --temperature 0.8 --seed 0 --pipeline""",
    "generate/stream.txt": f"""\
python -m mini_deepinfer.generate --model weights/tiny --prompt "{QUESTION}" \\
  --max-new-tokens 12 --temperature 0.8 --seed 0 --stream""",
    "generate/cancel.txt": """\
python -m mini_deepinfer.generate --model weights/tiny --raw --prompt "The capital of France is" \\
  --max-new-tokens 8 --stream --cancel-after-tokens 3""",
    "generate/output.txt": f"""\
mkdir -p outputs
python -m mini_deepinfer.generate --model weights/tiny --prompt "{QUESTION}" \\
  --max-new-tokens 8 --cache-capacity 256 --output outputs/tiny-run.json
python - <<'EOF'
import json
record = json.load(open("outputs/tiny-run.json", encoding="utf-8"))
print(list(record))
print(record["model"])
print(record["requests"][0]["output_token_ids"], record["cache"])
EOF""",
}


@functools.cache
def workspace() -> Path:
    """A temporary working folder holding ``weights/tiny``; removed when the generator's process exits."""
    folder = Path(tempfile.mkdtemp(prefix="gen-generate-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    run_in(folder, CHECKPOINT_LINE)
    return folder


def run_example(command: str) -> str:
    """Run one example in the workspace; return its stdout."""
    return run_in(workspace(), command)


def run_in(folder: Path, command: str) -> str:
    """Run a shell line the way the doc tests do (``bash -euo pipefail``) in ``folder``; return stdout."""
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=folder, env=command_env(),
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise GeneratorError(f"`{command}` exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


def text_layer() -> str:
    """The chat prompt, its ids and the stop ids; then the streaming detokenizer fed one id at a time."""
    from mini_deepinfer.runtime.text import StreamDetokenizer, load_text

    tokenizer, template, stop_ids = load_text(workspace() / CHECKPOINT)
    assert template is not None
    prompt = template.render([{"role": "user", "content": QUESTION}])
    ids = tokenizer.encode(prompt)
    lines = [f"template.render(...) = {prompt!r}", f"tokenizer.encode(prompt) = {ids}",
             f"stop ids = {stop_ids}  ({', '.join(tokenizer.decode([i]) for i in stop_ids)})", "",
             f"StreamDetokenizer, {STREAM_TEXT!r} one id at a time:"]
    stream, pushed = StreamDetokenizer(tokenizer), []
    for token in tokenizer.encode(STREAM_TEXT):
        pushed.append(token)
        lines.append(f"  push([{token}]) -> {stream.push([token])!r:<8}  decode({pushed}) = "
                     f"{tokenizer.decode(pushed)!r}")
    lines.append(f"  finish() -> {stream.finish()!r}")
    return "\n".join(lines) + "\n"


ENGLISH = ("generate/single.txt", "generate/stream.txt", "generate/output.txt")
"""The examples that the English pages run with :data:`QUESTION_EN`, into ``*.en.txt`` beside the others."""


def english(command: str) -> str:
    """An example as the English pages print it: the one prompt asked in English."""
    return command.replace(f'"{QUESTION}"', f'"{QUESTION_EN}"')


SHOWN_BLOCKS: dict[str, str] = {path: f"{CHECKPOINT_LINE}\n{command}" for path, command in EXAMPLES.items()}
"""Snippet -> the block the Chinese pages show above it, which this generator runs to write it."""


def _example(path: str) -> Callable[[], str]:
    return lambda: run_example(EXAMPLES[path])


def _english_example(path: str) -> Callable[[], str]:
    return lambda: run_example(english(EXAMPLES[path]))


OUTPUTS: dict[str, Callable[[], str]] = {
    "generate/help.txt": lambda: run_module("mini_deepinfer.generate", "--help"),
    **{path: _example(path) for path in EXAMPLES},
    **{path.replace(".txt", ".en.txt"): _english_example(path) for path in ENGLISH},
    "generate/text-layer.txt": text_layer,
}
