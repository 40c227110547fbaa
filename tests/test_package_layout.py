"""The package's layout is its architecture: each role is a folder, and imports only go down the layers.

Layers, lowest first: ``core`` (the scheduling core, standard library only), ``models`` (the model maths),
``runtime`` (what runs a model for the engine), ``tools`` (what the commands share), the commands (the
top-level modules and ``bench``), and above them ``workbook``, which runs the lessons' own demos and
``generate`` with a learner's functions swapped in (so it may import the commands). Every import in every
module is read from the source, including imports inside functions, so a lazy import cannot hide an edge.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mini_deepinfer"
LAYERS = {"core": 0, "models": 1, "runtime": 2, "tools": 3}
COMMAND_LAYER = 4
WORKBOOK_LAYER = 5


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports (absolute names; relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return found


def layer(name: str) -> int:
    parts = name.split(".")
    if len(parts) == 1:
        return LAYERS["core"]  # the package itself re-exports the core
    return WORKBOOK_LAYER if parts[1] == "workbook" else LAYERS.get(parts[1], COMMAND_LAYER)


def command_group(name: str) -> str:
    """Commands are the top-level modules; ``bench`` is one command package with shared helpers."""
    return ".".join(name.split(".")[:2])


# module -> the package's own modules it imports
GRAPH = {name: {t for t in imports(name, path) if t in MODULES} for name, path in MODULES.items()}


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_imports_only_go_to_the_same_layer_or_a_lower_one(name: str) -> None:
    upward = sorted(target for target in GRAPH[name] if layer(target) > layer(name))
    assert not upward, f"{name} (layer {layer(name)}) imports from a higher layer: {upward}"


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if layer(n) == COMMAND_LAYER))
def test_no_command_imports_another_command(name: str) -> None:
    group = command_group(name)
    others = sorted(t for t in GRAPH[name] if layer(t) == COMMAND_LAYER and command_group(t) != group)
    assert not others, f"{name} imports another command's module: {others} (what they share goes to tools/)"


def test_the_import_graph_has_no_cycle() -> None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(GRAPH[node]):
            if target == node:
                continue
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[node] = 2

    for node in sorted(GRAPH):
        if node not in state:
            visit(node, [node])


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if layer(n) == LAYERS["core"]))
def test_the_scheduling_core_imports_only_the_standard_library(name: str) -> None:
    foreign = sorted(n for n in imports(name, MODULES[name])
                     if n.split(".")[0] not in sys.stdlib_module_names and not n.startswith("mini_deepinfer")
                     and n != "__future__")
    assert not foreign, f"{name} imports {foreign}"


def test_each_role_is_a_folder_and_the_commands_sit_at_the_top() -> None:
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__"))
    assert folders == ["bench", "core", "models", "runtime", "tools", "workbook"]
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    commands = ["generate", "model_draft_demo", "pipeline_demo", "random_checkpoint"]
    assert top == ["__init__", "__main__", *commands]


def test_the_model_package_imports_nothing_from_the_runtime_and_stages_nothing() -> None:
    """``models/`` holds what the model reads; laying a round out and uploading it is the runtime's
    (``runtime/staging.py``): no pinned memory, no non-blocking copy, no staging buffer in ``models/``."""
    for name, path in MODULES.items():
        if layer(name) != LAYERS["models"]:
            continue
        runtime = sorted(t for t in imports(name, path) if t.startswith("mini_deepinfer.runtime"))
        assert not runtime, f"{name} imports {runtime}"
        source = path.read_text(encoding="utf-8")
        staged = [word for word in ("pin_memory", "non_blocking", "Staging", "stage_round") if word in source]
        assert not staged, f"{name} stages a round ({staged}); that is runtime/staging.py's job"


SPECULATIVE_WORDS = re.compile(r"spec_width|draft|verif|rollback|rewind|speculat", re.IGNORECASE)
SPECULATIVE_HOMES = {"mini_deepinfer.core.speculative", "mini_deepinfer.core.config", "mini_deepinfer.core"}
"""Where the core may name speculative decoding: the module that implements it, the config that sizes every
mode (``spec_width``), and the package index that re-exports both."""


def names_in_code(tree: ast.Module) -> set[str]:
    """Every identifier and string inside the module's classes and functions (imports and the module
    docstring excluded: they only say where things are)."""
    found: set[str] = set()
    for top in tree.body:
        if not isinstance(top, (ast.ClassDef, ast.FunctionDef)):
            continue
        for node in ast.walk(top):
            for attr in ("id", "attr", "arg", "name"):
                value = getattr(node, attr, None)
                if isinstance(value, str):
                    found.add(value)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


CORE_MODULES = sorted(n for n in GRAPH if n.startswith("mini_deepinfer.core."))


@pytest.mark.parametrize("name", [n for n in CORE_MODULES if n not in SPECULATIVE_HOMES])
def test_no_core_module_but_the_speculative_one_names_speculative_decoding(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    named = sorted(word for word in names_in_code(tree) if SPECULATIVE_WORDS.search(word))
    assert not named, f"{name} names speculative decoding ({named}); that is core/speculative.py's"
