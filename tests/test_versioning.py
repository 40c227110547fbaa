"""One version, written once: pyproject.toml, the package, the command line, the site, the changelog, mike.

Scope: the version in ``pyproject.toml`` is the one ``package_version()``, ``generate --version``, run records
and the site show; ``CHANGELOG.md`` has a section for it (or **Unreleased** on a development version) and
invents no release; the site states its version (footer, lessons, run guide) and carries Material's mike
version selector; the publishing workflow deploys ``dev`` and the release tags; and ``mike deploy`` of two
versions into a scratch branch gives both copies and the ``versions.json`` the selector reads.
Non-scope: publishing itself (it needs GitHub), and the wheel (``test_packaging.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from session_builds import git, repository_of_working_tree

from mini_deepinfer.tools.records import RunRecord, package_version
from site_scripts.build import mkdocs_hooks

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = ROOT / "CHANGELOG.md"
WORKFLOW = ROOT / ".github" / "workflows" / "docs.yml"
SECTION = re.compile(r"^## \[(?P<name>[^\]]+)\](?P<rest>.*)$", re.M)
RELEASE_HEADING_REST = re.compile(r"^ - \d{4}-\d{2}-\d{2}$")
CHANGE_TYPES = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def project_table() -> str:
    """The ``[project]`` table of pyproject.toml, as text (read by pattern: tomllib is Python 3.11+)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)[1]


def pyproject_version() -> str:
    return re.search(r'^version\s*=\s*"([^"]+)"', project_table(), re.M)[1]


def release_tuple(version: str) -> tuple[int, ...]:
    """``"0.2.0.dev0"`` -> ``(0, 2, 0)``: the release a version is, or leads to."""
    return tuple(int(part) for part in re.match(r"\d+(?:\.\d+)*", version)[0].split("."))


def changelog_sections() -> dict[str, str]:
    """Section name (``Unreleased`` or a version) -> its heading line's tail and body, in file order."""
    text = CHANGELOG.read_text(encoding="utf-8")
    matches = list(SECTION.finditer(text))
    ends = [m.start() for m in matches[1:]] + [len(text)]
    return {m["name"]: m["rest"] + "\n" + text[m.end():end] for m, end in zip(matches, ends)}


class _AnyTagLoader(yaml.SafeLoader):
    """Reads mkdocs.yml without running its ``!relative`` and ``!!python`` tags (they become None)."""


_AnyTagLoader.add_multi_constructor("", lambda loader, suffix, node: None)


# -- one version -------------------------------------------------------------------------------------------


def test_the_version_is_written_only_in_pyproject() -> None:
    assert not re.search(r"^dynamic\s*=", project_table(), re.M), "the version must be static"
    literal = re.compile(r"^\s*(__version__|VERSION)\s*[:=]", re.M)
    written = [p.relative_to(ROOT).as_posix() for p in (ROOT / "mini_deepinfer").rglob("*.py")
               if literal.search(p.read_text(encoding="utf-8"))]
    assert not written, f"a second version is written in {written}; read records.package_version() instead"


def test_package_version_is_the_pyproject_version() -> None:
    assert package_version() == pyproject_version(), (
        "the installed metadata is stale: reinstall (`make` does it, or `pip install -e .`) or delete "
        "a leftover mini_deepinfer.egg-info in the repository root"
    )


def test_generate_version_prints_the_pyproject_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "mini_deepinfer.generate", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"mini-deepinfer {pyproject_version()}\n"


def test_every_run_record_carries_the_pyproject_version() -> None:
    record = RunRecord.start(["python", "-m", "mini_deepinfer.generate"])
    assert record.version == pyproject_version()


# -- the site ----------------------------------------------------------------------------------------------


def fake_config(existing: str | None = None, language: str = "zh") -> SimpleNamespace:
    """The parts of an MkDocs config the hooks read and write (``existing``: mkdocs.yml's ``copyright``)."""
    return SimpleNamespace(plugins={}, theme={"language": language}, extra={}, copyright=existing,
                           config_file_path=str(ROOT / "mkdocs.yml"))


def test_the_site_documents_the_pyproject_version() -> None:
    config = mkdocs_hooks.on_config(fake_config())
    assert config.extra["docs_version"] == pyproject_version()
    assert config.copyright == f"mini-DeepInfer {pyproject_version()}"


