"""The glossary (``docs/reference/glossary.md`` and its English twin) and the words of the site.

Scope: each term is spelled one way on every page in both languages (a list of wrong spellings per term,
looked for in the prose of every page, notebook and picture label); every link to the glossary lands on one of
its entries; every entry says where on the site it matters; every flag that chooses how rounds run has a row
in the production page's options table and the glossary's table of peers. Non-scope: whether a page links the
first use of each term (a reviewer's job), and the build (``tests/test_site_build.py``). This file only reads
text: it is fast.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GLOSSARY = {"zh": DOCS / "reference" / "glossary.md", "en": DOCS / "reference" / "glossary.en.md"}
LABELS = ROOT / "site_scripts" / "pictures" / "picture_labels.py"


def english_word(word: str) -> str:
    """An English word on its own in Chinese prose (not part of a longer name such as ``--draft-model``)."""
    return rf"(?<![A-Za-z0-9_./\-]){word}(?![A-Za-z0-9_\-])"


# Glossary anchor -> per language, (wrong spelling, right spelling). The right ones are the entries' headings.
TERMS: dict[str, dict[str, list[tuple[str, str]]]] = {
    "recurrent-state": {
        "zh": [("递归状态", "递推状态")],
        "en": [(r"\brecursive states?\b", "recurrent state")],
    },
    "conv-window": {"zh": [], "en": [(r"\bconv windows?\b", "convolution window")]},
    "delta-rule": {"zh": [(english_word("delta rule"), "delta 规则")], "en": []},
    "draft-model": {
        "zh": [
            ("draft 模型", "草稿模型"),
            ("草稿 token", "候选"),
            (english_word("draft"), "草稿模型、草稿或候选"),
        ],
        "en": [],
    },
    "draft-cache": {"zh": [("draft 缓存", "草稿缓存")], "en": []},
    "target-model": {"zh": [(english_word("target"), "目标模型")], "en": []},
    "correction-token": {"zh": [("纠正", "更正")], "en": []},
    "commit-group": {
        "zh": [("接受组", "提交组")],
        "en": [(r"\bcommitted groups?\b", "commit group"), (r"\baccepted groups?\b", "commit group")],
    },
    "admission": {"zh": [("接纳", "准入")], "en": []},
    "chunked-prefill": {
        "zh": [("一段 prompt", "一块 prompt"), ("prompt 的一段", "prompt 的一块")],
        "en": [(r"\bprompt pieces?\b", "prompt chunk"), (r"\bpieces? of (the |a )?prompt\b", "prompt chunk")],
    },
    "kv-slot": {"zh": [(english_word("KV slots?"), "KV 槽位")], "en": []},
    "state-slot": {"zh": [(english_word("state slots?"), "状态槽位")], "en": []},
    "slot-mapping": {"zh": [(english_word("slot mapping"), "槽位映射")], "en": []},
    "speculative-decoding": {"zh": [(english_word("speculative decoding"), "投机解码")], "en": []},
    "zos": {
        "zh": [("异步调度", "零开销调度"), (english_word("zero-overhead scheduling"), "零开销调度")],
        "en": [(r"\basynchronous scheduling\b", "zero-overhead scheduling")],
    },
    "pinned-memory": {
        "zh": [(english_word("pinned"), "锁页内存")],
        "en": [(r"\bpage-locked memory\b", "pinned memory")],
    },
    "k-total-budget": {
        "zh": [("K 长度总和", "K 总长预算")],
        "en": [(r"\bsum-of-K\b", "K total-length budget"), (r"\bsum of K\b", "K total-length budget")],
    },
    "parity": {"zh": [("对齐测试", "parity 测试")], "en": []},
    "dummy-slot": {"zh": [("假槽位", "占位槽位")], "en": []},
    "eager": {"zh": [("直接执行", "eager 执行")], "en": []},
}

# Words the glossary does not explain, which must still be spelled one way: per language, (wrong, right).
WORDS: dict[str, list[tuple[str, str]]] = {
    "zh": [
        (english_word("forwards?"), "前向"),
        (english_word("checkpoints?"), "检查点"),
        (english_word("metadata"), "元数据"),
        ("发射", "发出"),
        ("贪心", "greedy"),
        ("分词器", "tokenizer"),
        ("反 tokenize", "流式解码"),
    ],
    "en": [(r"\b(de)?tokeniz(e|es|ed|ing|ation)\b", "-ise, like the rest of the English pages: tokenising")],
}

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.S | re.M,
)
PROSE_DROPS = [
    re.compile(r"`[^`\n]*`"),  # inline code: commands, identifiers, trace lines
    re.compile(r"<code>.*?</code>", re.S),
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"^[ \t]*-+8<-+.*$", re.M),  # snippet includes
    re.compile(r"^:::.*$", re.M),  # mkdocstrings directives
    re.compile(r"(?<=\])\([^)\s]*\)"),  # link and image targets (the link text stays)
    re.compile(r"(?<=\])\[[^\]\n]*\]"),  # reference-style targets
    re.compile(r"\{[^}\n]*#[^}\n]*\}"),  # heading ids
]
# "草稿（draft）模型": an English gloss in full-width brackets names a term, it does not use it
GLOSS = re.compile(r"（[\x20-\x7e]+）")
GLOSSARY_LINK = re.compile(r"\]\((?P<target>[^)\s#]*glossary\.md)(?:#(?P<anchor>[^)\s]*))?\)")
HEADING_ID = re.compile(r"^(?P<hashes>#{1,6})[ \t]+.*?\{#(?P<id>[\w-]+)\}[ \t]*$", re.M)


def prose(text: str, lang: str) -> str:
    """The words a reader reads: code blocks (not mermaid labels), inline code, link targets and ids blanked.

    Blanked text becomes spaces, so line numbers stay where they were.
    """
    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    def fence(match: re.Match) -> str:
        return match.group(0) if match["info"].strip().startswith("mermaid") else blank(match)

    text = FENCE.sub(fence, text)
    for pattern in PROSE_DROPS + ([GLOSS] if lang == "zh" else []):
        text = pattern.sub(blank, text)
    return text


def notebook_markdown(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def lang_of(path: Path) -> str:
    return "en" if ".en." in path.name else "zh"


def pages() -> list[Path]:
    return sorted([*DOCS.rglob("*.md"), *DOCS.rglob("*.ipynb")])


def page_text(path: Path) -> str:
    return notebook_markdown(path) if path.suffix == ".ipynb" else path.read_text(encoding="utf-8")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def label_texts() -> dict[str, str]:
    """Every word of the pictures (``site_scripts/pictures/picture_labels.py``), one value per line, per
    language."""
    tree = ast.parse(LABELS.read_text(encoding="utf-8"))
    words: dict[str, list[str]] = {"zh": [], "en": []}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            for lang, values in ast.literal_eval(node.value).items():
                words[lang].extend(values.values())
    return {lang: "\n".join(values) for lang, values in words.items()}


def wrong_spellings(text: str, lang: str) -> list[str]:
    """``line N: 'found' -> right`` for every wrong spelling in ``text``, written in language ``lang``."""
    variants = [(w, r, f" (glossary #{term})") for term, by_lang in TERMS.items() for w, r in by_lang[lang]]
    variants += [(w, r, "") for w, r in WORDS[lang]]
    found = []
    for wrong, right, entry in variants:
        for match in re.finditer(wrong.replace(" ", r"\s+"), text):  # a line break may split a phrase
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"line {line}: {match.group(0)!r} -> {right}{entry}")
    return found


def entries(lang: str) -> dict[str, str]:
    """Entry id -> its text: the ``###`` sections of the glossary page in ``lang``."""
    text = GLOSSARY[lang].read_text(encoding="utf-8")
    found = {}
    for part in re.split(r"^(?=#{2,3} )", text, flags=re.M):
        heading = HEADING_ID.match(part)
        if heading and len(heading["hashes"]) == 3:
            found[heading["id"]] = part
    return found


