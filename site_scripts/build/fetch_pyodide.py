"""Fetch the pinned Pyodide runtime once, check it against the npm registry's integrity hash, unpack it.

The lesson pages run the toy engine in the reader's browser (``docs/javascripts/inpage-run.js``); the Python
that runs it is Pyodide, served by the site itself. The set-up (``make setup``, ``make serve``, ``make test``)
runs this once; ``site_scripts/build/mkdocs_hooks.py`` then copies the unpacked files into every build. Builds
and tests never download.

Usage: ``python -m site_scripts.build.fetch_pyodide [DEST] [--pin FILE]``. What to fetch comes from
``site_scripts/build/pyodide.json``: the npm package's version, its tarball's URL, the ``sha512-...``
integrity string the registry publishes for it (Subresource Integrity form: the digest in base64), and the
files of the package that a page needs. ``DEST`` (default ``.cache/pyodide/VERSION``) receives those files;
the tarball is kept beside it and reused while its digest is right, so it is downloaded only the first time.
No npm is needed: the tarball is a plain gzipped tar. A failed download or a wrong digest prints one line on
stderr and exits 1 (nothing is left in ``DEST``); a wrong command line prints one line and exits 2.

Non-scope: the engine's own files (``site_scripts/inpage/inpage_bundle.py`` zips them at build time).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = Path(__file__).resolve().parent / "pyodide.json"
CACHE = ROOT / ".cache" / "pyodide"
TIMEOUT_S = 300
STAMP = ".complete"


class FetchError(Exception):
    """A failure to report in one line."""


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage too; one line is enough
        sys.stderr.write(f"fetch_pyodide: {message}\n")
        raise SystemExit(2)


def read_pin(pin: Path = PIN) -> dict:
    """The pinned release: name, version, tarball, integrity and files."""
    try:
        data = json.loads(pin.read_text(encoding="utf-8"))
        entry = {key: str(data[key]) for key in ("name", "version", "tarball", "integrity")}
        entry["files"] = [str(name) for name in data["files"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise FetchError(f"cannot read {pin}: {error!r}") from error
    if not entry["integrity"].startswith("sha512-"):
        raise FetchError(f"{pin.name}: integrity must be a sha512-... string, got {entry['integrity']!r}")
    return entry


def default_dest(pin: Path = PIN) -> Path:
    """Where the set-up unpacks the pinned runtime and where the site build looks for it."""
    return CACHE / read_pin(pin)["version"]


def integrity(path: Path) -> str:
    """The file's digest in the npm registry's form, ``sha512-<base64>``."""
    digest = hashlib.sha512()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return "sha512-" + base64.b64encode(digest.digest()).decode("ascii")


def download(url: str, archive: Path) -> None:
    """Save ``url`` as ``archive`` (through a ``.part`` file, so a failed download leaves nothing)."""
    partial = archive.with_name(archive.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as error:  # URLError is an OSError
        partial.unlink(missing_ok=True)
        raise FetchError(f"cannot download {url}: {error}") from error
    partial.replace(archive)


def unpack(archive: Path, files: list[str], dest: Path) -> None:
    """Replace ``dest`` with the named files of the tarball's ``package/`` folder."""
    scratch = dest.with_name(dest.name + ".unpacking")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for name in files:
                member = tar.getmember(f"package/{name}")
                source = tar.extractfile(member)
                if source is None:
                    raise FetchError(f"{archive.name}: package/{name} is not a file")
                with source, (scratch / name).open("wb") as out:
                    shutil.copyfileobj(source, out)
        (scratch / STAMP).write_text("", encoding="utf-8")
        shutil.rmtree(dest, ignore_errors=True)
        scratch.rename(dest)
    except (OSError, KeyError, tarfile.TarError) as error:
        raise FetchError(f"cannot unpack {archive}: {error!r}") from error
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def is_unpacked(dest: Path, files: list[str]) -> bool:
    """True if ``dest`` holds a complete unpacked runtime (the stamp is written last)."""
    return (dest / STAMP).is_file() and all((dest / name).is_file() for name in files)


def fetch(dest: Path | None = None, pin: Path = PIN) -> str:
    """Make ``dest`` hold the pinned runtime's files; return the line to print."""
    entry = read_pin(pin)
    dest = dest or CACHE / entry["version"]
    archive = dest.parent / f"{entry['name']}-{entry['version']}.tgz"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if archive.is_file() and integrity(archive) == entry["integrity"]:
        how = "already downloaded"
    else:
        archive.unlink(missing_ok=True)  # a wrong or partial file is never kept
        print(f"downloading {entry['tarball']}, once", flush=True)
        download(entry["tarball"], archive)
        actual = integrity(archive)
        if actual != entry["integrity"]:
            archive.unlink()
            pinned = entry["integrity"]
            raise FetchError(f"{archive.name} has integrity {actual}, but {pin.name} pins {pinned}")
        how = "downloaded"
    if not is_unpacked(dest, entry["files"]):
        unpack(archive, entry["files"], dest)
    return f"{archive.name} ({how}, integrity as {pin.name} pins) unpacked in {dest}"


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(prog="python -m site_scripts.build.fetch_pyodide",
                            description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, nargs="?", help="the folder for the runtime's files")
    parser.add_argument("--pin", type=Path, default=PIN, help="the JSON file that pins the release")
    args = parser.parse_args(argv)
    try:
        print(fetch(args.dest, args.pin))
    except FetchError as error:
        sys.stderr.write(f"fetch_pyodide: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