def test_the_footer_keeps_a_copyright_text_and_survives_a_second_language_build() -> None:
    config = mkdocs_hooks.on_config(fake_config(existing="Apache-2.0"))
    once = config.copyright
    assert once == f"mini-DeepInfer {pyproject_version()} · Apache-2.0"
    assert mkdocs_hooks.on_config(config).copyright == once


def test_mkdocs_yml_asks_material_for_the_mike_version_selector() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_AnyTagLoader)
    assert config["extra"]["version"]["provider"] == "mike"
    assert "docs_version" not in config["extra"], "the version is read from pyproject.toml, not written twice"


@pytest.mark.parametrize(("version", "language", "expected"), [
    ("0.1.0", "zh", "本页对应 mini-DeepInfer 0.1.0。"),
    ("0.1.0", "en", "This page describes mini-DeepInfer 0.1.0."),
    ("0.2.0.dev0", "zh", "本页对应 mini-DeepInfer 0.2.0.dev0（main 分支上的开发版，尚未发布）。"),
    ("0.2.0.dev0", "en", "This page describes mini-DeepInfer 0.2.0.dev0 (the development version on main, "
                         "unreleased)."),
])
def test_the_version_note_names_the_version_and_says_when_it_is_unreleased(
    version: str, language: str, expected: str
) -> None:
    assert mkdocs_hooks.version_note(version, language) == f'<small class="docs-version">{expected}</small>'


@pytest.mark.parametrize("src_uri", [
    "lessons/01-life-of-a-request.md", "lessons/14-probabilistic-acceptance.en.md",
    "guide/run-guide.md", "guide/run-guide.en.md",
])
def test_lessons_and_the_run_guide_state_their_version_under_the_title(src_uri: str) -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))
    config = mkdocs_hooks.on_config(fake_config(language="en" if ".en." in src_uri else "zh"))
    out = mkdocs_hooks.on_page_markdown("# Title {#top}\n\nFirst paragraph.\n", page=page, config=config)
    title, blank, note, blank2, body = out.splitlines()[:5]
    assert (title, blank, blank2, body) == ("# Title {#top}", "", "", "First paragraph.")
    assert pyproject_version() in note and note.startswith('<small class="docs-version">')


@pytest.mark.parametrize("src_uri", [
    "index.md", "lessons/index.md", "guide/text-generation.md", "about/sources.md",
])
def test_other_pages_are_left_as_written(src_uri: str) -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))
    config = mkdocs_hooks.on_config(fake_config())
    assert mkdocs_hooks.on_page_markdown("# T\n\ntext\n", page=page, config=config) == "# T\n\ntext\n"


def test_a_page_without_a_title_gets_the_note_first() -> None:
    assert mkdocs_hooks.with_version_note("text\n", "NOTE") == "NOTE\n\ntext\n"


# -- the changelog -----------------------------------------------------------------------------------------


def test_changelog_has_a_section_for_the_current_version() -> None:
    version, sections = pyproject_version(), changelog_sections()
    assert CHANGELOG.read_text(encoding="utf-8").startswith("# Changelog\n")
    expected_first = "Unreleased" if mkdocs_hooks.is_development(version) else version
    assert list(sections)[0] == expected_first or list(sections)[:2] == ["Unreleased", version], (
        f"CHANGELOG.md must open with the section of {version} (or Unreleased above it)")


def test_changelog_releases_are_dated_newest_first_and_none_is_ahead_of_the_code() -> None:
    version = pyproject_version()
    releases = [(name, body) for name, body in changelog_sections().items() if name != "Unreleased"]
    for name, body in releases:
        assert RELEASE_HEADING_REST.match(body.splitlines()[0]), f"## [{name}] needs ' - YYYY-MM-DD'"
    tuples = [release_tuple(name) for name, _ in releases]
    assert tuples == sorted(tuples, reverse=True)
    limit = release_tuple(version)
    for name, release in zip([n for n, _ in releases], tuples):
        ahead = release > limit or (release == limit and mkdocs_hooks.is_development(version))
        assert not ahead, f"CHANGELOG.md describes release {name}, but the code is {version}"


def test_every_changelog_section_names_lessons_and_mechanisms_under_keep_a_changelog_types() -> None:
    for name, body in changelog_sections().items():
        types = set(re.findall(r"^### (.+)$", body, re.M))
        assert types and types <= CHANGE_TYPES, f"[{name}]: use the types of Keep a Changelog: {CHANGE_TYPES}"
        lowered = body.lower()
        assert "lesson" in lowered and "mechanism" in lowered, f"[{name}]: say which lessons and mechanisms"


