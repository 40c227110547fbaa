"""The DeepInfer source mapping page points at things that exist.

Scope: both languages of ``docs/reference/deepinfer-mapping*.md`` and the machine-readable list of their
references, ``docs/reference/deepinfer-refs.json``. Every reference to our code (an autorefs link such as
``[Engine.step][mini_deepinfer.core.engine.Engine.step]``, a code span ``mini_deepinfer.x.Y`` or a path
``mini_deepinfer/x.py``) must name a module and symbol that exist; every DeepInfer reference must have a
file, a line number and a symbol; each mechanism section of each page must cite exactly the references the
JSON file lists for it; and every cited DeepInfer line must hold its symbol in the unpacked sdist that
``DEEPINFER_SDIST`` names. The sdist is not in this repository and the tests never download it: the set-up of
``make test`` fetches it once (``site_scripts/build/fetch_sdist.py``, its SHA-256 checked against the JSON
file) and sets ``DEEPINFER_SDIST``. Without it the line check is skipped, except where ``CI`` is set: there a
skipped line check fails, since CI must check the lines.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
REFS_FILE = REFERENCE / "deepinfer-refs.json"
PAGES = [REFERENCE / "deepinfer-mapping.md", REFERENCE / "deepinfer-mapping.en.md"]

DEEPINFER_FILE = r"(?:csrc|deepinfer)/[\w./-]+\.(?:py|hpp|cpp|h|cu)"
# `file:line` then, after white space (possibly a line break), the symbol in its own code span
DEEPINFER_REF = re.compile(rf"`(?P<file>{DEEPINFER_FILE}):(?P<line>\d+)`\s+`(?P<symbol>[A-Za-z_][\w.:]*)`")
DEEPINFER_FILE_LINE = re.compile(rf"`{DEEPINFER_FILE}:\d+")
AUTOREF = re.compile(r"\]\[(?P<path>mini_deepinfer(?:\.\w+)+)\]")
CODE_PATH = re.compile(r"`(?P<path>mini_deepinfer(?:\.\w+)+)`")
CODE_FILE = re.compile(r"`(?P<file>mini_deepinfer/[\w/]+\.py)`")
SECTION = re.compile(r"^(?P<level>#{2,3})[ \t]+.*?\{#(?P<id>[\w-]+)\}[ \t]*$", re.M)


def load_refs() -> dict:
    return json.loads(REFS_FILE.read_text(encoding="utf-8"))


def mechanisms() -> list[dict]:
    return load_refs()["mechanisms"]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def resolve(dotted: str) -> object:
    """Import the longest module prefix of ``dotted`` and follow the rest as attributes."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and module_name.startswith(error.name):
                continue  # this prefix is not a module: try a shorter one
            raise
        for attribute in parts[split:]:
            obj = getattr(obj, attribute)  # AttributeError names what is missing
        return obj
    raise ModuleNotFoundError(f"no module in {dotted!r}")


def deepinfer_refs(text: str) -> set[tuple[str, int, str]]:
    return {(m["file"], int(m["line"]), m["symbol"]) for m in DEEPINFER_REF.finditer(text)}


def our_paths(text: str) -> set[str]:
    return {m["path"] for pattern in (AUTOREF, CODE_PATH) for m in pattern.finditer(text)}


def sections(text: str) -> dict[str, str]:
    """Text of every ``###`` section with an explicit id, up to the next ``##`` or ``###`` heading."""
    found: dict[str, str] = {}
    headings = list(SECTION.finditer(text))
    for heading, following in zip(headings, headings[1:] + [None]):
        if heading["level"] == "###":
            end = following.start() if following is not None else len(text)
            found[heading["id"]] = text[heading.end() : end]
    return found


def json_refs(entry: dict) -> set[tuple[str, int, str]]:
    return {(r["file"], r["line"], r["symbol"]) for r in entry["deepinfer"]}


@pytest.fixture(scope="module", params=PAGES, ids=rel)
def page(request: pytest.FixtureRequest) -> tuple[Path, str]:
    return request.param, request.param.read_text(encoding="utf-8")


def test_every_deepinfer_reference_has_a_file_a_line_and_a_symbol() -> None:
    entries = mechanisms()
    assert len({e["id"] for e in entries}) == len(entries), "mechanism ids must be unique"
    for entry in entries:
        assert entry["deepinfer"], f"{entry['id']}: no DeepInfer reference"
        for ref in entry["deepinfer"]:
            assert re.fullmatch(DEEPINFER_FILE, ref["file"]), (entry["id"], ref)
            assert isinstance(ref["line"], int) and ref["line"] > 0, (entry["id"], ref)
            assert re.fullmatch(r"[A-Za-z_][\w.:]*", ref["symbol"]), (entry["id"], ref)


@pytest.mark.parametrize("entry", mechanisms(), ids=lambda e: e["id"])
def test_every_reference_to_our_code_in_the_json_exists(entry: dict) -> None:
    for dotted in entry["ours"]:
        resolve(dotted)


def test_page_references_to_our_code_exist(page: tuple[Path, str]) -> None:
    path, text = page
    for dotted in sorted(our_paths(text)):
        try:
            resolve(dotted)
        except (ImportError, AttributeError) as error:
            pytest.fail(f"{rel(path)}: {dotted} does not exist ({error})")
    for match in CODE_FILE.finditer(text):
        assert (ROOT / match["file"]).is_file(), f"{rel(path)}: {match['file']} does not exist"


