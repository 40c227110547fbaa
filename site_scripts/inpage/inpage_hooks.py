"""MkDocs hooks for the in-page runs: mark the toy commands and core-only examples, ship the runtime.

Scope (mkdocs.yml lists this file under ``hooks:``):

1. Marking. After a page is rendered, every code block that is exactly a toy command
   (``python -m mini_deepinfer`` with plain flags, or ``python -m mini_deepinfer.pipeline_demo --toy ...``,
   the A/B/C demo on the toy runner) gets a hidden ``<div class="inpage-run">`` after it (after
   its output block, where one follows), and so does every ``pycon`` or untitled ``python`` example that
   imports nothing but the engine's core and the standard library. ``docs/javascripts/inpage-run.js`` turns
   each into a Run button with an editor; with JavaScript off the page is unchanged. A table that a page makes
   from a demo's trace (``snippets/toy/demo-rounds.md``, ``snippets/abc/rounds.md``) is wrapped in a marked
   ``<div>`` so that the script can draw the same table for the reader's own run; the A/B/C demo gets its
   round table on every page (lessons 3 and 4 show it as a picture), and a command with ``--pipeline`` gets
   the table of rounds in flight. Each workbook exercise (a ``<div class="inpage-exercise">`` that a lesson's
   "Build it" section includes) is told whether the build ships the runtime.
2. Shipping. After the build, the pinned Pyodide runtime (``site_scripts/build/pyodide.json``, fetched once
   by the set-up with ``site_scripts/build/fetch_pyodide.py``) is copied to ``assets/inpage/pyodide/`` and the
   engine's files are zipped to ``assets/inpage/engine.zip`` (``site_scripts/inpage/inpage_bundle.py``).
   Without the runtime (not fetched, or ``MINI_DEEPINFER_PYODIDE`` set to an empty string or to a folder
   without it) the build ships neither, and each marker says so: the script then shows how to run the command
   locally.

Non-scope: what a run does (``site_scripts/inpage/inpage_worker.py``) and the page's own text. Like every hook
here, these give the same result when mkdocs-static-i18n runs the build a second time for the English pages.
"""

from __future__ import annotations

import ast
import html
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # MkDocs loads a hook by its path; `mike deploy` runs with no ROOT on sys.path
    sys.path.insert(0, str(ROOT))

from site_scripts.build.fetch_pyodide import default_dest, is_unpacked, read_pin  # noqa: E402
from site_scripts.inpage.inpage_bundle import bundle_files, write_zip  # noqa: E402
from site_scripts.inpage.inpage_worker import COMMANDS, EDITABLE, NEEDS_TORCH, table_for  # noqa: E402

RUNTIME_ENV = "MINI_DEEPINFER_PYODIDE"
ASSETS = Path("assets") / "inpage"
SCRIPT = Path("javascripts") / "inpage-run.js"  # only the build that writes it gets the runtime
PAGE_TABLES = {"snippets/toy/demo-rounds.md": "rounds", "snippets/abc/rounds.md": "abc-rounds"}
"""A generated table a page shows -> the name of the renderer that draws it for a new run."""
BLOCK = re.compile(r'<div class="language-(?P<lang>[\w-]+) highlight"><pre>.*?</pre></div>', re.DOTALL)
OUTPUT_AFTER = re.compile(r'\s*(?:<!--.*?-->\s*)*<div class="language-text highlight"><pre>.*?</pre></div>',
                          re.DOTALL)
TAG = re.compile(r"<[^>]+>")
COMMAND = re.compile(r"python -m (?P<command>%s)(?P<flags>(?: [\w.=-]+)*)"
                     % "|".join(map(re.escape, sorted(COMMANDS, key=len, reverse=True))))
"""A block that is exactly one of the commands the worker runs (``COMMANDS``), with plain flags."""
COMMAND_TABLES = {"mini_deepinfer.pipeline_demo": "abc-rounds"}
"""A command -> the table its run always gets (else the page's own table, if any)."""
CORE_MODULES = re.compile(r"mini_deepinfer(\.core(\.\w+)?)?")


