"""What several test modules read, made once per test session: the rendered snippets and the built site.

Scope: a copy of the working tree as a one-commit git repository (tracked files and untracked ones that git
does not ignore: what a clean clone of a commit of this tree would hold), one run of every snippet generator
in such copies (:func:`regenerate_once`, in the parts of :data:`REGENERATION_PARTS`, so that two test
workers can share the work), and one build of the site the way the publishing workflow builds it
(:func:`build_hosted`). ``tests/conftest.py`` turns each into a session fixture, and sends every test that
uses one of them to the same pytest-xdist worker, so neither is made twice. Non-scope: what the tests then
check (``test_snippets_current.py``, ``test_regenerate_clean.py``, ``test_site_build.py``,
``test_browser.py``, ``test_inpage_run.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

ROOT = Path(__file__).resolve().parent.parent
REGENERATE_TIMEOUT_S = 3600
BUILD_TIMEOUT_S = 900
SITE_VERSION = "dev"  # the copy the workflow publishes from main

# what `mike deploy` builds: its MkDocs plugin appends the version to site_url (see mike.mkdocs_plugin)
BUILD_AS_MIKE = """
import sys
from mkdocs.commands.build import build
from mkdocs.config import load_config

config = load_config("mkdocs.yml", site_dir=sys.argv[1], site_url=sys.argv[2])
config.plugins.on_startup(command="build", dirty=False)
try:
    build(config)
finally:
    config.plugins.on_shutdown()
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def working_tree_files() -> list[str]:
    """The files a commit of the working tree would hold: tracked and untracked, minus what git ignores."""
    proc = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return [name for name in proc.stdout.split("\0") if name and (ROOT / name).is_file()]


def repository_of_working_tree(repo: Path) -> Path:
    """Copy the working tree's files to ``repo`` and commit them there as one commit on ``main``."""
    for name in working_tree_files():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "config", "user.name", "scratch")
    git(repo, "config", "user.email", "scratch@example.invalid")
    git(repo, "config", "commit.gpgsign", "false")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--message", "working tree")
    return repo


REGENERATION_PARTS: dict[str, tuple[str, ...] | None] = {
    "reliability": ("reliability",),  # some 45 commands, each a fresh Python: the longest generator
    "generate": ("generate", "abc", "kernels"),
    "rest": None,  # every generator that no other part names, so that a new one is never left out
}
"""The generators run once per test session, split into parts of about equal time (on two CPU cores about
80, 70 and 95 s); each part is one unit of work for a test worker (``tests/conftest.py``)."""


def regeneration_part(part: str) -> list[str]:
    """The generator names (``toy``, not ``gen_toy``) of ``part`` of :data:`REGENERATION_PARTS`."""
    from site_scripts.build.regenerate import generator_names

    every = [name.removeprefix("gen_") for name in generator_names()]
    named = [name for names in REGENERATION_PARTS.values() if names for name in names]
    chosen = REGENERATION_PARTS[part]
    return list(chosen) if chosen is not None else [name for name in every if name not in named]


@dataclass(frozen=True)
class Regeneration:
    """One ``regenerate --check --save`` run of some generators over a copy of the working tree.

    Attributes:
        part: which of :data:`REGENERATION_PARTS` ran.
        generators: their names, as ``--only`` takes them (``toy,abc``).
        repo: the copy (a git repository, one commit, nothing else in it).
        texts: the file ``--save`` wrote: every rendered snippet, path -> text.
        returncode: the check's exit code (0: every snippet current, every claim holding).
        report: what the check printed (stale files with their diffs; what was not compared, and why).
    """

    part: str
    generators: str
    repo: Path
    texts: Path
    returncode: int
    report: str


def regenerate_once(folder: Path, part: str) -> Regeneration:
    """Run the generators of ``part`` once, in a copy of the working tree made under ``folder``."""
    repo = repository_of_working_tree(folder / "tree")
    texts = folder / "texts.json"
    generators = ",".join(regeneration_part(part))
    proc = subprocess.run(
        [sys.executable, "-m", "site_scripts.build.regenerate", "--check", "--only", generators,
         "--save", str(texts)],
        cwd=repo, capture_output=True, text=True, timeout=REGENERATE_TIMEOUT_S,
    )
    return Regeneration(part, generators, repo, texts, proc.returncode, proc.stdout + proc.stderr[-3000:])


@dataclass(frozen=True)
class Hosted:
    """The published tree on disk and where the site lives in it."""

    root: Path  # what the server serves at "/"
    site_dir: Path  # the built site: root / <site_url path> / SITE_VERSION
    site_url: str  # the URL the site was built for (sitemap, canonical links)


def configured_site_url() -> str:
    found = re.search(r"^site_url:\s*(\S+)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    assert found, "mkdocs.yml sets no site_url"
    return found[1]


def build_hosted(root: Path) -> Hosted:
    """Build the site strictly, as ``mike deploy dev`` would, under ``root`` with a ``versions.json``.

    ``mkdocs.yml`` sets ``strict: true``, so a warning, a missing snippet, a broken link or anchor fails it.
    """
    base = configured_site_url()
    prefix = root / urlsplit(base).path.strip("/")
    site_dir = prefix / SITE_VERSION
    site_url = urljoin(base, SITE_VERSION)
    proc = subprocess.run(
        [sys.executable, "-c", BUILD_AS_MIKE, str(site_dir), site_url],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, f"the strict build failed:\n{proc.stderr[-6000:]}"
    versions = [{"version": SITE_VERSION, "title": SITE_VERSION, "aliases": []}]
    (prefix / "versions.json").write_text(json.dumps(versions), encoding="utf-8")
    return Hosted(root, site_dir, site_url.rstrip("/") + "/")
