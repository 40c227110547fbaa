"""The READMEs' ``generate`` example prints what the READMEs say it prints.

Scope: the ``generate`` command in README.md and README.en.md (the committed trained target, sampled at
temperature 0.8 with seed 0), run from the repository root: the sampled text is visible, the last line is
the ``[length; 60 output tokens; ...]`` summary, and without the sampling flags the command prints exactly
the greedy text the trained-models page shows (``snippets/trained/generate-greedy.txt``).
Non-scope: the quality of the text (``docs/guide/trained-models.md`` measures it), the generate command's
other flags (``test_generate_cli.py``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from site_scripts.build.common import command_env

ROOT = Path(__file__).resolve().parent.parent
READMES = ["README.md", "README.en.md"]
GREEDY = ROOT / "snippets" / "trained" / "generate-greedy.txt"


def readme_generate(name: str) -> str:
    """The README's generate command on the trained target (continuation lines joined)."""
    text = (ROOT / name).read_text(encoding="utf-8").replace("\\\n", " ")
    found = re.search(r"^(python -m mini_deepinfer\.generate --model trained/target .*)$", text, re.M)
    assert found, f"{name} has no generate example on trained/target"
    return re.sub(r" +", " ", found.group(1))


def run(command: str) -> str:
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=ROOT, env=command_env(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("name", READMES)
def test_the_generate_example_samples_text_and_its_greedy_run_is_the_pages_text(name: str) -> None:
    command = readme_generate(name)
    assert " --temperature 0.8 --seed 0" in command
    sampled = run(command).splitlines()
    assert sampled[-1].startswith("[length; 60 output tokens;")
    assert "".join(sampled[:-1]).strip(), "the sampled example printed no visible text"
    greedy = run(command.replace(" --temperature 0.8 --seed 0", ""))
    assert greedy == GREEDY.read_text(encoding="utf-8")
