"""Which generators must run again: the stamps that let a second ``make serve`` skip what is up to date.

Scope: after a generator's run succeeds, ``.cache/regenerate/gen_<name>.json`` (ignored by git) records the
hash of each of its inputs and outputs; :func:`plan` runs it again only when one differs, and says which.
Inputs are taken broadly (a stale snippet on the site is a bug, a needless run only costs time):

* shared by every generator: the engine and training code, ``trained/``, ``pyproject.toml`` and the measured
  records (``snippets/**/*.json``), which its demo commands read in other processes, where nothing is traced;
* its module's source and that of every module of the repository it imports, directly or not, with the
  phrase tables (``words.toml``) of their folders;
* every file of the repository it opened and every folder it listed while it ran (:func:`reading`, through
  Python's audit hooks): a page it quotes, a test whose bounds it prints, the code it counts;
* the versions of Python and torch.

Non-scope: what to write (``regenerate.py``); relative imports (the repository has none); files read in
another process, by C code rather than Python's ``open``, or when the modules are imported (before any
generator runs; today only records under ``snippets/``), beyond the shared inputs.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from site_scripts.build.common import WORDS_FILE

STAMPS = ".cache/regenerate"  # the stamps' folder, relative to the repository root
SHARED = ("mini_deepinfer/", "training/", "trained/", "pyproject.toml")  # with snippets/**/*.json: see above
NEVER_RUN = "no record of a run here"


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def file_hash(path: Path) -> str:
    return _hash(path.read_bytes()) if path.is_file() else "missing"


def environment() -> str:
    torch = next((d.version for d in metadata.distributions(name="torch")), "none")
    return f"Python {platform.python_version()}, torch {torch}"


def module_sources(root: Path, module: str, parsed: dict[str, list[str]]) -> set[str]:
    """The source files under ``root`` of ``module``, its packages and every module it imports, directly or
    not, wherever the ``import`` stands (modules from elsewhere are left out); ``parsed`` caches each file's
    imported names."""
    found, todo, seen = set(), [module], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [name.rpartition(".")[0]] if "." in name else []  # importing a.b runs a/__init__.py
        base = PurePosixPath(*name.split("."))
        path = next((c.as_posix() for c in (base.with_name(f"{base.name}.py"), base / "__init__.py")
                     if (root / c).is_file()), None)
        if path is None:
            continue
        found.add(path)
        if path not in parsed:
            parsed[path] = _imported_names((root / path).read_text(encoding="utf-8"))
        todo += parsed[path]
    return found


def _imported_names(source: str) -> list[str]:
    """Every module name an ``import`` may load (``from a import b``: ``a``, and ``a.b`` if a module)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


_OPENED: list[set[tuple[bool, str]]] = []  # one set per active `reading`: (is a folder, path as given)
_HOOKED = False  # an audit hook cannot be removed: one serves every `reading`


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The audit hook: notes the files opened for reading and the folders listed while a :func:`reading` is
    on. It sees every audited event of the process, so it returns at once for others; it must not raise."""
    if not _OPENED or event not in ("open", "os.listdir", "os.scandir"):
        return
    if event == "open" and (set(args[1]) & set("wax+") if isinstance(args[1], str)
                            else (args[2] or 0) & (os.O_WRONLY | os.O_RDWR)):
        return  # opened for writing
    if args[0] is None or isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED[-1].add((event != "open", os.fsdecode(args[0] or ".")))


@contextmanager
def reading(root: Path) -> Iterator[set[str]]:
    """On leaving the body, the set yielded holds what it read under ``root``: the files' paths and the listed
    folders' (ending in ``/``), relative to ``root``; hidden folders and ``__pycache__`` are left out."""
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True
    opened: set[tuple[bool, str]] = set()
    read: set[str] = set()
    root = root.resolve()
    _OPENED.append(opened)
    try:
        yield read
    finally:
        _OPENED.pop()
    for is_folder, given in opened:
        path = Path(os.path.realpath(Path.cwd() / given))
        if not path.is_relative_to(root):
            continue
        parts = path.relative_to(root).parts
        if not any(part.startswith(".") or part == "__pycache__" for part in parts):
            read.add(f"{PurePosixPath(*parts)}/" if is_folder else PurePosixPath(*parts).as_posix())


