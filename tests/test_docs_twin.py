"""Twin pages: each Chinese page ``docs/x.md`` and its English ``docs/x.en.md`` show the same things.

Scope: what must not differ between the languages: the snippet includes, the code blocks that run or show
output (their bodies, not their titles; an English page may ask a one-prompt command's question in English,
with that run's output), the doc-test markers, the boxes (admonitions, by kind) and the
explicit heading ids; plus the lesson skeleton of the lesson template. Non-scope: the prose (a translation
is free), and whether the blocks run (conftest.py's doc tests do that on the Chinese pages only, which is
sound because of this file).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from site_scripts.lessons.gen_generate import QUESTION, QUESTION_EN

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.S | re.M,
)
COMPARED_LANGS = {"bash", "sh", "python", "pycon", "text"}
INCLUDE = re.compile(r'^[ \t]*-{1,}8<-{1,}[ \t]+"(?P<path>[^"]+)"', re.M)
MARKER = re.compile(r"<!--\s*((?:docs-test|pytest-codeblocks):[^>]*?)\s*-->")
ADMONITION = re.compile(r"^[ \t]*(?:!!!|\?\?\?\+?)[ \t]+(?P<kind>[\w-]+)", re.M)  # a box: `!!! note "Title"`
HEADING = re.compile(r"^(?P<level>#{1,6})[ \t]+.*?\{[^}]*#(?P<id>[\w-]+)[^}]*\}[ \t]*$", re.M)
LESSON_IDS = ["run", "code", "what-to-notice", "deepinfer", "exercise", "build-it", "next"]


def zh_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if not p.name.endswith(".en.md"))


def en_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.en.md"))


def twin_of(page: Path) -> Path:
    if page.name.endswith(".en.md"):
        return page.with_name(page.name[: -len(".en.md")] + ".md")
    return page.with_name(page.name[: -len(".md")] + ".en.md")


def rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block in a compared language, in order, dedented."""
    blocks = []
    for match in FENCE.finditer(text):
        info = match["info"].strip()
        lang = info.split()[0].lstrip(".{") if info else ""
        if lang in COMPARED_LANGS:
            indent = match["indent"]
            body = "".join(line[len(indent):] + "\n" for line in match["body"].splitlines())
            blocks.append((lang, body))
    return blocks


def without_code(text: str) -> str:
    return FENCE.sub("", text)


def heading_ids(text: str, level: int | None = None) -> list[str]:
    return [
        m["id"] for m in HEADING.finditer(without_code(text)) if level is None or len(m["level"]) == level
    ]


def read(page: Path) -> str:
    return page.read_text(encoding="utf-8")


@pytest.mark.parametrize("page", zh_pages(), ids=rel)
def test_every_zh_page_has_an_en_twin(page: Path) -> None:
    assert twin_of(page).exists(), f"{rel(page)} has no English twin {rel(twin_of(page))}"


@pytest.mark.parametrize("page", en_pages(), ids=rel)
def test_every_en_page_has_a_zh_twin(page: Path) -> None:
    assert twin_of(page).exists(), f"{rel(page)} has no Chinese twin {rel(twin_of(page))}"


TWINS = [p for p in zh_pages() if twin_of(p).exists()]


@pytest.mark.parametrize("page", TWINS, ids=rel)
def test_twins_include_the_same_snippets_in_order(page: Path) -> None:
    # a snippet written in each language counts as one, each page taking its own language's: x.zh.md beside
    # x.en.md, or beside x.md (an English snippet that other pages share, with its translation)
    zh, en = read(page), read(twin_of(page))
    assert [p.replace(".en.md", ".md").replace(".en.txt", ".txt") for p in INCLUDE.findall(en)] == [
        p.replace(".zh.md", ".md") for p in INCLUDE.findall(zh)]


