"""Measure the in-page runs in headless Chromium: site size added, click to first output line, repeat run.

Scope: build the site (``mkdocs build --strict``, with or without the runtime), serve it from 127.0.0.1 with a
small static server, drive the system Chromium through Playwright (every request to another host is blocked
and recorded), click the quick start's Run button twice, open lesson 3 in a new tab and click its workbook
exercise's Check at once (the starter: page opened to the check's result), and write what was measured to
``snippets/inpage/timings.json``; ``site_scripts/inpage/gen_inpage.py`` renders the table the contributing
page shows from that file. ``tests/test_inpage_run.py`` uses the same helpers (:func:`build_site`,
:func:`serve`, :func:`browser`, :func:`run_widget`) for its checks.

Usage: ``python -m site_scripts.inpage.inpage_measure [--commit REV]`` (needs ``/usr/bin/chromium`` and the
runtime fetched by ``make setup``; ``--commit`` names the commit of a tree that is not a git checkout). The
figures are wall-clock times on the machine it runs on, from a local server; they are not the hosted site's,
whose download time depends on the reader's network.

Non-scope: what the pages say, and any number about the engine itself.
"""

from __future__ import annotations

import http.server
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Locator, Page

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
RECORD = ROOT / "snippets" / "inpage" / "timings.json"
EXERCISE_PAGE = "en/lessons/03-batching/"  # the workbook exercise measured: opened, then checked at once
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SHIPPED = ("assets/inpage", "javascripts/inpage-run.js", "javascripts/inpage-worker.js",
           "stylesheets/inpage-run.css")
"""What the in-page runs add to a built site (relative to its root)."""
RUN_TIMEOUT_MS = 120_000
QUICKSTART = "en/quickstart/"
LOOPBACK = "127.0.0.1"


