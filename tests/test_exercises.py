"""Every exercise's claimed output: make its change in a scratch copy, run it, and check what the page says.

Scope: the exercise of each numbered lesson and of the graph-execution note (``## Exercise`` on the Chinese
page and its English twin). The change is read from the English page (the code it replaces, the code it puts
there and the file that holds it), and both pages must show it. Each entry below holds what the page says will
happen: what the lesson's command prints in the changed copy, and which tests of the page's ``pytest``
command fail there. The copy is made under ``tmp_path`` (``mini_deepinfer/``, ``site_scripts/``, ``tests/``,
``snippets/`` and the root files the tests need), so the repository itself is never changed; commands run
with the copy as the working directory, so they import the copy's package; each is forked from a Python that
has imported torch already (``site_scripts/build/preloaded_python.py``: torch's import is most of such a run).
Running the commands is fast; running the page's tests in the copy (a Python of their own) is marked slow.
Non-scope: the exercises' prose beyond these claims, and whether the unchanged repository passes those tests
(the suite itself runs them).
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from site_scripts.build.preloaded_python import PreloadedPython

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
COPIED = ("mini_deepinfer", "site_scripts", "tests", "snippets", "conftest.py", "pyproject.toml")
TIMEOUT_S = 1800

Check = Callable[[str, str], None]  # (output of the changed copy, output of the unchanged copy)


@dataclass(frozen=True)
class Exercise:
    """One exercise: its page, what the page says its command shows, and which of the page's tests fail.

    The change itself is read from the English page ("change `OLD` ... to `NEW`", "delete the line `OLD`"),
    with the file it names (the first ``mini_deepinfer/*.py`` of the exercise); ``old``/``new`` are given here
    only where the page words it otherwise, and ``function`` where the file holds ``old`` more than once.
    """

    page: str  # under docs/, without .md
    command: tuple[str, ...] = ()  # ``python -m`` arguments of the command the page runs in the copy
    shows: Check | None = None
    tests: tuple[str, ...] = ()  # the page's pytest arguments
    outcome: dict[str, int] = field(default_factory=dict)  # the counts pytest's last line must give
    still_pass: tuple[str, ...] = ()  # tests the page says still pass in the copy
    old: str | None = None
    new: str | None = None
    function: str | None = None
    shown: str | None = None  # how the page quotes ``old`` where it is given here
    setup: tuple[str, ...] = ()  # ``python -m`` arguments run before ``command`` (both runs)
    unchanged: tuple[str, ...] = ()  # a command whose output the page says the change leaves as it was


def contains(*parts: str) -> Check:
    def check(changed: str, original: str) -> None:
        for part in parts:
            assert part in changed, f"the page says the changed run shows {part!r}"
            assert part not in original, f"{part!r} is in the unchanged run too: the claim shows nothing"
    return check


def lines_with(word: str) -> Callable[[str], list[str]]:
    return lambda text: [line for line in text.splitlines() if word in line]


def only_lines_with_differ(word: str, count: int) -> Check:
    """Apart from ``count`` lines holding ``word``, not a character of the output changes."""
    def check(changed: str, original: str) -> None:
        a, b = changed.splitlines(), original.splitlines()
        assert len(a) == len(b)
        differ = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
        assert len(differ) == count and all(word in x for x, _ in differ), differ
    return check


def round_line(text: str, number: int) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"round {number:>2} "))


def committed(line: str, rid: str) -> str:
    match = re.search(rf"\b{rid}\+\[(\d+)\]", line)
    return match.group(1) if match else ""


def padding_writes_into_a(changed: str, original: str) -> None:
    """B's and C's tokens stay; A's differ from round 5 on (not before); the last line says DIFFERENT."""
    for number in range(2, 14):
        new, old = round_line(changed, number), round_line(original, number)
        for rid in ("B", "C"):
            assert committed(new, rid) == committed(old, rid), f"round {number}: {rid} changed"
        assert (committed(new, "A") == committed(old, "A")) == (number < 5), f"round {number}: A"
    assert changed.rstrip().endswith("tokens with graphs and eagerly: DIFFERENT")
    assert original.rstrip().endswith("tokens with graphs and eagerly: the same")


def temperature_rows_equal_temperature_one(changed: str, original: str) -> None:
    def row(text: str, label: str) -> str:
        found = [line for line in text.splitlines() if line.lstrip().startswith(label)]
        assert found, f"no row starting with {label!r}"
        return found[0][len(found[0]) - len(found[0].lstrip()) + len(label):].strip()

    one = row(changed, "temperature 1 ")
    assert row(changed, "temperature 0.5") == one and row(changed, "temperature 2 ") == one
    assert row(original, "temperature 0.5") != row(original, "temperature 1 ")


def table_rows(text: str) -> dict[str, list[str]]:
    """A printed table's rows by their first column (columns are separated by two or more spaces)."""
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]
    return {cells[0]: cells[1:] for cells in rows if len(cells) > 2}


def chunks_lose_the_window(changed: str, original: str) -> None:
    """Chunked rows read like the reset row; token by token keeps its logits, its window column moves."""
    new, old = table_rows(changed), table_rows(original)
    for chunks in ("5, 7, 1, 27", "13, 13, 14"):
        assert new[chunks][:2] == ["< 1e-1", "< 1e-2"] and old[chunks][:2] == ["< 1e-5", "< 1e-5"], chunks
    by_token = new["1 x 40 (token by token)"]
    assert by_token[0] == "< 1e-5" and by_token[3] == "< 1e0"


def in_flight_inputs_become_zero(changed: str, original: str) -> None:
    contains("commit   req-0 +[0] (from round 2) -> output [215114, 0]")(changed, original)
    assert "commit   req-0 +[215114] (from round 2)" in original
    lines = changed.splitlines()
    texts = [lines[i + 1] for i, line in enumerate(lines[:-1]) if line in ("req-0:", "req-1:")]
    assert len(texts) == 2 and all(text.endswith("!!") for text in texts), texts


def delivered_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("A: ["))


def draft_cache_differs(changed: str, original: str) -> None:
    summary = ("Cold-cache check: the draft cache DIFFERS from a cold recomputation of the committed prefix "
               "by more than 1e-05; the target cache equals it after every round (7 comparisons).")
    contains("the draft cache DIFFERS from a cold recomputation", summary)(changed, original)
    assert delivered_line(changed) == delivered_line(original), "the page says the tokens do not change"
    first = next(line for line in changed.splitlines() if "the draft cache DIFFERS" in line)
    assert first.startswith("[round 2]"), first


EXERCISES = {
    "lesson-01": Exercise(
        "lessons/01-life-of-a-request", ("mini_deepinfer",), contains("req-0: [12, 13, 13]"),
        ("tests/test_engine_core.py", "-k", "test_cache_holds_prompt_plus_outputs_except_the_last"),
        {"failed": 1}, function="plan_decode"),
    "lesson-02": Exercise(
        "lessons/02-stopping-and-giving-back",
        ("mini_deepinfer", "--cancel", "req-0", "--cancel-after-round", "2"),
        contains("Free slots: 5/8", "schedule req-1 prefill inputs=[20] positions=0 slots=[3]"),
        ("tests/test_engine_core.py", "-k", "test_free_slots_equal_capacity_after_cancel_at_every_round"),
        {"failed": 4}, function="cancel"),
    "lesson-03": Exercise(
        "lessons/03-batching", ("mini_deepinfer.pipeline_demo",), contains("-4 unreserved"),
        ("tests/test_batch_engine.py", "tests/test_pipeline_demo.py", "-k", "waits_for_slots or c_waits"),
        {"failed": 2, "error": 1}),
    "lesson-04": Exercise(
        "lessons/04-chunked-prefill", ("mini_deepinfer.pipeline_demo",), contains("[36, 76, 137, 14, 49]"),
        ("tests/test_pipeline_demo.py", "tests/test_engine_modes_qwen.py",
         "-k", "gets_alone or chunked_budget_7"),
        {"failed": 6}),
    "lesson-05": Exercise(
        "lessons/05-runner", ("site_scripts.lessons.gen_runner",), only_lines_with_differ("fresh_slots", 2),
        ("tests/test_engine_modes_qwen.py", "-k", "every_mode_gives and one_at_a_time"), {"failed": 4}),
    "lesson-06": Exercise(
        "lessons/06-qwen35-layers",
        tests=("tests/test_qwen3_5_parity.py", "-k",
               "chunked_delta_rule_equals_recurrent or prefill_then_decode"),
        outcome={"failed": 3},
        still_pass=("tests/test_qwen3_5_parity.py::test_full_sequence_logits_match_transformers",)),
    "lesson-07": Exercise(
        "lessons/07-hybrid-cache", ("site_scripts.lessons.gen_hybrid_cache",), chunks_lose_the_window,
        tests=("tests/test_qwen3_5_parity.py", "tests/test_hybrid_cache.py", "-k",
               "chunked_prefill_equals_whole_prefill or conv_window"),
        outcome={"failed": 7, "passed": 2}),
    "lesson-08": Exercise(
        "lessons/08-sampling", ("site_scripts.lessons.gen_sampling_demo",),
        temperature_rows_equal_temperature_one,
        ("tests/test_sampling.py", "-k", "filtered_distribution_is_exact"), {"failed": 1, "passed": 5}),
    "lesson-09": Exercise(
        "lessons/09-weights-and-text", tests=("tests/test_text.py", "-k", "stream_one_token_at_a_time"),
        outcome={"failed": 2}),
    "lesson-11": Exercise(
        "lessons/11-stops-across-rounds", ("mini_deepinfer", "--pipeline", "--cancel", "req-0",
                                           "--cancel-after-round", "2"),
        contains("[round 2] free     req-0 slots=[0, 1, 2]",
                 "[round 3] schedule req-1 prefill inputs=[20] positions=0 slots=[0]"),
        ("tests/test_cross_round_stops.py", "-k", "never_before"), {"failed": 18},
        old="req.rounds_in_flight > 0 or ", new="", function="release_if_idle",
        shown="req.rounds_in_flight > 0"),
    "lesson-10": Exercise(
        "lessons/10-cross-round",
        ("mini_deepinfer.generate", "--model", "weights/tiny", "--raw", "--prompt", "Hello",
         "--prompt", "KV cache", "--max-new-tokens", "3", "--cache-capacity", "32", "--max-num-seqs", "2",
         "--pipeline", "--stagger-prompts", "--trace-rounds"),
        in_flight_inputs_become_zero,
        ("tests/test_engine_modes_qwen.py", "-k", "cross_round_and_synchronous"), {"failed": 1},
        old="        if self.in_flight_rows is None:\n",
        new="        return self\n        if self.in_flight_rows is None:\n", function="with_in_flight",
        shown="return self",
        setup=("mini_deepinfer.random_checkpoint", "--preset", "tiny", "--force", "weights/tiny")),
    "lesson-12": Exercise(
        "lessons/12-speculative",
        ("mini_deepinfer.model_draft_demo", "--cpu-example", "rejection", "--trace-rounds", "--width", "3"),
        contains("99≠144 65≠156 167≠56 -> all 3 accepted + bonus 59",
                 "Greedy check: 12 tokens DIFFER from a plain greedy run of the target."),
        ("tests/test_speculative_engine.py", "-k", "greedy_equals_plain_greedy"), {"failed": 10},
        old="        if draft != target:\n            break\n", new="", function="verify_greedy",
        shown="if draft != target: break",
        unchanged=("mini_deepinfer.model_draft_demo", "--cpu-example", "acceptance", "--trace-rounds")),
    "lesson-13": Exercise(
        "lessons/13-restoring-caches",
        ("mini_deepinfer.model_draft_demo", "--cpu-example", "rejection", "--trace-rounds", "--width", "3",
         "--output", "outputs/draft-rejection.json"),
        draft_cache_differs,
        ("tests/test_speculative_engine.py", "-k", "cold_recomputation"), {"failed": 3, "passed": 1},
        old=("        if settle.kept < settle.computed:\n"
             "            self.cache.restore_snapshot(job.state_slot, settle.kept - job.start - 1)\n"
             "        else:\n"
             "            self.cache.drop_snapshots(job.state_slot)\n"),
        new="        self.cache.drop_snapshots(job.state_slot)\n", function="rewind",
        shown="if settle.kept < settle.computed:"),
    "lesson-14": Exercise(
        "lessons/14-probabilistic-acceptance",
        ("mini_deepinfer.model_draft_demo", "--cpu-example", "sampling", "--trace-rounds"),
        contains("[round 2] verify   188 drawn from norm(max(0, p - q)) at position 4"),
        ("tests/test_speculative_verify.py", "-k", "emitted_token or residual"), {"failed": 3, "passed": 6}),
    "graph-execution": Exercise(
        "notes/graph-execution", ("site_scripts.notes.gen_graphs",), padding_writes_into_a,
        ("tests/test_decode_graphs.py", "-k", "padding"), {"failed": 1}),
}


def flat(text: str) -> str:
    return " ".join(text.split())


def exercise_text(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index("{#exercise}")
    return flat(text[start:text.index("{#next}", start)])


CHANGE = re.compile(r"change (?:`[^`]+` in `[^`]+` )?(?:from )?`(?P<old>[^`]+)`.*? to `(?P<new>[^`]+)`")
DELETE = re.compile(r"delete (?:the line )?`(?P<old>[^`]+)`")
FILE = re.compile(r"`(?P<file>mini_deepinfer/[\w/]+\.py)`")


def the_change(exercise: Exercise) -> tuple[str, str, str]:
    """(file, old, new) of the exercise, as its English page words it (``new`` "" deletes the line)."""
    text = exercise_text(DOCS / f"{exercise.page}.en.md")
    file = FILE.search(text)
    assert file, f"{exercise.page}: the exercise names no file of the package"
    if exercise.old is not None:
        return file["file"], exercise.old, exercise.new or ""
    found = CHANGE.search(text) or DELETE.search(text)
    assert found, f"{exercise.page}: no 'change `...` to `...`' or 'delete the line `...`' in the exercise"
    return file["file"], found["old"], found.groupdict().get("new") or ""


def span(source: str, function: str | None) -> tuple[int, int]:
    """Character range of ``function`` (any def of that name) in ``source``; the whole text for None."""
    if function is None:
        return 0, len(source)
    node = next(n for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function)
    lines = source.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: node.lineno - 1])
    return start, start + sum(len(line) for line in lines[node.lineno - 1: node.end_lineno])


def change(copy: Path, exercise: Exercise) -> None:
    """Make the exercise's change in the copy: ``old`` must occur once in the file (or in ``function``)."""
    file, old, new = the_change(exercise)
    path = copy / file
    source = path.read_text(encoding="utf-8")
    start, end = span(source, exercise.function)
    assert source[start:end].count(old) == 1, f"{file}: `{old}` is not there exactly once"
    at = source.index(old, start)
    if new == "" and exercise.old is None:  # delete the whole line
        line_start, line_end = source.rindex("\n", 0, at) + 1, source.index("\n", at) + 1
        source = source[:line_start] + source[line_end:]
    else:
        source = source[:at] + new + source[at + len(old):]
    path.write_text(source, encoding="utf-8")


def scratch_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, copy / name)
    (copy / "outputs").mkdir()
    return copy


def run(copy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=copy, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)


@pytest.fixture(scope="session")
def python():
    """``python -m`` for the commands: one helper per test process
    (``site_scripts/build/preloaded_python.py``)."""
    helper = PreloadedPython()
    yield lambda copy, *args: helper.run_module(copy, *args, timeout=TIMEOUT_S)
    helper.close()


@pytest.mark.parametrize("name", list(EXERCISES))
def test_both_pages_show_the_same_change_of_a_file_that_holds_it(name: str) -> None:
    exercise = EXERCISES[name]
    file, old, new = the_change(exercise)
    source = (ROOT / file).read_text(encoding="utf-8")
    start, end = span(source, exercise.function)
    assert source[start:end].count(old) == 1, f"{file} does not hold `{old}` once where the page says"
    zh = exercise_text(DOCS / f"{exercise.page}.md")
    for code in (file, exercise.shown) if exercise.old is not None else (file, old, new):
        assert not code or flat(code) in zh, f"docs/{exercise.page}.md's exercise does not show `{code}`"


RUNS = [name for name, exercise in EXERCISES.items() if exercise.command]


@pytest.mark.parametrize("name", RUNS)
def test_the_command_in_the_changed_copy_prints_what_the_page_says(name: str, tmp_path: Path, python) -> None:
    exercise = EXERCISES[name]
    copy = scratch_copy(tmp_path)
    if exercise.setup:
        assert python(copy, *exercise.setup).returncode == 0
    original = python(copy, *exercise.command)
    assert original.returncode == 0, original.stderr[-2000:]
    kept = ""
    if exercise.unchanged:
        unchanged = python(copy, *exercise.unchanged)
        assert unchanged.returncode == 0, unchanged.stderr[-2000:]
        kept = unchanged.stdout
    change(copy, exercise)
    changed = python(copy, *exercise.command)
    assert exercise.shows is not None
    exercise.shows(changed.stdout + changed.stderr, original.stdout + original.stderr)
    if exercise.unchanged:
        assert python(copy, *exercise.unchanged).stdout == kept, "the page says this does not change"


def test_lesson_3_with_pipeline_crashes_on_a_slot_that_does_not_exist(tmp_path: Path, python) -> None:
    copy = scratch_copy(tmp_path)
    change(copy, EXERCISES["lesson-03"])
    result = python(copy, "mini_deepinfer.pipeline_demo", "--pipeline")
    assert result.returncode != 0
    assert "SlotPoolExhausted: kv: asked for 1 slots, 0 free" in result.stderr
    assert "SlotPoolExhausted" in exercise_text(DOCS / "lessons/03-batching.en.md")


def outcome(last_line: str) -> dict[str, int]:
    """``3 failed, 2 passed, 10 deselected in 4.1s`` -> {"failed": 3, "passed": 2}."""
    counts = dict((kind, int(n)) for n, kind in re.findall(r"(\d+) (failed|passed|errors?)", last_line))
    if "errors" in counts:
        counts["error"] = counts.pop("errors")
    return counts


def test_outcome_reads_pytest_s_summary_line() -> None:
    summary = "3 failed, 2 passed, 1 error, 10 deselected in 4.1s"
    assert outcome(summary) == {"failed": 3, "passed": 2, "error": 1}
    assert outcome("18 failed, 12 deselected in 9.00s") == {"failed": 18}


TESTED = [name for name, exercise in EXERCISES.items() if exercise.tests]
SKIPPED_PYTEST_BLOCK = re.compile(r"^<!-- docs-test: skip -->\n```bash\n(python -m pytest .*?)\n```$",
                                  re.M | re.S)


@pytest.mark.parametrize("suffix", [".md", ".en.md"])
@pytest.mark.parametrize("name", TESTED)
def test_the_page_s_pytest_command_is_the_one_run_in_the_changed_copy_and_only_there(name: str,
                                                                                     suffix: str) -> None:
    """The doc tests skip the exercise's ``pytest`` block: the suite runs those tests here, and the test
    below runs this very command in the changed copy, so the page must show exactly that command."""
    exercise = EXERCISES[name]
    text = (DOCS / f"{exercise.page}{suffix}").read_text(encoding="utf-8")
    start = text.index("{#exercise}")
    blocks = SKIPPED_PYTEST_BLOCK.findall(text, start, text.index("{#next}", start))
    assert len(blocks) == 1, f"docs/{exercise.page}{suffix}: no single skipped `python -m pytest` block"
    assert shlex.split(blocks[0].replace("\\\n", " ")) == ["python", "-m", "pytest", "-q", *exercise.tests]


@pytest.mark.slow
@pytest.mark.parametrize("name", TESTED)
def test_the_page_s_tests_fail_in_the_changed_copy_as_the_page_says(name: str, tmp_path: Path) -> None:
    exercise = EXERCISES[name]
    copy = scratch_copy(tmp_path)
    change(copy, exercise)
    result = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *exercise.tests)
    last = result.stdout.strip().splitlines()[-1]
    got = outcome(last)
    assert all(got.get(kind, 0) == n for kind, n in exercise.outcome.items()), f"pytest: {last}"
    assert "passed" in exercise.outcome or not got.get("passed"), f"the page says all fail; pytest: {last}"
    for still in exercise.still_pass:
        kept = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", still)
        assert kept.returncode == 0, f"{still} should still pass in the copy: {kept.stdout[-1500:]}"
