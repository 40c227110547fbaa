"""The engine files that the in-page runs ship, zipped at site build time from the package itself.

Scope: which files a page's worker needs (:func:`bundle_files`: the modules a run imports by name, namely the
commands ``python -m mini_deepinfer`` and ``python -m mini_deepinfer.pipeline_demo --toy``, the generators
that write the pages' round tables, the worker's own Python side and the workbook's in-page exercises, and
every module of this repository that importing them loads, found by reading the ``import`` statements that run
at import time), and the zip of exactly those files, byte for byte (:func:`write_zip`). An import inside a
function runs only when the function is called: ``pipeline_demo`` imports torch and the model that way, on the
path ``--toy`` never takes, so they are not shipped (``tests/test_inpage_run.py`` runs each shipped command
with everything else unimportable). Nothing is copied into the repository, so the shipped engine cannot drift
from the package.
Non-scope: the Pyodide runtime (``site_scripts/build/fetch_pyodide.py``) and putting files into the built site
(``site_scripts/inpage/inpage_hooks.py``)."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINTS = (
    "mini_deepinfer/__init__.py",
    "mini_deepinfer/__main__.py",
    "mini_deepinfer/pipeline_demo.py",
    "site_scripts/lessons/gen_abc.py",
    "site_scripts/lessons/gen_toy.py",
    "site_scripts/inpage/inpage_worker.py",
)
LOCAL_PACKAGES = ("mini_deepinfer", "site_scripts")


def workbook_entry_points() -> tuple[str, ...]:
    """The workbook's modules that the in-page exercises load by name: the check, the starter, and the
    check of each lesson whose exercise runs in the page (``checking.py`` imports it when it runs)."""
    from mini_deepinfer.workbook.lessons import EXERCISES

    checks = [f"mini_deepinfer/workbook/checks/{item.checks}.py" for item in EXERCISES if item.in_page]
    return ("mini_deepinfer/workbook/checking.py", "mini_deepinfer/workbook/lessons.py",
            "mini_deepinfer/workbook/starter.py", *checks)
ZIP_DATE = (2020, 1, 1, 0, 0, 0)  # a fixed date: the same files always give the same zip


def module_path(module: str, root: Path = ROOT) -> Path | None:
    """The file of a dotted module name of this repository (a package's ``__init__.py``), or None."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1])


def _imported_modules(node: ast.AST, package: str) -> list[str]:
    """The absolute module names one ``import`` / ``from ... import`` statement may load."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def import_time_nodes(tree: ast.AST) -> list[ast.AST]:
    """The statements of a module that run when it is imported: no function body, no ``if TYPE_CHECKING``."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        found.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue  # an import statement can stand only in the body, which runs when called
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


def imports_of(path: Path, root: Path = ROOT) -> set[Path]:
    """This repository's files that importing ``path`` loads (its import statements that run at import)."""
    package = _package_of(path, root)
    found = set()
    for node in import_time_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        for module in _imported_modules(node, package):
            if module.partition(".")[0] in LOCAL_PACKAGES and (target := module_path(module, root)):
                found.add(target)
    return found


def _with_parent_packages(path: Path, root: Path) -> set[Path]:
    """``path`` and the ``__init__.py`` of each package above it (importing a module runs them)."""
    found = {path}
    folder = path.parent
    while folder != root:
        if (folder / "__init__.py").is_file():
            found.add(folder / "__init__.py")
        folder = folder.parent
    return found


def bundle_files(root: Path = ROOT) -> list[Path]:
    """Every file the in-page runs need, sorted: the entry points and everything they import, transitively."""
    todo = [root / entry for entry in (*ENTRY_POINTS, *workbook_entry_points())]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(imports_of(path, root) | _with_parent_packages(path, root))
    return sorted(seen)


def write_zip(dest: Path, root: Path = ROOT) -> list[str]:
    """Zip :func:`bundle_files` into ``dest`` (paths relative to ``root``); return those paths."""
    names = [path.relative_to(root).as_posix() for path in bundle_files(root)]
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in names:
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, (root / name).read_bytes())
    partial.replace(dest)
    return names
