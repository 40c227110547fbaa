"""What the two set-up fetchers share: a download kept only with its pinned digest, unpacked whole or not
at all.

Scope: :class:`FetchError` (a failure said in one line), :func:`file_digest` (a file's digest, read in
chunks), :func:`save` (a URL into a file through a ``.part`` file, so a failed download leaves nothing),
:func:`fetched_once` (reuse an archive whose digest is right, else download it and check it, never keeping a
wrong file), :func:`unpacking` (a scratch folder that the caller fills and moves into place, removed whatever
happens) and :func:`command` (the command line: one line on stdout, or one line on stderr and exit 1; a wrong
command line is one line and exit 2). Standard library only: it runs before anything is installed.
Non-scope: what is fetched and how its digest is written (``fetch_sdist.py``: PyPI, SHA-256;
``fetch_pyodide.py``: npm, a ``sha512-...`` integrity string).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tarfile
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


class FetchError(Exception):
    """A failure to report in one line."""


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage too; one line is enough
        sys.stderr.write(f"{self.prog.rpartition('.')[2]}: {message}\n")
        raise SystemExit(2)


def file_digest(path: Path, algorithm: str) -> bytes:
    """The digest of the file's bytes (``hashlib`` algorithm name), read 1 MiB at a time."""
    digest = hashlib.new(algorithm)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.digest()


def save(url: str, archive: Path, timeout_s: float, what: str) -> None:
    """Save ``url`` as ``archive`` (through a ``.part`` file); ``what`` names it in the error."""
    partial = archive.with_name(archive.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as error:  # URLError is an OSError
        partial.unlink(missing_ok=True)
        raise FetchError(f"cannot download {what}: {error}") from error
    partial.replace(archive)


def fetched_once(archive: Path, check: Callable[[Path], None], download: Callable[[], None],
                 announce: str) -> str:
    """Make ``archive`` the pinned file: kept if ``check`` passes, else downloaded once and checked.

    ``check`` raises :class:`FetchError` for a wrong file; a wrong or partial file is never kept. Returns how
    the archive came (``"already downloaded"`` or ``"downloaded"``).
    """
    if archive.is_file():
        try:
            check(archive)
            return "already downloaded"
        except FetchError:
            pass
    archive.unlink(missing_ok=True)
    print(announce, flush=True)
    download()
    try:
        check(archive)
    except FetchError:
        archive.unlink()
        raise
    return "downloaded"


@contextmanager
def unpacking(archive: Path, dest: Path) -> Iterator[Path]:
    """A fresh scratch folder beside ``dest`` for unpacking ``archive`` into, removed whatever happens.

    The caller fills it and moves the result into ``dest``; an error on the way is one :class:`FetchError`.
    """
    scratch = dest.with_name(dest.name + ".unpacking")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        yield scratch
    except (OSError, KeyError, tarfile.TarError) as error:
        raise FetchError(f"cannot unpack {archive}: {error!r}") from error
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def command(module: str, description: str, arguments: Callable[[argparse.ArgumentParser], None],
            run: Callable[[argparse.Namespace], str], argv: Sequence[str] | None) -> int:
    """``python -m site_scripts.build.<module>``: parse ``argv``, print what ``run`` returns; exit code."""
    parser = _OneLineParser(prog=f"python -m site_scripts.build.{module}", description=description)
    arguments(parser)
    args = parser.parse_args(argv)
    try:
        print(run(args))
    except FetchError as error:
        sys.stderr.write(f"{module}: {error}\n")
        return 1
    return 0