# -- publishing --------------------------------------------------------------------------------------------


def test_the_docs_workflow_builds_strictly_and_publishes_dev_and_release_tags() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert triggers["push"]["branches"] == ["main"] and triggers["push"]["tags"] == ["v*"]
    steps = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    script = "\n".join(steps)
    assert "mkdocs build --strict" in script
    assert 'mike deploy --push --title "dev ($VERSION)" dev' in script
    assert 'mike deploy --push --update-aliases --title "$VERSION" "$SERIES" latest' in script
    assert 'pip install ".[docs]"' in script


# -- mike, for real, in a scratch repository ---------------------------------------------------------------


# A third of a build on two CPU cores is Material's search index (7 of 19 s). It is not what this test is
# about, and the hosted build checks it (tests/test_browser.py searches in both languages).
SEARCH_PLUGIN = re.compile(r"\n  - search:\n(?:      .*\n|\s*#.*\n)*")


def without_search(config: Path) -> None:
    """Drop the search plugin's entry (its settings and comments too) from a copy's ``mkdocs.yml``; setting
    its ``enabled: false`` is not enough, as the i18n plugin then asks it for the index it did not make."""
    text, found = SEARCH_PLUGIN.subn("\n", config.read_text(encoding="utf-8"))
    assert found == 1, "mkdocs.yml does not list `- search:` once under plugins"
    config.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def scratch_pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository holding a copy of the working tree (search off); two versions deployed
    to ``scratch-pages``."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    mike = Path(sys.executable).parent / "mike"
    assert mike.exists(), "mike is not installed: pip install -e '.[docs]'"
    repo = repository_of_working_tree(tmp_path_factory.mktemp("scratch") / "repo")
    without_search(repo / "mkdocs.yml")
    git(repo, "commit", "--quiet", "--all", "--message", "no search index")
    # mike runs `mkdocs`: put this interpreter's bin/ first, as an activated virtual environment would
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PATH": path}
    version = pyproject_version()
    series = ".".join(str(part) for part in release_tuple(version)[:2])
    for args in ([series, "latest", "--title", version], ["dev", "--title", f"dev ({version})"]):
        proc = subprocess.run([str(mike), "deploy", "--branch", "scratch-pages", *args], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"mike deploy {args} failed:\n{proc.stderr[-4000:]}"
    return repo


@pytest.mark.slow
def test_mike_deploys_two_versions_and_the_versions_json_the_selector_reads(scratch_pages: Path) -> None:
    version = pyproject_version()
    series = ".".join(str(part) for part in release_tuple(version)[:2])
    listed = json.loads(git(scratch_pages, "show", "scratch-pages:versions.json"))
    assert {entry["version"]: entry["aliases"] for entry in listed} == {series: ["latest"], "dev": []}
    assert {entry["title"] for entry in listed} == {version, f"dev ({version})"}
    files = set(git(scratch_pages, "ls-tree", "-r", "--name-only", "scratch-pages").split())
    for copy in (series, "dev"):
        for page in ("index.html", "en/index.html", "lessons/01-life-of-a-request/index.html"):
            assert f"{copy}/{page}" in files


@pytest.mark.slow
@pytest.mark.parametrize("page", ["index.html", "en/index.html"])
def test_every_deployed_copy_has_the_selector_and_shows_its_version(scratch_pages: Path, page: str) -> None:
    version = pyproject_version()
    for copy in (".".join(str(p) for p in release_tuple(version)[:2]), "dev"):
        html = git(scratch_pages, "show", f"scratch-pages:{copy}/{page}")
        assert '"version": {"provider": "mike"}' in html, f"{copy}/{page} has no version selector"
        assert f"mini-DeepInfer {version}" in html, f"{copy}/{page} does not show {version}"


@pytest.mark.slow
@pytest.mark.parametrize("page", ["lessons/01-life-of-a-request/index.html", "en/guide/run-guide/index.html"])
def test_deployed_lessons_and_run_guide_name_their_version(scratch_pages: Path, page: str) -> None:
    html = git(scratch_pages, "show", f"scratch-pages:dev/{page}")
    note = re.search(r'<small class="docs-version">([^<]*)</small>', html)
    assert note and pyproject_version() in note[1]
