"""The toy commands and core-only examples run in the page itself, in a real browser, from the site alone.

Scope: the session's one strict build of the site with the pinned Pyodide runtime (the ``hosted`` fixture of
``tests/conftest.py``), served from 127.0.0.1; headless Chromium (through Playwright, as
``tests/test_browser.py`` drives it) clicks the Run buttons and reads what the page prints: the unedited runs
print the page's own output blocks, the lessons' exercises done in the page change what the engine does, a
reader's bug shows its traceback, Stop ends an endless loop, and no request leaves the local server. Also: the
shipped engine is the package's own files, byte for byte, with no torch; the set-up refuses a runtime whose
digest is not the pinned one; and a build without the runtime passes the strict build and the link checks, its
buttons saying how to run the command locally.

Non-scope: the pages' text, and the engine's behaviour beyond what the pages show (its own tests).

Needs ``/usr/bin/chromium`` and the runtime that ``make setup`` fetches
(``site_scripts/build/fetch_pyodide.py``); without either, the browser tests are skipped with the reason.
Nothing here downloads.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
from session_builds import Hosted, configured_site_url

from mini_deepinfer.workbook.lessons import EXERCISES
from site_scripts.build import fetch_pyodide
from site_scripts.inpage import inpage_bundle
from site_scripts.inpage.inpage_measure import (
    CHROMIUM,
    Watch,
    browser,
    build_site,
    check_exercise_widget,
    run_widget,
    serve,
)

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Locator, Page

ROOT = Path(__file__).resolve().parent.parent
FINAL_LINES = ["req-0: [12, 13, 14] (length)", "req-1: [21, 22] (eos)", "Free slots: 8/8"]
COMMAND_PAGES = ["", "quickstart/", "lessons/01-life-of-a-request/", "lessons/02-stopping-and-giving-back/",
                 "lessons/03-batching/", "lessons/04-chunked-prefill/", "walkthroughs/abc/",
                 "lessons/10-cross-round/", "lessons/11-stops-across-rounds/"]
FIRST_OUTPUT_BOUND_MS = 15_000
STOP_BOUND_MS = 2_000
ENGINE = "mini_deepinfer/core/engine.py"
RUNTIME = fetch_pyodide.default_dest()

NEEDS_BROWSER = (
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.is_file(), reason="needs /usr/bin/chromium (see tests/test_browser.py)"),
    pytest.mark.skipif(
        not fetch_pyodide.is_unpacked(RUNTIME, fetch_pyodide.read_pin()["files"]),
        reason=f"needs the Pyodide runtime in {RUNTIME} (`make setup` fetches it once)",
    ),
)


def in_browser(test: Callable[..., None]) -> Callable[..., None]:
    """Mark a test that drives Chromium: slow, and skipped without the browser or the runtime."""
    for mark in NEEDS_BROWSER:
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def watch() -> Watch:
    return Watch()


@pytest.fixture(scope="module")
def base_url(hosted: Hosted) -> Iterator[str]:
    """The session's one build, with the runtime, served as it is published (under its site_url's path)."""
    with serve(hosted.root) as url:
        yield url + urlsplit(hosted.site_url).path.lstrip("/")


@pytest.fixture(scope="module")
def context(
    base_url: str, watch: Watch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrowserContext]:
    with browser(tmp_path_factory.mktemp("profile"), watch) as browser_context:
        yield browser_context


@pytest.fixture
def page(context: BrowserContext, base_url: str) -> Iterator[Page]:
    """A fresh tab with no edits kept from an earlier test."""
    tab = context.new_page()
    tab.goto(base_url + "en/", wait_until="load")
    tab.evaluate("localStorage.clear()")
    yield tab
    tab.close()


def widget_on(page: Page, url: str, value: str | None = None) -> Locator:
    """The first Run widget of the page at ``url`` (the one whose command or code is ``value``)."""
    page.goto(url, wait_until="load")
    widgets = page.locator("div.inpage-run")
    if value is None:
        return widgets.first
    return widgets.and_(page.locator(f"[data-inpage-value={json.dumps(value)}]")).first


def shown_output(widget: Locator) -> str:
    """The page's own output block right above the widget (the generated snippet), or None if it has none."""
    return widget.evaluate(
        "box => { const e = box.previousElementSibling;"
        " return e && e.matches('.language-text.highlight') ? e.querySelector('code').textContent : null; }"
    )