def asked_in_chinese(body: str) -> str:
    """An English page's block as its Chinese twin shows it: the English question (``gen_generate``) asked in
    Chinese, and the output it includes (``x.en.txt``) the Chinese run's (``x.txt``)."""
    return body.replace(f'"{QUESTION_EN}"', f'"{QUESTION}"').replace('.en.txt"', '.txt"')


@pytest.mark.parametrize("page", TWINS, ids=rel)
def test_twins_show_the_same_code_blocks_in_order(page: Path) -> None:
    zh, en = read(page), read(twin_of(page))
    assert [(lang, asked_in_chinese(body)) for lang, body in code_blocks(en)] == code_blocks(zh)


@pytest.mark.parametrize("page", ["guide/run-guide.en.md", "guide/text-generation.en.md"])
def test_english_guides_ask_one_prompt_in_english(page: str) -> None:
    # README.en.md asks in English; a command of two prompts, or one behind a committed record, keeps the pair
    one_prompt = [body for lang, body in code_blocks(read(DOCS / page))
                  if lang == "bash" and body.count("--prompt ") == 1 and "snippets/records/" not in body]
    assert one_prompt and not [body for body in one_prompt if QUESTION in body]


@pytest.mark.parametrize("page", TWINS, ids=rel)
def test_twins_carry_the_same_doc_test_markers_in_order(page: Path) -> None:
    zh, en = read(page), read(twin_of(page))
    assert MARKER.findall(en) == MARKER.findall(zh)


@pytest.mark.parametrize("page", TWINS, ids=rel)
def test_twins_have_the_same_heading_ids_in_order(page: Path) -> None:
    zh, en = read(page), read(twin_of(page))
    assert heading_ids(en) == heading_ids(zh)


@pytest.mark.parametrize("page", TWINS, ids=rel)
def test_twins_have_the_same_boxes_in_order(page: Path) -> None:
    zh, en = read(page), read(twin_of(page))
    assert ADMONITION.findall(without_code(en)) == ADMONITION.findall(without_code(zh))


LESSONS = sorted((DOCS / "lessons").glob("[0-9][0-9]-*.md"))


@pytest.mark.parametrize("page", LESSONS, ids=rel)
def test_lesson_sections_are_the_template_sections_in_order(page: Path) -> None:
    assert heading_ids(read(page), level=2) == LESSON_IDS


@pytest.mark.parametrize("page", LESSONS, ids=rel)
def test_every_lesson_section_heading_has_an_explicit_id(page: Path) -> None:
    text = without_code(read(page))
    sections = re.findall(r"^## .*$", text, re.M)
    assert len(sections) == len(heading_ids(text, level=2)), f"a ## heading without {{#id}} in {rel(page)}"


def test_the_helpers_see_what_a_page_shows() -> None:
    page = (
        "# T {#top}\n\n## A {#run}\n\n"
        '<!-- docs-test: slow -->\n```bash title="x"\necho hi\n```\n'
        "<!--pytest-codeblocks:expected-output-->\n```text\n--8<-- \"snippets/a.txt\"\n```\n\n"
        "```python\n# not a heading {#no}\n```\n"
        "```mermaid\nflowchart LR\n```\n"
    )
    assert heading_ids(page) == ["top", "run"]
    assert INCLUDE.findall(page) == ["snippets/a.txt"]
    assert MARKER.findall(page) == ["docs-test: slow", "pytest-codeblocks:expected-output"]
    assert code_blocks(page) == [
        ("bash", "echo hi\n"),
        ("text", '--8<-- "snippets/a.txt"\n'),
        ("python", "# not a heading {#no}\n"),
    ]


def test_the_chinese_home_page_title_names_the_page_as_the_english_one_does() -> None:
    # Material titles the site's root page with the site name alone; the English home (not the root) gets
    # "Home - mini-DeepInfer" from the nav, so the Chinese one names itself in its front matter
    nav_name = re.search(r"^  - (\S+): index\.md$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    front = re.match(r"---\n(.*?)\n---\n", read(DOCS / "index.md"), re.S)
    assert nav_name and front and f"title: {nav_name[1]}" in front[1].splitlines()