def test_linked_functions_and_classes_have_docstrings(page: tuple[Path, str]) -> None:
    """mkdocstrings leaves out members without a docstring, so a link to one would not resolve."""
    path, text = page
    for match in AUTOREF.finditer(text):
        obj = resolve(match["path"])
        if inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismodule(obj):
            assert obj.__doc__ and obj.__doc__.strip(), f"{rel(path)}: {match['path']} has no docstring"


def test_every_deepinfer_citation_names_a_symbol(page: tuple[Path, str]) -> None:
    path, text = page
    cited = len(DEEPINFER_FILE_LINE.findall(text))
    with_symbol = len(DEEPINFER_REF.findall(text))
    assert cited == with_symbol, f"{rel(path)}: {cited - with_symbol} file:line citations lack a symbol"


def test_each_mechanism_section_cites_what_the_json_lists(page: tuple[Path, str]) -> None:
    path, text = page
    found = sections(text)
    entries = {e["id"]: e for e in mechanisms()}
    assert set(found) == set(entries), f"{rel(path)}: sections and JSON entries differ"
    for section_id, body in found.items():
        entry = entries[section_id]
        assert deepinfer_refs(body) == json_refs(entry), f"{rel(path)}#{section_id}: DeepInfer references"
        assert our_paths(body) == set(entry["ours"]), f"{rel(path)}#{section_id}: references to our code"


def test_deepinfer_references_outside_sections_are_listed(page: tuple[Path, str]) -> None:
    path, text = page
    listed = set().union(*(json_refs(e) for e in mechanisms()))
    assert deepinfer_refs(text) <= listed, f"{rel(path)}: a DeepInfer reference missing from the JSON file"


def test_page_states_which_sdist_was_checked_and_when(page: tuple[Path, str]) -> None:
    path, text = page
    sdist = load_refs()["sdist"]
    for fact in (sdist["file"], sdist["sha256"], sdist["checked_on"]):
        assert fact in text, f"{rel(path)} does not state {fact}"


def _expected_on_line(ref: dict) -> str:
    """What the cited line must contain: ``at`` when given, else the symbol's last name."""
    return ref.get("at") or re.split(r"\.|::", ref["symbol"])[-1]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unpacked_sdist() -> Path:
    """The folder ``DEEPINFER_SDIST`` names; without one, skip the test, or fail it where ``CI`` is set."""
    folder = os.environ.get("DEEPINFER_SDIST")
    if not folder:
        if _in_ci():
            pytest.fail("DEEPINFER_SDIST is unset, but CI must check the DeepInfer lines (make test sets it)")
        pytest.skip("set DEEPINFER_SDIST to an unpacked sdist (make test does)")
    root = Path(folder)
    if not root.is_dir():
        pytest.fail(f"DEEPINFER_SDIST={folder} is not a folder")
    return root


@pytest.mark.parametrize("entry", mechanisms(), ids=lambda e: e["id"])
def test_deepinfer_lines_match_the_unpacked_sdist(entry: dict) -> None:
    root = _unpacked_sdist()
    for ref in entry["deepinfer"]:
        lines = (root / ref["file"]).read_text(encoding="utf-8").splitlines()
        assert ref["line"] <= len(lines), ref
        assert _expected_on_line(ref) in lines[ref["line"] - 1], ref


SITE_PAGES = sorted((ROOT / "docs").rglob("*.md"))
CITED_FILE_LINE = re.compile(rf"`(?P<file>{DEEPINFER_FILE}):(?P<line>\d+)(?:-(?P<last>\d+))?")


def test_every_page_cites_deepinfer_files_and_lines_that_exist() -> None:
    """Beyond the mapping page, lessons and notes cite ``file:line`` too: each file must exist in the sdist
    and each line (or range) must lie inside it."""
    root = _unpacked_sdist()
    problems = []
    for path in SITE_PAGES:
        for m in CITED_FILE_LINE.finditer(path.read_text(encoding="utf-8")):
            cited = root / m["file"]
            if not cited.is_file():
                problems.append(f"{rel(path)}: {m['file']} is not in the sdist")
                continue
            length = len(cited.read_text(encoding="utf-8").splitlines())
            if int(m["last"] or m["line"]) > length:
                problems.append(f"{rel(path)}: {m.group(0)[1:]} is past the end ({length} lines)")
    assert not problems, "\n".join(problems)


def test_every_page_names_our_files_that_exist() -> None:
    problems = [
        f"{rel(path)}: {m['file']}"
        for path in SITE_PAGES
        for m in CODE_FILE.finditer(path.read_text(encoding="utf-8"))
        if not (ROOT / m["file"]).is_file()
    ]
    assert not problems, "these files do not exist:\n" + "\n".join(problems)


# Claims that rest on one cited DeepInfer line outside the mapping page: (page without suffix, the citation as
# both languages write it, the cited line, what that line must hold)
CITED_CLAIMS = [
    ("notes/graph-execution", "csrc/engine/block_manager.hpp:28", 28, "_head(1)"),  # block 0 never handed out
    ("notes/graph-execution", "deepinfer/engine/llm_engine.py:265-266", 266, "state_manager = BlockManager("),
]


@pytest.mark.parametrize("claim", CITED_CLAIMS, ids=lambda c: c[1])
def test_a_claim_on_a_cited_line_is_on_that_line(claim: tuple[str, str, int, str]) -> None:
    page, citation, line, expected = claim
    root = _unpacked_sdist()
    for suffix in (".md", ".en.md"):
        text = (ROOT / "docs" / f"{page}{suffix}").read_text(encoding="utf-8")
        assert f"`{citation}`" in text, (page, suffix)
    lines = (root / citation.split(":")[0]).read_text(encoding="utf-8").splitlines()
    assert expected in lines[line - 1], (citation, lines[line - 1])