def drawn_rows(widget: Locator) -> list[list[str]]:
    """The cells of the table the widget drew for its run."""
    return [row.split("\t") for row in widget.locator(".inpage-run__table tbody tr").all_inner_texts()]


def last_lines(output: str, n: int) -> list[str]:
    return output.rstrip("\n").splitlines()[-n:]


def open_engine_file(widget: Locator, path: str = ENGINE) -> Locator:
    """Open ``path`` in the widget's editor; return the editor once the shipped text is in it."""
    widget.locator("details.inpage-run__editor > summary").click()
    widget.locator("select.inpage-run__files").select_option(path)
    widget.page.wait_for_function("({box, path}) => box.dataset.inpageFile === path",
                                  arg={"box": widget.element_handle(), "path": path})
    return widget.locator("textarea.inpage-run__file")


def edit(editor: Locator, old: str, new: str) -> None:
    """Replace the one occurrence of ``old`` in the editor, as a reader typing would (an input event)."""
    text = editor.input_value()
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    editor.fill(text.replace(old, new))


# ---- the shipped files, without a browser ----


def test_shipped_engine_is_the_package_files_byte_for_byte_without_torch(tmp_path: Path) -> None:
    names = inpage_bundle.write_zip(tmp_path / "engine.zip")
    assert {"mini_deepinfer/__init__.py", "mini_deepinfer/__main__.py", ENGINE, "mini_deepinfer/tools/cli.py",
            "mini_deepinfer/pipeline_demo.py", "site_scripts/lessons/gen_toy.py",
            "site_scripts/lessons/gen_abc.py",
            } <= set(names)
    with zipfile.ZipFile(tmp_path / "engine.zip") as archive:
        assert archive.namelist() == names
        for name in names:
            data = archive.read(name)
            assert data == (ROOT / name).read_bytes(), f"{name} differs from the package's file"
            nodes = inpage_bundle.import_time_nodes(ast.parse(data))
            imported = [alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names]
            imported += [node.module or "" for node in nodes if isinstance(node, ast.ImportFrom)]
            assert not [m for m in imported if m.partition(".")[0] == "torch"], f"{name} imports torch"


# Runs each command a page can run, from the unzipped engine alone: no site-packages (`-S`), no repository on
# the path (`-I`), and torch refused even if the interpreter had it; the page's tables are made as well.
SHIPPED_RUNS = """
import json, sys
sys.path.insert(0, sys.argv[1])
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise ImportError("torch is not shipped")
sys.meta_path.insert(0, Refuse())
from site_scripts.inpage import inpage_worker
inpage_worker.load_originals(sys.argv[1])
runs = [("", "rounds", "mini_deepinfer"), ("--pipeline", "in-flight", "mini_deepinfer"),
        ("--toy", "abc-rounds", "mini_deepinfer.pipeline_demo"),
        ("--toy --pipeline", "in-flight", "mini_deepinfer.pipeline_demo"),
        ("", "", "mini_deepinfer.pipeline_demo")]
results = [json.loads(inpage_worker.run_command(*run)) for run in runs]
print(json.dumps({"results": results, "torch": "torch" in sys.modules}))
"""