@pytest.mark.parametrize("page", pages(), ids=rel)
def test_no_page_spells_a_glossary_term_or_site_word_another_way(page: Path) -> None:
    lang = lang_of(page)
    wrong = wrong_spellings(prose(page_text(page), lang), lang)
    assert not wrong, f"{rel(page)}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_no_picture_label_spells_a_glossary_term_or_site_word_another_way(lang: str) -> None:
    wrong = wrong_spellings(label_texts()[lang], lang)
    assert not wrong, f"{rel(LABELS)} ({lang} labels, one per line):\n" + "\n".join(wrong)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_every_term_with_wrong_spellings_is_a_glossary_entry(lang: str) -> None:
    assert not set(TERMS) - set(entries(lang))


@pytest.mark.parametrize("page", pages(), ids=rel)
def test_every_link_to_the_glossary_lands_on_an_entry(page: Path) -> None:
    ids = set(entries(lang_of(page)))
    bad = []
    for link in GLOSSARY_LINK.finditer(page_text(page)):
        if (page.parent / link["target"]).resolve() != GLOSSARY["zh"].resolve():
            bad.append(f"{link.group(0)}: not docs/reference/glossary.md")
        elif link["anchor"] is not None and link["anchor"] not in ids:
            bad.append(f"{link.group(0)}: the glossary has no entry #{link['anchor']}")
    assert not bad, f"{rel(page)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_every_glossary_entry_says_where_on_the_site_it_matters(lang: str) -> None:
    silent = [i for i, text in entries(lang).items() if not re.search(r"\]\((?!#)[^)\s]+\)", text)]
    assert not silent, f"entries of {rel(GLOSSARY[lang])} that link to no page: {silent}"


