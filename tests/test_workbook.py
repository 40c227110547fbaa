"""The workbook's command line keeps its contract; its starters are the engine's functions, bodies removed.

Scope: ``python -m mini_deepinfer.workbook`` ``list``, ``start``, ``check``, ``solution`` and ``run``: exit
codes (0 holds, 1 broke, 2 bad input with one line on stderr), never overwriting a learner's file without a
backup, ``check`` never writing, the learner's exception shown with their frames only, messages in both
languages; the starters generated from the engine's current functions (signature and docstring kept, 8 to 40
lines to write), titles and sections that are the lesson pages' own, the core lessons' checks running without
torch, and the capstone. Non-scope: whether each check catches mistakes (``test_workbook_mistakes.py``,
``test_workbook_mutants.py``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mini_deepinfer.workbook.__main__ import main
from mini_deepinfer.workbook.checking import check_source
from mini_deepinfer.workbook.exercise import resolve
from mini_deepinfer.workbook.lessons import EXERCISES, exercise
from mini_deepinfer.workbook.starter import reference_source, starter_function, starter_text
from mini_deepinfer.workbook.words import default_language

ROOT = Path(__file__).resolve().parents[1]
CORE = [item.lesson for item in EXERCISES if item.in_page]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mini_deepinfer.workbook", *args], capture_output=True,
                          text=True, cwd=cwd or ROOT, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                                        "PYTHONPATH": str(ROOT)})


def test_list_has_one_line_per_lesson_that_starts_with_its_number_and_says_page_or_local(capsys):
    assert main(["list", "--lang", "en"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [int(line.split()[0]) for line in lines] == list(range(1, 16))
    for line, item in zip(lines, EXERCISES):
        assert line.split()[1] == ("page" if item.in_page else "local")
        assert all(f"{name}()" in line for name in item.qualnames)


def test_start_writes_the_starter_and_a_second_start_leaves_the_learners_file_alone(tmp_path, capsys):
    assert main(["start", "3", "--dir", str(tmp_path), "--lang", "en"]) == 0
    path = tmp_path / "lesson_03.py"
    assert path.read_text(encoding="utf-8") == starter_text(exercise(3), "en")
    path.write_text("my work\n", encoding="utf-8")
    assert main(["start", "3", "--dir", str(tmp_path)]) == 0
    assert str(path) in capsys.readouterr().out
    assert path.read_text(encoding="utf-8") == "my work\n"


def test_start_force_starts_over_and_keeps_the_old_file_as_a_backup(tmp_path):
    path = tmp_path / "lesson_03.py"
    path.write_text("first\n", encoding="utf-8")
    assert main(["start", "3", "--dir", str(tmp_path), "--force"]) == 0
    path.write_text("second\n", encoding="utf-8")
    assert main(["start", "3", "--dir", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "lesson_03.py.bak").read_text(encoding="utf-8") == "first\n"
    assert (tmp_path / "lesson_03.py.bak2").read_text(encoding="utf-8") == "second\n"
    assert "NotImplementedError" in path.read_text(encoding="utf-8")


def test_the_untouched_starter_fails_with_1_and_a_kind_line_in_the_learners_language(tmp_path, capsys):
    main(["start", "3", "--dir", str(tmp_path)])
    capsys.readouterr()
    assert main(["check", "3", "--dir", str(tmp_path), "--lang", "en"]) == 1
    assert "is still the starter" in capsys.readouterr().out
    assert main(["check", "3", "--dir", str(tmp_path), "--lang", "zh"]) == 1
    assert "还是起步代码" in capsys.readouterr().out


def test_solution_write_keeps_a_backup_and_then_check_passes_without_writing(tmp_path, capsys):
    main(["start", "3", "--dir", str(tmp_path)])
    starter = (tmp_path / "lesson_03.py").read_text(encoding="utf-8")
    assert main(["solution", "3", "--dir", str(tmp_path), "--write"]) == 0
    assert (tmp_path / "lesson_03.py.bak").read_text(encoding="utf-8") == starter
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert main(["check", "3", "--dir", str(tmp_path)]) == 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, "check wrote into the folder"


@pytest.mark.parametrize(("args", "says"), [
    (["check", "0"], "no exercise for lesson 0"), (["check", "16"], "no exercise for lesson 16"),
    (["start", "three"], "lesson must be a number"), (["check", "3"], "start 3 writes it"),
    (["solution", "3", "--write"], "start 3 writes it"), (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_code_2(tmp_path, args, says):
    done = run_cli(*args, "--dir", str(tmp_path)) if args[0] != "frobnicate" else run_cli(*args)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and says in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(("edit", "says"), [
    (lambda text: text.replace("def schedule(self)", "def schedule(self"), "line"),
    (lambda text: text.replace("def schedule(self)", "def my_schedule(self)"), "has no function schedule()"),
])
def test_a_syntax_error_or_a_renamed_function_is_one_line_and_exit_code_2(tmp_path, edit, says):
    path = tmp_path / "lesson_03.py"
    path.write_text(edit(starter_text(exercise(3), "en")), encoding="utf-8")
    done = run_cli("check", "3", "--dir", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr


def test_the_learners_exception_shows_only_the_frames_of_their_file():
    item = exercise(3)
    text = starter_text(item, "en").replace('    raise NotImplementedError("lesson 3: write schedule()")',
                                            "    return helper(self)\n\n\ndef helper(engine):\n"
                                            "    return engine.no_such_attribute")
    outcome = check_source(item, text, "mine.py", "en")
    assert outcome.code == 1
    frames = [line for line in outcome.lines if line.strip().startswith('File "')]
    assert frames and all('File "mine.py"' in line for line in frames), outcome.lines
    assert "AttributeError" in outcome.lines[-1]


def test_after_a_check_the_engine_runs_its_own_functions_again():
    originals = {target: resolve(target)[2] for item in EXERCISES for target in item.targets}
    check_source(exercise(3), starter_text(exercise(3), "en"), "lesson.py", "en")
    assert {target: resolve(target)[2] for target in originals} == originals


def body_lines(target: str) -> int:
    node = ast.parse(reference_source(target)).body[0]
    first = node.body[1] if ast.get_docstring(node) is not None else node.body[0]
    return node.end_lineno - first.lineno + 1


@pytest.mark.parametrize("lesson", range(1, 16))
def test_every_exercise_asks_for_8_to_40_lines(lesson):
    assert 8 <= sum(body_lines(target) for target in exercise(lesson).targets) <= 40


@pytest.mark.parametrize("lesson", range(1, 16))
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_starter_is_the_engines_function_with_its_body_removed(lesson, lang):
    """Signature and docstring come from the engine's current source; the body raises with the lesson."""
    item = exercise(lesson)
    compile(starter_text(item, lang), "lesson.py", "exec")
    for target, name in zip(item.targets, item.names):
        reference, starter = ast.parse(reference_source(target)).body[0], ast.parse(
            starter_function(item, target, lang)).body[0]
        assert ast.dump(reference.args) == ast.dump(starter.args)
        assert ast.get_docstring(reference) == ast.get_docstring(starter)
        assert isinstance(starter.body[-1], ast.Raise) and f"{lesson}" in ast.unparse(starter.body[-1])
        assert name == reference.name


