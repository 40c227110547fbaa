"""The workbook as the pages show it: each lesson's "Build it" section, the Build-it page's sessions.

Scope: for each lesson and language, the section that lesson pages include (``workbook/lesson_NN.LANG.md``):
what to write and what the check holds (from ``mini_deepinfer/workbook/lessons.py``), the starter itself
(generated from the engine's current function by ``starter_text``), and where the exercise runs (in the page,
or with the same command on the reader's machine where it needs torch); the output of ``list``; and the two
sessions of the Build-it page, run exactly as the page shows them (the doc tests run the page's copy and
compare). Non-scope: the check times (``site_scripts/records/measure_workbook.py`` records them;
``gen_workbook_times.py`` renders them).
"""

from __future__ import annotations

from mini_deepinfer.workbook.exercise import Exercise
from mini_deepinfer.workbook.lessons import EXERCISES
from mini_deepinfer.workbook.starter import starter_text
from site_scripts.build.common import phrases, run_module, run_shell

# The Build-it page shows these blocks exactly like this; the doc test runs the page's copy and compares.
SESSION = """cd "$(mktemp -d)"  # a fresh folder, so that the session starts from nothing
python -m mini_deepinfer.workbook start 3
python -m mini_deepinfer.workbook check 3 || echo "exit code $?"
python -m mini_deepinfer.workbook solution 3 --write
python -m mini_deepinfer.workbook check 3"""
CAPSTONE = """WORKBOOK=$(mktemp -d)
python -m mini_deepinfer.workbook start all --dir "$WORKBOOK" > /dev/null  # every lesson's starter,
python -m mini_deepinfer.workbook solution all --dir "$WORKBOOK" --write > /dev/null  # then the engine's own
python -m mini_deepinfer.workbook run --dir "$WORKBOOK" -- --model trained/target \\
  --draft-model trained/draft --speculative --stream --raw --prompt $'KING.\\n' \\
  --max-new-tokens 40 --check-greedy"""

WORDS = phrases(__name__)["words"]


def section(item: Exercise, lang: str) -> str:
    """The body of a lesson's "Build it" section (the page writes the heading and the commands)."""
    words = WORDS[lang]
    names = " + ".join(f"`{name}()`" for name in item.qualnames)
    starter = "\n".join(f"    {line}" if line else "" for line in starter_text(item, lang).splitlines())
    parts = [
        words["write"].format(names=names, task=item.task(lang)),
        words["holds"].format(lesson=item.lesson, holds=item.holds(lang)),
        f'??? example "{words["starter"].format(lesson=item.lesson)}"\n\n'
        f'    ```python title="lesson_{item.lesson:02d}.py"\n{starter}\n    ```',
        words["page"] if item.in_page else words["local"],
    ]
    if item.in_page:
        parts.append(f'<div class="inpage-exercise" data-inpage-lesson="{item.lesson}" hidden></div>')
    parts.append(words["more"])
    return "\n\n".join(parts) + "\n"


EXERCISES_HEAD = phrases(__name__)["exercises_head"]
WHERE = {"en": {True: "in the page and locally", False: "locally (needs torch)"},
         "zh": {True: "页面里与本地", False: "本地（需要 torch）"}}
LESSON = phrases(__name__)["lesson"]


def exercises_table(lang: str) -> str:
    """One row per lesson: its exercise's section, the functions to write, where the check runs."""
    rows = [EXERCISES_HEAD[lang]]
    for item in EXERCISES:
        page = item.page.removeprefix("lessons/")
        title = LESSON[lang].format(lesson=item.lesson, title=item.title(lang))
        names = " + ".join(f"`{name}()`" for name in item.qualnames)
        rows.append(f"| [{title}]({page}.md#build-it) | {names} | {WHERE[lang][item.in_page]} |")
    return "\n".join(rows) + "\n"


OUTPUTS = {
    **{f"workbook/lesson_{item.lesson:02d}.{lang}.md": (lambda item=item, lang=lang: section(item, lang))
       for item in EXERCISES for lang in ("en", "zh")},
    **{f"workbook/exercises.{lang}.md": (lambda lang=lang: exercises_table(lang)) for lang in ("en", "zh")},
    "workbook/list.txt": lambda: run_module("mini_deepinfer.workbook", "list"),
    "workbook/session.txt": lambda: run_shell(SESSION),
    "workbook/capstone.txt": lambda: run_shell(CAPSTONE, timeout_s=900),
}
