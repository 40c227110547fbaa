"""MkDocs hooks: the glue between mkdocs-static-i18n, mkdocs-jupyter and mkdocstrings, and the site's version.

Scope (mkdocs.yml lists this file under ``hooks:``):

1. Notebooks. mkdocs-static-i18n rebuilds every file as a plain MkDocs ``File``, which drops mkdocs-jupyter's
   notebook wrapper; a plain file is a page only if ``mkdocs.utils.is_markdown_file()`` says so. Without the
   patch below every notebook would be published as raw JSON, and ``mkdocs build --strict`` would still pass.
2. API labels. mkdocstrings reads ``theme.language`` in its ``on_config`` (priority 0), before
   mkdocs-static-i18n switches the language (priority -100), so the English pages would get Chinese labels
   ("参数", "源代码位于"). The hook re-syncs the locale after the switch.
3. The version the site documents. It is read from ``pyproject.toml`` beside ``mkdocs.yml`` (the one place it
   is written), stored as ``extra.docs_version``, shown in every page's footer, and stated in one line under
   the title of each numbered lesson and of the run guide. The version *selector* in the header is Material's
   own: ``extra.version.provider: mike`` makes it read the ``versions.json`` that ``mike deploy`` writes.

4. Line numbers of embedded code. A fence whose body is ``--8<-- "file.py:section"`` includes gets
   ``linenums="N"``, N being the line of ``file.py`` right after the section's start marker (a fence of
   several sections is split into one per section), so the numbers on the page are the file's own and a
   ``file:line`` in the text can be found on the page.

Non-scope: any other change to page content.

Patches 1 and 2 reach into internals of mkdocs 1.6 and mkdocstrings 1.0; pyproject.toml pins those versions.
mkdocs-static-i18n builds each language by running the whole build again on the same config, so every hook
here must give the same result when it runs twice.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import mkdocs.utils
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.pages import Page

if ".ipynb" not in mkdocs.utils.markdown_extensions:
    mkdocs.utils.markdown_extensions = (*mkdocs.utils.markdown_extensions, ".ipynb")

PROJECT = "mini-DeepInfer"
VERSIONED_PAGE = re.compile(r"^(lessons/\d{2}-[^/]+|guide/run-guide)(\.en)?\.md$")
"""Pages that state the version they describe: the numbered lessons and the run guide (both languages)."""
VERSION_NOTE = {
    ("zh", False): "本页对应 {project} {version}。",
    ("zh", True): "本页对应 {project} {version}（main 分支上的开发版，尚未发布）。",
    ("en", False): "This page describes {project} {version}.",
    ("en", True): "This page describes {project} {version} (the development version on main, unreleased).",
}


def project_version(pyproject: Path) -> str:
    """``[project] version`` of a pyproject.toml.

    Raises:
        PluginError: the file is missing or has no version (the build stops with this one-line message).
    """
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError as exc:
        raise PluginError(f"cannot read the version: {pyproject}: {exc.strerror}") from None
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: read the one key by pattern
        section = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
        found = section and re.search(r"^version\s*=\s*[\"']([^\"']+)[\"']", section[1], re.MULTILINE)
        version = found[1] if found else None
    else:
        version = tomllib.loads(text).get("project", {}).get("version")
    if not isinstance(version, str):
        raise PluginError(f"cannot read the version: {pyproject} has no [project] version")
    return version


def is_development(version: str) -> bool:
    """True for a version between releases, such as ``0.2.0.dev0`` (PEP 440 development release)."""
    return ".dev" in version


def footer_text(version: str, existing: str | None) -> str:
    """The footer line: the documented version first, then any ``copyright`` text mkdocs.yml sets."""
    label = f"{PROJECT} {version}"
    if not existing:
        return label
    return existing if existing.startswith(label) else f"{label} · {existing}"


@event_priority(-110)  # after mkdocs-static-i18n's on_config (-100)
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Give mkdocstrings the locale of the language being built; record the version the site documents."""
    plugin: Any = config.plugins.get("mkdocstrings")
    handlers = getattr(plugin, "_handlers", None)
    language = config.theme.get("language")
    if handlers is not None and language:
        handlers._locale = str(language).replace("_", "-")
    version = project_version(Path(config.config_file_path).parent / "pyproject.toml")
    config.extra["docs_version"] = version
    config.copyright = footer_text(version, config.copyright)
    return config