def page_headings(page: str, lang: str) -> dict[str, str]:
    text = (ROOT / "docs" / f"{page}{'.md' if lang == 'zh' else '.en.md'}").read_text(encoding="utf-8")
    found = {}
    for match in re.finditer(r"^(#+) (.+?)(?: \{#([\w-]+)\})?$", text, re.M):
        found[match.group(3) or match.group(1)] = match.group(2)
    return found


@pytest.mark.parametrize("lesson", range(1, 16))
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_titles_and_sections_are_the_lesson_pages_own(lesson, lang):
    item = exercise(lesson)
    headings = page_headings(item.page, lang)
    title = next(text for key, text in headings.items() if key in ("#", "prefix-cache"))
    assert title.split("：" if lang == "zh" else ": ", 1)[1] == item.title(lang)
    assert headings[item.section[0]] == item.section[1](lang)


def test_the_core_lessons_check_without_torch():
    """The page runs these checks in Pyodide, where there is no torch."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from mini_deepinfer.workbook.checking import check_source\n"
            "from mini_deepinfer.workbook.lessons import exercise\n"
            "from mini_deepinfer.workbook.starter import solution_text\n"
            f"for n in {CORE}:\n"
            "    item = exercise(n)\n"
            "    assert check_source(item, solution_text(item, 'en'), 'l.py', 'en').code == 0, n\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("environ", "lang"), [
    ({"LANG": "zh_CN.UTF-8"}, "zh"), ({"LANG": "en_US.UTF-8"}, "en"),
    ({"LC_ALL": "zh_TW", "LANG": "C"}, "zh"), ({}, "en")])
def test_the_default_language_comes_from_the_locale(environ, lang):
    assert default_language(environ) == lang


@pytest.mark.parametrize("lesson", range(1, 16))
def test_every_hint_line_of_a_chinese_starter_fits_100_columns_on_screen(lesson):
    """A Chinese character takes two columns: the hints are wrapped by what the screen shows, not by count."""
    import unicodedata

    def columns(line: str) -> int:
        return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)

    lines = starter_text(exercise(lesson), "zh").splitlines()
    hints = [line for line in lines if line.lstrip().startswith("#")]
    assert hints and max(map(columns, hints)) <= 100, max(hints, key=columns)