def test_both_glossaries_explain_the_same_terms_in_the_same_order() -> None:
    assert list(entries("en")) == list(entries("zh"))


def test_the_helpers_see_the_words_and_skip_code_link_targets_and_glosses() -> None:
    page = (
        "草稿（draft）模型 reads `draft holds nothing`.\n"
        "```text\ndraft 缓存\n```\n"
        "```mermaid\nflowchart LR\n  a[\"draft 缓存\"]\n```\n"
        "[草稿缓存](../reference/glossary.md#draft-cache) {#draft}\n"
        "<!-- 递归状态 -->\n--8<-- \"snippets/draft.txt\"\n"
    )
    text = prose(page, "zh")
    assert text.count("\n") == page.count("\n")
    assert "草稿模型" not in text and "[草稿缓存]" in text
    assert wrong_spellings(text, "zh") == [
        "line 7: 'draft' -> 草稿模型、草稿或候选 (glossary #draft-model)",
        "line 7: 'draft 缓存' -> 草稿缓存 (glossary #draft-cache)",
    ]
    assert wrong_spellings("a conv window, tokenized", "en") == [
        "line 1: 'conv window' -> convolution window (glossary #conv-window)",
        "line 1: 'tokenized' -> -ise, like the rest of the English pages: tokenising",
    ]


def execution_flags() -> list[str]:
    """The flags that choose how rounds run (``--graphs``, ``--eager``, ``--compile``), as defined."""
    import argparse

    from mini_deepinfer.tools.cli import add_execution_options

    parser = argparse.ArgumentParser()
    add_execution_options(parser)
    return [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")
            and flag != "--help"]


def table_rows(page: Path, section: str) -> list[str]:
    """The table rows of the page's section whose id is ``section`` (up to the next heading)."""
    text = page.read_text(encoding="utf-8")
    body = text.split(f"{{#{section}}}", 1)[1].split("\n#", 1)[0]
    return [line for line in body.splitlines() if line.startswith("| ")]


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_every_execution_flag_has_a_row_beside_its_peers(lang: str) -> None:
    production = DOCS / "guide" / ("production.md" if lang == "zh" else "production.en.md")
    first_cells = [row.split(" | ")[0] for row in table_rows(production, "options")]
    glossary = "\n".join(table_rows(GLOSSARY[lang], "vllm-sglang"))
    for flag in execution_flags():
        assert any(f"`{flag}`" in cell for cell in first_cells), f"{production.name}: no row for {flag}"
    assert "`--compile`" in glossary and "`--enable-torch-compile`" in glossary