def runtime_dir() -> Path | None:
    """The unpacked runtime a build ships, or None (the environment variable can point elsewhere or off)."""
    chosen = os.environ.get(RUNTIME_ENV)
    folder = default_dest() if chosen is None else Path(chosen) if chosen else None
    if folder is None or not is_unpacked(folder, read_pin()["files"]):
        return None
    return folder


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Note whether this build ships the runtime (the markers tell the page)."""
    folder = runtime_dir()
    config.extra["inpage_runtime"] = str(folder) if folder else ""
    shipped = [path.relative_to(ROOT).as_posix() for path in bundle_files(ROOT)] if folder else []
    config.extra["inpage_files"] = " ".join(path for path in shipped if path.startswith(EDITABLE))
    return config


def with_marked_tables(markdown: str) -> str:
    """Wrap each table that ends in an include of a generated trace table in a marked ``<div>``."""
    lines = markdown.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        found = re.fullmatch(r'\s*-{1,}8<-{1,}\s+"(?P<path>[^"]+)"\s*', lines[index])
        kind = found and PAGE_TABLES.get(found["path"])
        if not kind:
            continue
        start = index
        while start > 0 and lines[start - 1].lstrip().startswith("|"):
            start -= 1
        lines[start:index + 1] = [f'<div class="inpage-table" data-inpage-table="{kind}" markdown>', "",
                                  *lines[start:index + 1], "", "</div>"]
    return "\n".join(lines)


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, **kwargs: Any) -> str:
    """Mark the tables a run can redraw."""
    return with_marked_tables(markdown)


def block_text(block_html: str) -> str:
    """The text of a highlighted code block, as the reader sees it."""
    return html.unescape(TAG.sub("", block_html)).strip("\n")


def session_code(text: str) -> str:
    """The Python of an interactive session: its ``>>>`` and ``...`` lines without the prompts."""
    lines = [line for line in text.splitlines() if line.startswith((">>>", "..."))]
    return "\n".join(line[4:] for line in lines)


def is_core_only(code: str) -> bool:
    """True if ``code`` imports the engine's core (``mini_deepinfer`` or ``mini_deepinfer.core``) and
    otherwise only the standard library."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    modules = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    modules += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    engine = [m for m in modules if m.partition(".")[0] == "mini_deepinfer"]
    others = [m for m in modules if m.partition(".")[0] != "mini_deepinfer"]
    return bool(engine) and all(CORE_MODULES.fullmatch(m) for m in engine) and all(
        m.partition(".")[0] in sys.stdlib_module_names for m in others)


def marker(kind: str, value: str, files: str, table: str = "", command: str = "") -> str:
    """The hidden element the page's script turns into a Run button (JavaScript off: nothing shows).

    ``files`` lists the engine files the page's editor offers; empty when the build has no runtime.
    ``command`` is the module a command block runs (``python -m COMMAND``).
    """
    attrs = {"data-inpage-kind": kind, "data-inpage-command": command, "data-inpage-value": value,
             "data-inpage-table": table,
             "data-inpage-runtime": "yes" if files else "no", "data-inpage-files": files}
    shown = " ".join(f'{name}="{html.escape(text, quote=True)}"' for name, text in attrs.items() if text)
    return f'<div class="inpage-run" {shown} hidden></div>'


def _widget_for(lang: str, text: str, files: str, page_table: str) -> tuple[str, bool] | None:
    """(marker, whether it goes after the output block) for one code block, or None."""
    if lang in ("bash", "console", "shell", "sh") and (command := COMMAND.fullmatch(text)):
        name, flags = command["command"], command["flags"].strip()
        if name in NEEDS_TORCH and NEEDS_TORCH[name] not in flags.split():
            return None  # without that flag the command loads torch: the page cannot run it
        table = table_for(flags.split(), COMMAND_TABLES.get(name, page_table))
        return marker("command", flags, files, table, name), True
    if lang == "pycon" and is_core_only(code := session_code(text)):
        return marker("session", code, files), False
    if lang in ("python", "py") and is_core_only(text):
        return marker("script", text, files), False
    return None


def with_run_markers(page_html: str, files: str) -> str:
    """``page_html`` with a marker after each runnable code block (``files``: see :func:`marker`)."""
    match = re.search(r'data-inpage-table="([\w-]+)"', page_html)
    page_table = match[1] if match else ""
    pieces, position = [], 0
    for block in BLOCK.finditer(page_html):
        if block.start() < position:
            continue
        found = _widget_for(block["lang"], block_text(block[0]), files, page_table)
        if found is None:
            continue
        end = block.end()
        output = OUTPUT_AFTER.match(page_html, end) if found[1] else None
        end = output.end() if output else end
        pieces += [page_html[position:end], "\n", found[0]]
        position = end
    return "".join([*pieces, page_html[position:]])


def with_exercise_runtime(page_html: str, files: str) -> str:
    """Tell each workbook exercise of the page (``snippets/workbook/lesson_NN.*.md``) whether this build ships
    the runtime, as each Run marker is told."""
    runtime = "yes" if files else "no"
    return page_html.replace('<div class="inpage-exercise" ',
                             f'<div class="inpage-exercise" data-inpage-runtime="{runtime}" ')


def on_page_content(page_html: str, *, page: Page, config: MkDocsConfig, **kwargs: Any) -> str:
    """Put a Run marker after each toy command and core-only example of the page; mark its exercises."""
    files = str(config.extra.get("inpage_files") or "")
    return with_exercise_runtime(with_run_markers(page_html, files), files)


def _copy_if_changed(source: Path, dest: Path) -> None:
    if dest.is_file() and dest.stat().st_size == source.stat().st_size and (
            dest.stat().st_mtime >= source.stat().st_mtime):
        return  # `mkdocs serve` rebuilds often; the runtime is 12 MB
    shutil.copy2(source, dest)


def on_post_build(config: MkDocsConfig) -> None:
    """Copy the runtime and zip the engine into the built site (the build that holds the page script)."""
    site = Path(config.site_dir)
    folder = config.extra.get("inpage_runtime")
    if not folder or not (site / SCRIPT).is_file():
        return
    target = site / ASSETS / "pyodide"
    target.mkdir(parents=True, exist_ok=True)
    for name in read_pin()["files"]:
        _copy_if_changed(Path(folder) / name, target / name)
    write_zip(site / ASSETS / "engine.zip")
