"""The READMEs' ``generate`` example prints what the READMEs say it prints.

Scope: the two commands under the random checkpoint in README.md and README.en.md (a random tiny
checkpoint, then ``generate`` at temperature 0.8 with seed 0), run in ``tmp_path``: the sampled text is
visible (not blank), the last line is the ``[length; 16 output tokens; ...]`` summary, and without the
sampling flags greedy decoding prints only empty lines before it (33: token 271, ``\n\n``, sixteen times,
then the text's line end).
Non-scope: what the text says (random weights), the generate command's other flags (``test_generate_cli.py``).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READMES = ["README.md", "README.en.md"]


def readme_commands(name: str) -> tuple[list[str], list[str]]:
    """The README's random_checkpoint and generate commands, as argument lists (continuation lines joined)."""
    text = (ROOT / name).read_text(encoding="utf-8").replace("\\\n", " ")
    checkpoint = re.search(r"^python -m (mini_deepinfer\.random_checkpoint .*)$", text, re.M)
    generate = re.search(r"^python -m (mini_deepinfer\.generate --model weights/tiny .*)$", text, re.M)
    assert checkpoint and generate, f"{name} has no random checkpoint and generate example"
    return shlex.split(checkpoint.group(1)), shlex.split(generate.group(1))


def run(cwd: Path, args: list[str]) -> str:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", READMES)
def test_the_generate_example_shows_text_and_greedy_only_line_breaks(name: str, tmp_path: Path) -> None:
    checkpoint, generate = readme_commands(name)
    assert generate[generate.index("--temperature") + 1] == "0.8" and "--seed" in generate
    run(tmp_path, checkpoint)
    sampled = run(tmp_path, generate).splitlines()
    assert sampled[-1].startswith("[length; 16 output tokens;")
    assert "".join(sampled[:-1]).strip(), "the sampled example printed no visible text"
    greedy_args = generate[: generate.index("--temperature")]
    greedy = run(tmp_path, greedy_args)
    breaks = greedy[: greedy.index("[length; 16 output tokens;")]
    assert set(breaks) == {"\n"} and len(breaks) == 2 * 16 + 1, repr(greedy[:80])
    said = {"README.md": f"{len(breaks)} 个空行", "README.en.md": f"{len(breaks)} empty lines"}[name]
    assert said in (ROOT / name).read_text(encoding="utf-8"), f"{name} does not say {said!r}"