def build_site(site_dir: Path, runtime: bool = True) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` into ``site_dir``; ``runtime=False`` builds without the Pyodide runtime."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    if not runtime:
        env["MINI_DEEPINFER_PYODIDE"] = ""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )


def _handler(root: Path) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        """Static files under ``root``, quietly; WebAssembly with its own type (streaming compile)."""

        extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm"}

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on a free loopback port; yield its URL (``http://127.0.0.1:PORT/``)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(root))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Watch:
    """What the browser did: requests it tried to send to another host (each was blocked), page errors."""

    external: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def leaves_loopback(url: str) -> bool:
    """True for a network request to any host but 127.0.0.1 (where the test servers listen)."""
    parts = urlsplit(url)
    return parts.scheme in ("http", "https", "ws", "wss") and parts.hostname != LOOPBACK


@contextmanager
def browser(profile: Path, watch: Watch) -> Iterator[BrowserContext]:
    """Headless system Chromium; any request to a host other than 127.0.0.1 is blocked and recorded."""
    from playwright.sync_api import sync_playwright

    def guard(route: Any, request: Any) -> None:
        if leaves_loopback(request.url):
            watch.external.append(request.url)
            route.abort()
        else:
            route.continue_()

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        context.set_default_timeout(30_000)
        context.route("**/*", guard)
        # report every request the browser sends, the worker's included, whether or not a route saw it
        context.on("request", lambda request: watch.external.append(request.url)
                   if leaves_loopback(request.url) else None)
        context.on("weberror", lambda error: watch.errors.append(str(error.error)))
        try:
            yield context
        finally:
            context.close()


def _click_and_wait(widget: Locator, button: str, timeout_ms: int) -> dict[str, Any]:
    """Click ``button`` in the widget, wait until its run has ended; its output, state, exit code and timings
    (``since_open_ms``: from the page's opening, recorded by a workbook exercise's check only)."""
    widget.evaluate("box => { delete box.dataset.inpageRunMs; }")
    widget.locator(button).click()
    widget.page.wait_for_function(
        "box => ['done', 'failed', 'stopped'].includes(box.dataset.inpageState) && box.dataset.inpageRunMs",
        arg=widget.element_handle(), timeout=timeout_ms,
    )
    number = lambda name: int(widget.get_attribute(name) or -1)  # noqa: E731 - four reads of one kind
    return {
        "state": widget.get_attribute("data-inpage-state"),
        "output": widget.locator(".inpage-run__output").text_content() or "",
        "first_ms": number("data-inpage-first-ms"),
        "run_ms": number("data-inpage-run-ms"),
        "since_open_ms": number("data-inpage-since-open-ms"),
        "code": widget.get_attribute("data-inpage-code"),
    }


def run_widget(widget: Locator, timeout_ms: int = RUN_TIMEOUT_MS) -> dict[str, Any]:
    """Click a widget's Run button and wait for the run to end; return its output, state and timings."""
    return _click_and_wait(widget, ".inpage-run__run", timeout_ms)


def check_exercise_widget(widget: Locator, timeout_ms: int = RUN_TIMEOUT_MS) -> dict[str, Any]:
    """Click a workbook exercise's Check button and wait for the check to end; return its output, exit code
    and timings."""
    return _click_and_wait(widget, ".inpage-exercise__check", timeout_ms)


def open_page(context: BrowserContext, url: str) -> Page:
    """A new tab on ``url``, loaded."""
    page = context.new_page()
    page.goto(url, wait_until="load")
    return page


def shipped_bytes(site: Path) -> int:
    """Bytes the in-page runs add to a built site (:data:`SHIPPED`)."""
    total = 0
    for name in SHIPPED:
        path = site / name
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total


def _chromium_version() -> str:
    proc = subprocess.run([str(CHROMIUM), "--version"], capture_output=True, text=True, timeout=60)
    return proc.stdout.strip()


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit("inpage_measure: not a git checkout; name the commit this tree is (--commit REV)")
    return proc.stdout.strip()


def measure(site: Path, base_url: str, context: BrowserContext) -> dict[str, Any]:
    """Two runs of the quick start's command in a fresh tab: the first loads the runtime, the second not."""
    page = open_page(context, base_url + QUICKSTART)
    widget = page.locator("div.inpage-run").first
    command = widget.evaluate("box => ['python -m', box.dataset.inpageCommand || 'mini_deepinfer',"
                              " box.dataset.inpageValue || ''].join(' ').trim()")
    first = run_widget(widget)
    repeat = run_widget(widget)
    page.close()
    assert first["state"] == repeat["state"] == "done", (first, repeat)
    page = open_page(context, base_url + EXERCISE_PAGE)  # a new tab: Check loads the runtime, as a reader's
    checked = check_exercise_widget(page.locator("div.inpage-exercise").first)
    page.close()
    assert checked["state"] == "done", checked
    return {
        "site_bytes_added": shipped_bytes(site),
        "command": command,
        "first_run": {"click_to_first_line_ms": first["first_ms"], "click_to_end_ms": first["run_ms"]},
        "repeat_run": {"click_to_first_line_ms": repeat["first_ms"], "click_to_end_ms": repeat["run_ms"]},
        "exercise": {"page": EXERCISE_PAGE, "open_to_result_ms": checked["since_open_ms"],
                     "click_to_result_ms": checked["run_ms"], "exit_code": int(checked["code"])},
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    from site_scripts.build.fetch_pyodide import read_pin
    from training.record import cpu_model

    parser = argparse.ArgumentParser(prog="python -m site_scripts.inpage.inpage_measure",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--commit", help="the commit this tree was made from, when it is not a git checkout "
                                         "(for example a `git archive` of it)")
    args = parser.parse_args(argv)
    commit = args.commit or _commit()

    with tempfile.TemporaryDirectory(prefix="inpage-measure-") as scratch:
        site = Path(scratch) / "site"
        built = build_site(site)
        if built.returncode != 0:
            sys.stderr.write(f"inpage_measure: the build failed:\n{built.stderr[-3000:]}\n")
            return 1
        watch = Watch()
        with serve(site) as base_url, browser(Path(scratch) / "profile", watch) as context:
            record = measure(site, base_url, context)
        if watch.external:
            sys.stderr.write(f"inpage_measure: requests to other hosts: {watch.external}\n")
            return 1
    record["machine"] = {"cpus": os.cpu_count(), "cpu": cpu_model(), "system": platform.system(),
                         "browser": _chromium_version(),
                         "server": "python http.server on 127.0.0.1"}
    record["runtime"] = f"pyodide {read_pin()['version']}"
    record["commit"] = commit
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
