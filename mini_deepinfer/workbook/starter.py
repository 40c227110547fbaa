"""Starters and solutions, generated from the engine's own functions, never typed twice.

Scope: :func:`reference_source` (the engine's function as the engine has it, section markers left out),
:func:`starter_text` (the learner's file for a lesson: the imports the function uses, its signature and
docstring, the lesson's hints, and a body that raises ``NotImplementedError``), :func:`solution_text` (the
same file with the engine's bodies) and :func:`put_solution` (the learner's file with their functions replaced
by the engine's). A change to the engine changes the starter: a test regenerates the committed starters and
compares.
Non-scope: writing files and backups (``__main__.py``), checking (``checking.py``).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
import textwrap
import unicodedata
from importlib.util import resolve_name

from .exercise import Exercise, resolve
from .learner import BadFile
from .words import Words

MARKER = "# --8<--"
WIDTH = 100

HEADER = Words(
    'Workbook, lesson {lesson}: {title}.\n\nWrite the body of {names} below; everything else in the engine '
    'stays the engine\'s own.\nCheck it:      python -m mini_deepinfer.workbook check {lesson}\n'
    'The reference: python -m mini_deepinfer.workbook solution {lesson}\n',
    '练习册，第 {lesson} 课：{title}。\n\n在下面写出 {names} 的函数体；引擎的其余部分仍是引擎自己的。\n'
    '检查：    python -m mini_deepinfer.workbook check {lesson}\n参考答案：python -m mini_deepinfer.workbook '
    'solution {lesson}\n')
HINTS = (Words("What it must do: {task}", "要做的事：{task}"),
         Words("The check holds: {holds}", "检查什么：{holds}"),
         Words("Stuck? Re-read \"{section}\": {link}", "卡住了？重读「{section}」：{link}"))
TODO = Words("lesson {lesson}: write {name}()", "第 {lesson} 课：写出 {name}()")


def reference_source(target: str) -> str:
    """The engine's function, dedented, without the site's section-marker lines."""
    _, _, function = resolve(target)
    lines = textwrap.dedent(inspect.getsource(function)).splitlines()
    return "\n".join(line for line in lines if not line.strip().startswith(MARKER)) + "\n"


def _module_names(module_name: str) -> dict[str, str]:
    """Every top-level name of a module -> the import line that brings it into a learner's file."""
    module = importlib.import_module(module_name)
    tree = ast.parse(inspect.getsource(module))
    package = module_name.rpartition(".")[0]
    lines: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            relative = "." * node.level + (node.module or "")
            source = resolve_name(relative, package) if node.level else node.module
            for alias in node.names:
                name = alias.asname or alias.name
                as_part = f" as {alias.asname}" if alias.asname else ""
                lines[name] = f"from {source} import {alias.name}{as_part}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                lines[alias.asname or alias.name.split(".")[0]] = f"import {alias.name}" + (
                    f" as {alias.asname}" if alias.asname else "")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
            for name in _defined(node):
                lines[name] = f"from {module_name} import {name}"
    return lines


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def imports_for(exercise: Exercise) -> list[str]:
    """The import lines the exercise's functions need (``__future__`` first, then one line per module)."""
    wanted: dict[str, set[str]] = {}
    plain: set[str] = set()
    for target in exercise.targets:
        available = _module_names(target.partition(":")[0])
        tree = ast.parse(reference_source(target))
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        for name in sorted(used - set(exercise.names)):
            line = available.get(name)
            if line is None or hasattr(builtins, name):
                continue
            if line.startswith("import "):
                plain.add(line)
            else:
                module, _, imported = line.removeprefix("from ").partition(" import ")
                wanted.setdefault(module, set()).add(imported)
    froms = [f"from {module} import {', '.join(sorted(names))}" for module, names in sorted(wanted.items())]
    return ["from __future__ import annotations", "", *sorted(plain), *([""] if plain else []), *froms]


def _columns(text: str) -> int:
    """Columns ``text`` takes on screen: a wide (CJK) character two, any other one."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pieces(text: str) -> list[str]:
    """``text`` cut where a line may break: at spaces, and between wide characters (Chinese has no spaces)."""
    return re.findall(r"[^\s\u2e80-\uffef]+\s*|[\u2e80-\uffef]\s*|\s+", text)


def _comment(text: str, indent: str) -> list[str]:
    """``text`` as comment lines of at most ``WIDTH`` columns, counted as the screen counts them (textwrap
    counts characters, and a Chinese character takes two columns)."""
    lines, line = [], f"{indent}# "
    for piece in _pieces(text):
        if _columns(line + piece.rstrip()) > WIDTH and line.strip() not in ("#", ""):
            lines.append(line.rstrip())
            line = f"{indent}#   "
        line += piece
    return [*lines, line.rstrip()]


def starter_function(exercise: Exercise, target: str, lang: str) -> str:
    """One function of the starter: the engine's signature and docstring, the hints, then the raise."""
    source = reference_source(target)
    node = ast.parse(source).body[0]
    lines = source.splitlines()
    first = node.body[0]
    has_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    keep = first.end_lineno if has_doc else first.lineno - 1
    indent = lines[first.lineno - 1][: len(lines[first.lineno - 1]) - len(lines[first.lineno - 1].lstrip())]
    name = target.rpartition(".")[2].rpartition(":")[2]
    section_id, section_title = exercise.section
    values = dict(task=exercise.task(lang), holds=exercise.holds(lang), section=section_title(lang),
                  link=exercise.section_link(lang, section_id))
    hints = [line for hint in HINTS for line in _comment(hint(lang).format(**values), indent)]
    todo = TODO(lang).format(lesson=exercise.lesson, name=name)
    return "\n".join(lines[:keep] + hints + [f'{indent}raise NotImplementedError("{todo}")']) + "\n"


def _file(exercise: Exercise, lang: str, functions: list[str]) -> str:
    names = ", ".join(f"{name}()" for name in exercise.names)
    header = HEADER(lang).format(lesson=exercise.lesson, title=exercise.title(lang), names=names)
    parts = ['"""' + header + '"""', "\n".join(imports_for(exercise)), *functions]
    return "\n\n\n".join(part.rstrip("\n") for part in parts) + "\n"


def starter_text(exercise: Exercise, lang: str) -> str:
    """The learner's starting file for the lesson, in ``lang``."""
    return _file(exercise, lang, [starter_function(exercise, target, lang) for target in exercise.targets])


def solution_text(exercise: Exercise, lang: str) -> str:
    """The same file with the engine's own functions: what ``solution`` prints."""
    return _file(exercise, lang, [reference_source(target) for target in exercise.targets])


def put_solution(exercise: Exercise, source: str, filename: str) -> str:
    """The learner's text with each of the exercise's functions replaced by the engine's (the rest kept)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise BadFile(f"{filename}, line {exc.lineno}: {exc.msg}; fix it, or start again with --force") \
            from None
    lines = source.splitlines()
    spans = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in exercise.names:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            spans[node.name] = (start - 1, node.end_lineno)
    for target, name in zip(exercise.targets, exercise.names):
        if name not in spans:
            raise BadFile(f"{filename} has no function {name}() (the starter's name); "
                          "start again with --force")
    for target, name in sorted(zip(exercise.targets, exercise.names), key=lambda pair: -spans[pair[1]][0]):
        start, end = spans[name]
        lines[start:end] = reference_source(target).rstrip("\n").splitlines()
    return "\n".join(lines) + "\n"