class Fingerprints:
    """The inputs' hashes, each taken once, at its first use (before the generators that read it run, so a
    file edited while they run counts as changed next time), over the repository's files (tracked, or new
    and not ignored: ``git ls-files``)."""

    def __init__(self, root: Path, files: list[str]) -> None:
        self.root, self.files = root, files
        self.shared = {p for p in files
                       if p.startswith(SHARED) or p.startswith("snippets/") and p.endswith(".json")}
        self._hashes: dict[str, str] = {}
        self._parsed: dict[str, list[str]] = {}

    def of(self, key: str) -> str:
        """The hash of a file's bytes, or of the names in a folder (``key`` ending in ``/``)."""
        if key not in self._hashes:
            self._hashes[key] = self._listing(key) if key.endswith("/") else file_hash(self.root / key)
        return self._hashes[key]

    def _listing(self, folder: str) -> str:
        prefix = "" if folder == "./" else folder  # names of the repository's files: not .venv/, site/, ...
        names = sorted({p[len(prefix):].split("/")[0] for p in self.files if p.startswith(prefix)})
        return _hash("\n".join(names).encode())

    def static_inputs(self, module: str) -> set[str]:
        """The inputs known before a run: the shared ones, the module's sources and the phrase tables beside
        them (``words.toml``, read when a module is imported, so no run would see it read)."""
        sources = module_sources(self.root, module, self._parsed)
        words = {(PurePosixPath(path).parent / WORDS_FILE).as_posix() for path in sources}
        return self.shared | sources | (words & set(self.files))


def fingerprints(root: Path) -> Fingerprints | None:
    """Fingerprints over the repository's files; None where git cannot list them (then nothing is stamped)."""
    proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          cwd=root, capture_output=True, text=True, check=False)
    return Fingerprints(root, sorted(set(proc.stdout.split("\0")) - {""})) if proc.returncode == 0 else None


def load(root: Path, name: str) -> dict[str, Any] | None:
    """Generator ``name``'s stamp; None if there is none or it is unreadable (then the generator runs)."""
    try:
        stamp = json.loads((root / STAMPS / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    valid = isinstance(stamp, dict) and all(isinstance(stamp.get(k), dict) for k in ("inputs", "outputs"))
    return stamp if valid else None


def why_run(prints: Fingerprints, name: str, module: str, outputs: Iterable[str]) -> str | None:
    """Why generator ``name`` must run again, in a few words; None when its last run here still holds."""
    stamp = load(prints.root, name)
    if stamp is None:
        return NEVER_RUN
    if stamp.get("environment") != environment():
        return f"now {environment()}"
    if sorted(stamp["outputs"]) != sorted(outputs):
        return "its list of outputs changed"
    for path, digest in stamp["outputs"].items():
        if file_hash(prints.root / path) != digest:
            return f"{path} was edited or deleted"
    for key in sorted(prints.static_inputs(module) | set(stamp["inputs"])):
        if prints.of(key) != stamp["inputs"].get(key):
            return f"{key} changed" if key in stamp["inputs"] else f"{key} is new"
    return None


def plan(prints: Fingerprints | None, generators: Mapping[str, tuple[str, list[str]]],
         every: bool) -> dict[str, str]:
    """The generators to run (``generators``: name -> (module, output paths)), each with why; with ``every``,
    or without fingerprints, all. Says on stderr how many there are, and why they run."""
    reasons = {}
    for name, (module, outputs) in generators.items():
        if every or prints is None:
            reasons[name] = "--all" if every else "git cannot list the repository's files"
        elif why := why_run(prints, name, module, outputs):
            reasons[name] = why
    print(f"regenerating snippets: {len(generators)} generators, {len(generators) - len(reasons)} up to date "
          f"(inputs unchanged), {len(reasons)} to run", file=sys.stderr)
    for why in dict.fromkeys(reasons.values()):
        print(f"  {why}: {', '.join(name for name in reasons if reasons[name] == why)}", file=sys.stderr)
    return reasons


def record(prints: Fingerprints, name: str, module: str, outputs: Iterable[str], read: set[str]) -> None:
    """Write generator ``name``'s stamp after a successful run: whole or not at all (a rename)."""
    inputs = sorted(prints.static_inputs(module) | read)
    stamp = {"environment": environment(), "inputs": {key: prints.of(key) for key in inputs},
             "outputs": {path: file_hash(prints.root / path) for path in sorted(outputs)}}
    (prints.root / STAMPS).mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=prints.root / STAMPS, prefix=f"{name}.", suffix=".partial")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(stamp, out, indent=1)
    os.replace(partial, prints.root / STAMPS / f"{name}.json")