def version_note(version: str, language: str) -> str:
    """The one line under a versioned page's title, in the language being built (zh unless it is en)."""
    lang = "en" if language.startswith("en") else "zh"
    text = VERSION_NOTE[(lang, is_development(version))].format(project=PROJECT, version=version)
    return f'<small class="docs-version">{text}</small>'


def with_version_note(markdown: str, note: str) -> str:
    """``markdown`` with ``note`` as a paragraph right after its first line if that is the ``# title``."""
    head, newline, rest = markdown.lstrip("\n").partition("\n")
    if not head.startswith("# "):
        return f"{note}\n\n{markdown}"
    return f"{head}{newline}\n{note}\n\n{rest.lstrip(chr(10))}"


SECTION_FENCE = re.compile(
    r'^(?P<indent>[ \t]*)(?P<ticks>```+)(?P<open>[ \t]*[\w+-]+)(?P<attrs>[^\n]*)\n'
    r'(?P<body>(?:[ \t]*(?:-{1,}8<-{1,}[ \t]+"[^"\n]+"[ \t]*)?\n)+?)'
    r'(?P=indent)(?P=ticks)[ \t]*$',
    re.MULTILINE,
)
"""A fenced block whose body is only ``--8<--`` includes (and blank lines)."""
SECTION_INCLUDE = re.compile(r'-{1,}8<-{1,}[ \t]+"(?P<path>[^":]+\.py):(?P<section>[\w-]+)"')
SECTION_MARKER = re.compile(r"--8<-- \[(?P<kind>start|end):(?P<name>[\w-]+)\]")


def section_first_line(source: Path, section: str) -> int | None:
    """The 1-based line of ``source`` that an include of ``source:section`` shows first.

    None if the file or the section is missing: pymdownx.snippets (``check_paths``) then stops the build.

    Raises:
        PluginError: the section holds other section markers (pymdownx.snippets drops those lines, so the
            numbers after them would not be the file's).
    """
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    markers = [(i, m) for i, line in enumerate(lines) if (m := SECTION_MARKER.search(line))]
    starts = [i for i, m in markers if m["kind"] == "start" and m["name"] == section]
    ends = [i for i, m in markers if m["kind"] == "end" and m["name"] == section]
    if not starts or not ends or ends[0] < starts[0]:
        return None
    if any(starts[0] < i < ends[0] for i, _ in markers):
        raise PluginError(f"line numbers: section {section!r} of {source} holds other section markers")
    return starts[0] + 2


def with_source_line_numbers(markdown: str, root: Path) -> str:
    """Give each fence that embeds sections of Python files the files' own line numbers.

    A fence of several sections becomes one fence per section (same language and title): one block can only
    count up from one first line. Fences holding anything else, or already numbered, stay as they are.
    """

    def number(match: re.Match[str]) -> str:
        includes = [line.strip() for line in match["body"].splitlines() if line.strip()]
        sections = [SECTION_INCLUDE.fullmatch(line) for line in includes]
        if "linenums" in match["attrs"] or not sections or not all(sections):
            return match[0]
        firsts = [section_first_line(root / m["path"], m["section"]) for m in sections if m]
        if None in firsts:
            return match[0]
        fences = [
            f'{match["indent"]}{match["ticks"]}{match["open"]}{match["attrs"]} linenums="{first}"\n'
            f'{match["indent"]}{line}\n{match["indent"]}{match["ticks"]}'
            for line, first in zip(includes, firsts)
        ]
        return "\n\n".join(fences)

    return SECTION_FENCE.sub(number, markdown)


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, **kwargs: Any) -> str:
    """Number embedded code by its source lines; state the version under a lesson's or run guide's title."""
    markdown = with_source_line_numbers(markdown, Path(config.config_file_path).parent)
    if not VERSIONED_PAGE.match(page.file.src_uri):
        return markdown
    note = version_note(config.extra["docs_version"], str(config.theme.get("language") or "zh"))
    return with_version_note(markdown, note)