def run_shipped(script: str, tmp_path: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (its ``sys.argv[1]``: the unzipped engine) with no site-packages and no repository on
    the path, as the page's worker has only the shipped files."""
    inpage_bundle.write_zip(tmp_path / "engine.zip")
    with zipfile.ZipFile(tmp_path / "engine.zip") as zipped:
        zipped.extractall(tmp_path / "engine")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", script, str(tmp_path / "engine")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_every_command_a_page_runs_needs_only_the_shipped_files(tmp_path: Path) -> None:
    proc = run_shipped(SHIPPED_RUNS, tmp_path)
    report = json.loads(proc.stdout.splitlines()[-1])
    assert [r["code"] for r in report["results"]] == [0, 0, 0, 0, 2] and report["torch"] is False
    assert all(r["table"] for r in report["results"][:4])
    assert proc.stderr.splitlines()[-1].startswith("error: without --toy this command loads torch")
    assert "Free slots: KV 36/36, state 3/3" in proc.stdout


# Checks every in-page workbook exercise from the unzipped engine alone, as SHIPPED_RUNS runs the commands:
# the starter fails (1), the engine's own function passes (0), both generated in the shipped files.
SHIPPED_EXERCISES = SHIPPED_RUNS.split("runs = [")[0] + """
import io, contextlib
from mini_deepinfer.workbook.lessons import EXERCISES
codes = {}
for item in [i for i in EXERCISES if i.in_page]:
    with contextlib.redirect_stdout(io.StringIO()):
        starter = inpage_worker.exercise_text(item.lesson, "en", "starter")
        solution = inpage_worker.exercise_text(item.lesson, "zh", "solution")
        codes[item.lesson] = [json.loads(inpage_worker.check_exercise(item.lesson, text, lang))["code"]
                              for text, lang in ((starter, "en"), (solution, "zh"))]
print(json.dumps({"codes": codes, "torch": "torch" in sys.modules}))
"""


def test_every_in_page_exercise_checks_with_only_the_shipped_files(tmp_path: Path) -> None:
    proc = run_shipped(SHIPPED_EXERCISES, tmp_path)
    report = json.loads(proc.stdout.splitlines()[-1])
    in_page = [str(item.lesson) for item in EXERCISES if item.in_page]
    assert report == {"codes": dict.fromkeys(in_page, [1, 0]), "torch": False}


# Flags a reader may type into a Run box, together covering every option each command's --help lists.
PAGE_FLAGS = {"mini_deepinfer": ["--slots 12", "--cancel req-0", "--cancel req-1 --cancel-after-round 2",
                                 "--pipeline", "--pipeline --cancel req-0", "--pipeline --slots 8"],
              "mini_deepinfer.pipeline_demo": ["--toy", "--toy --pipeline", "--toy --max-batched-tokens 5",
                                               "--toy --kv-slots 40 --max-num-seqs 2",
                                               "--toy --no-chunked-prefill --max-batched-tokens 18"]}


@pytest.mark.parametrize("command", sorted(PAGE_FLAGS))
def test_every_flag_the_help_lists_runs_in_the_page_with_its_table(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each option of the command's --help, run as the worker runs it with the table the lesson's box asks for
    (the round table: a reader may add --pipeline in the box), ends with exit code 0 and a table."""
    import importlib

    from site_scripts.inpage import inpage_worker

    module = importlib.import_module(inpage_worker.COMMANDS[command])
    parser = module.build_parser() if hasattr(module, "build_parser") else None
    if parser is None:
        with pytest.raises(SystemExit):
            module.parse_args(["--help"])
        options = set(re.findall(r"(--[\w-]+)", capsys.readouterr().out)) - {"--help"}
    else:
        options = {o for action in parser._actions for o in action.option_strings if o.startswith("--")}
        options -= {"--help"}
    used = {word for flags in PAGE_FLAGS[command] for word in flags.split() if word.startswith("--")}
    assert options <= used, f"--help lists {sorted(options - used)}, which no case here runs"
    table = "rounds" if command == "mini_deepinfer" else "abc-rounds"
    for flags in PAGE_FLAGS[command]:
        result = json.loads(inpage_worker.run_command(flags, table, command))
        assert result["code"] == 0 and result["table"], (flags, capsys.readouterr().err)


def test_help_prints_the_usage_and_exits_0_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    from site_scripts.inpage import inpage_worker

    result = json.loads(inpage_worker.run_command("--help"))
    out, err = capsys.readouterr()
    assert result["code"] == 0 and out.startswith("usage: python -m mini_deepinfer") and err == ""
    assert json.loads(inpage_worker.run_script("import sys; sys.exit(3)"))["code"] == 3


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_timings_table_tells_the_first_line_from_the_last_and_names_its_command(lang: str) -> None:
    from site_scripts.inpage import gen_inpage

    record = json.loads(gen_inpage.RECORD.read_text(encoding="utf-8"))
    table = gen_inpage.timings_table(record, lang)
    snippet = gen_inpage.RECORD.with_name("timings.md" if lang == "en" else "timings.zh.md")
    assert snippet.read_text(encoding="utf-8") == table
    values = [row.strip("| ").split(" | ")[1] for row in table.splitlines()[2:]]
    first_line, last_line = values[2], values[3]
    differ = record["first_run"]["click_to_first_line_ms"] != record["first_run"]["click_to_end_ms"]
    assert (first_line != last_line) == differ
    assert values[1] == "`python -m mini_deepinfer`" and "site_scripts.inpage.inpage_measure" in values[-1]


def test_shipped_engine_holds_every_core_module_the_command_imports() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in inpage_bundle.bundle_files()}
    core = {p.relative_to(ROOT).as_posix() for p in (ROOT / "mini_deepinfer" / "core").glob("*.py")}
    assert core <= names
    assert not [n for n in names if n.startswith(("mini_deepinfer/models/", "mini_deepinfer/runtime/"))]


def test_fetch_refuses_a_tarball_whose_integrity_is_not_the_pinned_one(tmp_path: Path) -> None:
    tarball = tmp_path / "pyodide.tgz"
    tarball.write_bytes(b"not the runtime")
    pin = tmp_path / "pyodide.json"
    entry = {**json.loads(fetch_pyodide.PIN.read_text(encoding="utf-8")), "tarball": tarball.as_uri()}
    pin.write_text(json.dumps(entry), encoding="utf-8")
    with pytest.raises(fetch_pyodide.FetchError, match="integrity"):
        fetch_pyodide.fetch(tmp_path / "cache" / "runtime", pin)
    assert not list((tmp_path / "cache").iterdir()), "a wrong download is not kept"


@pytest.mark.skipif(not (RUNTIME.parent / "pyodide-0.29.5.tgz").is_file(), reason="runtime not fetched")
def test_the_fetched_tarball_has_the_pinned_integrity() -> None:
    pin = fetch_pyodide.read_pin()
    assert pin["version"] == "0.29.5"
    assert fetch_pyodide.integrity(RUNTIME.parent / f"pyodide-{pin['version']}.tgz") == pin["integrity"]


# ---- in the browser ----


@in_browser
@pytest.mark.parametrize("lang", ["en/", ""])
def test_quickstart_run_prints_the_pages_output_and_ends_with_all_slots_free(
    page: Page, base_url: str, lang: str
) -> None:
    widget = widget_on(page, base_url + lang + "quickstart/")
    result = run_widget(widget)
    assert result["state"] == "done" and result["code"] == "0"
    assert result["output"] == shown_output(widget) == (ROOT / "snippets" / "toy" / "demo.txt").read_text()
    assert last_lines(result["output"], 3) == FINAL_LINES
    # the first click loads the runtime; the test only bounds it generously (inpage_measure records it)
    assert 0 <= result["first_ms"] <= FIRST_OUTPUT_BOUND_MS


@in_browser
def test_every_unedited_command_prints_exactly_its_pages_output(page: Page, base_url: str) -> None:
    compared = 0
    for path in COMMAND_PAGES:
        page.goto(base_url + "en/" + path, wait_until="load")
        for index in range(page.locator("div.inpage-run[data-inpage-kind=command]").count()):
            widget = page.locator("div.inpage-run[data-inpage-kind=command]").nth(index)
            result = run_widget(widget)
            where = f"{path}: {widget.get_attribute('data-inpage-value')}"
            shown = shown_output(widget)
            if shown is None:  # the home page shows the command only
                assert last_lines(result["output"], 3) == FINAL_LINES, where
                continue
            assert result["output"] == shown, where
            compared += 1
    assert compared >= len(COMMAND_PAGES) - 1


@in_browser
def test_lesson_1_round_table_is_redrawn_for_an_edited_run(page: Page, base_url: str) -> None:
    widget = widget_on(page, base_url + "en/lessons/01-life-of-a-request/")
    run_widget(widget)
    page_rows = page.locator(".inpage-table[data-inpage-table=rounds] tbody tr").all_inner_texts()
    assert widget.locator(".inpage-run__table tbody tr").all_inner_texts() == page_rows
    edit(open_engine_file(widget), "req.output_token_ids[-1]", "req.output_token_ids[0]")
    result = run_widget(widget)
    assert "req-0: [12, 13, 13] (length)" in result["output"]  # as the lesson's exercise says
    assert widget.locator(".inpage-run__table tbody tr").all_inner_texts() != page_rows


@in_browser
def test_lesson_2_exercise_in_the_page_leaks_three_slots_and_reset_returns_them(
    page: Page, base_url: str
) -> None:
    widget = widget_on(page, base_url + "en/lessons/02-stopping-and-giving-back/",
                       "--cancel req-0 --cancel-after-round 2")
    result = run_widget(widget)
    assert "[round 2] finish   req-0 cancelled" in result["output"]
    assert last_lines(result["output"], 1) == ["Free slots: 8/8"]
    editor = open_engine_file(widget)
    edit(editor, "        self.finish(req, FinishReason.CANCELLED)\n        self.release_if_idle(req)\n",
         "        self.finish(req, FinishReason.CANCELLED)\n")
    assert last_lines(run_widget(widget)["output"], 1) == ["Free slots: 5/8"]
    page.reload(wait_until="load")  # the edit is kept in this browser
    widget = page.locator("div.inpage-run[data-inpage-kind=command]").first
    assert last_lines(run_widget(widget)["output"], 1) == ["Free slots: 5/8"]
    open_engine_file(widget)
    widget.locator(".inpage-run__reset-file").click()
    assert last_lines(run_widget(widget)["output"], 1) == ["Free slots: 8/8"]


@in_browser
def test_lesson_10_pipeline_ends_alike_and_its_table_shows_a_round_in_flight(
    page: Page, base_url: str
) -> None:
    widget = widget_on(page, base_url + "en/lessons/10-cross-round/", "--pipeline")
    result = run_widget(widget)
    assert last_lines(result["output"], 3) == FINAL_LINES
    rows = drawn_rows(widget)
    assert any(row[3].strip() not in ("—", "") for row in rows), rows  # a round launched, not yet read


@in_browser
def test_lesson_3_toy_run_draws_the_abc_round_table_whose_rounds_are_the_models(
    page: Page, base_url: str
) -> None:
    widget = widget_on(page, base_url + "en/lessons/03-batching/", "--toy")
    result = run_widget(widget)
    assert last_lines(result["output"], 1) == ["Free slots: KV 36/36, state 3/3"]
    rows = drawn_rows(widget)
    table = (ROOT / "snippets" / "abc" / "rounds.md").read_text(encoding="utf-8")
    model_rows = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in table.splitlines()]
    committed = 3  # the only column whose token ids differ between the toy runner and the model
    assert [row[:committed] + row[committed + 1:] for row in rows] == [
        row[:committed] + row[committed + 1:] for row in model_rows]
    assert [row[committed] for row in rows] != [row[committed] for row in model_rows]
    widget.locator("input.inpage-run__flags").fill("")
    result = run_widget(widget)
    assert result["code"] == "2"
    assert result["output"].startswith("error: without --toy this command loads torch")


@in_browser
def test_a_bug_in_an_edited_example_shows_its_traceback(page: Page, base_url: str) -> None:
    page.goto(base_url + "en/lessons/02-stopping-and-giving-back/", wait_until="load")
    widget = page.locator("div.inpage-run[data-inpage-kind=session]").first
    code = widget.locator("textarea.inpage-run__code")
    code.fill(code.input_value().replace("pool.allocate(3)", "pool.alocate(3)"))
    output = run_widget(widget)["output"]
    assert "Traceback (most recent call last):" in output
    assert "AttributeError: 'SlotPool' object has no attribute 'alocate'" in output


@in_browser
def test_a_bad_flag_shows_the_commands_one_line_error(page: Page, base_url: str) -> None:
    widget = widget_on(page, base_url + "en/quickstart/")
    widget.locator("input.inpage-run__flags").fill("--slots x")
    result = run_widget(widget)
    assert result["output"] == "error: argument --slots: invalid int value: 'x'\n"
    assert result["code"] == "2"


@in_browser
def test_help_is_a_clean_exit_in_the_page(page: Page, base_url: str) -> None:
    widget = widget_on(page, base_url + "en/quickstart/")
    widget.locator("input.inpage-run__flags").fill("--help")
    result = run_widget(widget)
    assert result["state"] == "done" and result["code"] == "0"
    assert result["output"].startswith("usage: python -m mini_deepinfer")
    assert "Traceback" not in result["output"]


@in_browser
def test_before_a_run_the_widget_shows_no_empty_strip_and_not_the_command_again(
    page: Page, base_url: str
) -> None:
    widget = widget_on(page, base_url + "en/lessons/10-cross-round/", "--pipeline")
    assert not widget.locator(".inpage-run__output").is_visible()
    assert not widget.locator(".inpage-run__tables").is_visible()
    assert not widget.locator(".inpage-run__status").first.is_visible()
    assert "python -m" not in widget.locator(".inpage-run__command").inner_text()
    flags = widget.locator("input.inpage-run__flags")
    assert flags.get_attribute("placeholder") == "add flags here, e.g. --help"


@in_browser
def test_a_file_chosen_before_the_runtime_loads_says_so_until_it_shows(
    page: Page, base_url: str
) -> None:
    widget = widget_on(page, base_url + "en/quickstart/")
    widget.locator("details.inpage-run__editor > summary").click()
    widget.locator("select.inpage-run__files").select_option(ENGINE)
    note, editor = widget.locator(".inpage-run__file-note"), widget.locator("textarea.inpage-run__file")
    assert note.inner_text().startswith("Loading the Python runtime") and not editor.is_editable()
    page.wait_for_function("({box, path}) => box.dataset.inpageFile === path",
                           arg={"box": widget.element_handle(), "path": ENGINE}, timeout=60_000)
    assert not note.is_visible() and editor.is_editable() and "class Engine" in editor.input_value()


@in_browser
def test_stop_ends_an_endless_loop_within_two_seconds_and_the_next_run_works(
    page: Page, base_url: str
) -> None:
    page.goto(base_url + "en/lessons/02-stopping-and-giving-back/", wait_until="load")
    widget = page.locator("div.inpage-run[data-inpage-kind=session]").first
    code = widget.locator("textarea.inpage-run__code")
    shipped = code.input_value()
    code.fill("while True: pass")
    widget.locator(".inpage-run__run").click()
    page.wait_for_function("box => box.dataset.inpageState === 'running'", arg=widget.element_handle(),
                           timeout=60_000)
    page.wait_for_timeout(500)  # the loop is spinning
    started = page.evaluate("performance.now()")
    widget.locator(".inpage-run__stop").click()
    page.wait_for_function("box => box.dataset.inpageState === 'stopped'", arg=widget.element_handle(),
                           timeout=STOP_BOUND_MS)
    assert page.evaluate("performance.now()") - started < STOP_BOUND_MS
    widget.locator(".inpage-run__reset-code").click()
    assert code.input_value() == shipped
    result = run_widget(widget)
    assert result["state"] == "done" and "SlotPool(kv: 2/4 free)" in result["output"]


@in_browser
def test_labels_follow_the_page_language(page: Page, base_url: str) -> None:
    for path, label in (("quickstart/", "在页面里运行"), ("en/quickstart/", "Run in the page")):
        assert widget_on(page, base_url + path).locator(".inpage-run__run").inner_text() == label


@in_browser
def test_a_build_without_the_runtime_passes_the_checks_and_says_how_to_run_locally(
    tmp_path: Path, context: BrowserContext, watch: Watch
) -> None:
    from test_site_build import links_to_nothing

    site = tmp_path / "site"
    proc = build_site(site, runtime=False)
    assert proc.returncode == 0, f"the strict build failed:\n{proc.stderr[-6000:]}"
    assert not links_to_nothing(site, urlsplit(configured_site_url()).path)
    assert not (site / "assets" / "inpage").exists()
    html = (site / "en/lessons/02-stopping-and-giving-back/index.html").read_text(encoding="utf-8")
    assert re.search(r'<div class="inpage-run"[^>]*data-inpage-runtime="no"[^>]*hidden>', html)
    with serve(site) as url:  # another port of 127.0.0.1, which the browser's guard lets through
        tab = context.new_page()
        tab.goto(url + "en/lessons/02-stopping-and-giving-back/", wait_until="load")
        widget = tab.locator("div.inpage-run").first
        assert "no in-page Python runtime" in widget.locator(".inpage-run__run").inner_text()
        assert widget.locator(".inpage-run__local").inner_text() == (
            "python -m mini_deepinfer --cancel req-0 --cancel-after-round 2")
        assert widget.locator(".inpage-run__run").is_disabled()
        tab.close()
    assert not watch.external and not watch.errors


@in_browser
def test_no_request_leaves_the_local_server(watch: Watch, context: BrowserContext) -> None:
    """Runs last in this module: every page above loaded and ran with each request to another host blocked."""
    assert context.pages is not None
    assert not watch.external
    assert not watch.errors


# ---- the workbook's exercises in the page ----

EXERCISE_PAGE = "en/lessons/03-batching/"


def exercise_on(page: Page, url: str) -> Locator:
    page.goto(url, wait_until="load")
    return page.locator("div.inpage-exercise").first


@in_browser
def test_a_workbook_starter_fails_with_the_checks_message_and_the_solution_passes_in_the_page(
    page: Page, base_url: str
) -> None:
    page.evaluate("localStorage.clear()")
    widget = exercise_on(page, base_url + EXERCISE_PAGE)
    first = check_exercise_widget(widget)  # the first check of a new tab loads the runtime
    assert first["code"] == "1" and "schedule() is still the starter" in first["output"], first
    assert 0 < first["since_open_ms"] < FIRST_OUTPUT_BOUND_MS, first
    widget.locator(".inpage-exercise__solution").click()
    solution = widget.locator(".inpage-exercise__answer code")
    solution.wait_for(state="visible", timeout=60_000)
    assert "def schedule(self) -> RoundPlan:" in solution.text_content()
    widget.locator(".inpage-exercise__code").fill(solution.text_content())
    passed = check_exercise_widget(widget)
    assert passed["code"] == "0" and "every check holds" in passed["output"], passed


@in_browser
def test_a_workbook_edit_survives_a_reload_and_reset_asks_first(page: Page, base_url: str) -> None:
    page.evaluate("localStorage.clear()")
    widget = exercise_on(page, base_url + "en/lessons/15-prefix-cache/")
    editor = widget.locator(".inpage-exercise__code")
    starter = editor.input_value()
    assert "raise NotImplementedError" in starter
    mine = "return None  # mine\n    raise NotImplementedError"
    editor.fill(starter.replace("raise NotImplementedError", mine, 1))
    edited = editor.input_value()
    page.reload(wait_until="load")
    editor = page.locator("div.inpage-exercise .inpage-exercise__code").first
    assert editor.input_value() == edited
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.locator("div.inpage-exercise .inpage-exercise__reset").first.click()
    assert editor.input_value() == edited
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("div.inpage-exercise .inpage-exercise__reset").first.click()
    assert editor.input_value() == starter
