"""Each workbook check is strong enough that most single-operator changes of the engine's function fail it.

Scope: mutants made by machine from each exercise's reference (``solution N``): a comparison flipped (``==``
and ``!=``, ``<`` and ``>=``, ``in`` and ``not in`` ...), ``+`` for ``-`` and back, ``and`` for ``or``, an
integer constant off by one, a ``not`` dropped, a statement dropped. At most ``SAMPLE`` of them per lesson
(evenly spread over the function, the same ones each run); the check must reject more than ``KILLED`` of them.
Some mutants cannot be told apart by any run (a ``<=`` where the two sides are never equal), hence "most".
Non-scope: the hand-written mistakes (``test_workbook_mistakes.py``).
"""

from __future__ import annotations

import ast
import copy

import pytest

from mini_deepinfer.workbook import checking
from mini_deepinfer.workbook.checking import check_source
from mini_deepinfer.workbook.lessons import EXERCISES, exercise
from mini_deepinfer.workbook.starter import reference_source, solution_text

SAMPLE = 12
KILLED = 0.6
TIME_LIMIT_S = 10  # a mutant that loops for ever is rejected after this long

FLIPS = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.LtE: ast.Gt,
         ast.Gt: ast.LtE, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
         ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.And: ast.Or,
         ast.Or: ast.And}


def _sites(function: ast.FunctionDef) -> list[tuple[str, tuple]]:
    """Every place one operator can change, as (kind, path of the node), in source order."""
    sites = []
    body = function.body[1:] if ast.get_docstring(function) else function.body
    for statement in body:
        for node in ast.walk(statement):
            for kind, ok in (("op", isinstance(node, (ast.Compare, ast.BinOp, ast.AugAssign, ast.BoolOp))),
                             ("const", isinstance(node, ast.Constant) and type(node.value) is int),
                             ("not", isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)),
                             ("drop", isinstance(node, ast.stmt))):
                if ok:
                    sites.append((kind, node))
    return sites


def _mutate(node: ast.AST, kind: str) -> bool:
    if kind == "op":
        ops = node.ops if isinstance(node, ast.Compare) else [node.op]
        if type(ops[0]) not in FLIPS:
            return False
        new = FLIPS[type(ops[0])]()
        if isinstance(node, ast.Compare):
            node.ops[0] = new
        else:
            node.op = new
    elif kind == "const":
        node.value += 1
    elif kind == "not":
        return False  # handled by the parent replacement below
    return True


def mutants(target: str) -> list[tuple[str, str]]:
    """(description, mutated function source) for each site of the target's reference function."""
    source = reference_source(target)
    tree = ast.parse(source)
    count = len(_sites(tree.body[0]))
    found = []
    for index in range(count):
        copy_tree = copy.deepcopy(tree)
        kind, node = _sites(copy_tree.body[0])[index]
        shown = ast.unparse(node).splitlines()[0][:60]
        description = f"{kind} at line {getattr(node, 'lineno', '?')}: {shown}"
        if kind == "drop":
            _drop(copy_tree, node)
        elif kind == "not":
            _replace(copy_tree, node, node.operand)
        elif not _mutate(node, kind):
            continue
        found.append((description, ast.unparse(ast.fix_missing_locations(copy_tree))))
    return found


def _parent_field(tree: ast.AST, child: ast.AST):
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is child:
                return parent, name, None
            if isinstance(value, list) and any(item is child for item in value):
                return parent, name, next(i for i, item in enumerate(value) if item is child)
    raise LookupError


def _replace(tree: ast.AST, node: ast.AST, new: ast.AST) -> None:
    parent, name, index = _parent_field(tree, node)
    if index is None:
        setattr(parent, name, new)
    else:
        getattr(parent, name)[index] = new


def _drop(tree: ast.AST, node: ast.stmt) -> None:
    _replace(tree, node, ast.Pass())


def with_function(text: str, name: str, source: str) -> str:
    """``text`` (a whole exercise file) with its function ``name`` replaced by ``source``."""
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines()
    lines[node.lineno - 1 : node.end_lineno] = source.splitlines()
    return "\n".join(lines) + "\n"


def sampled(lesson: int) -> list[tuple[str, str]]:
    """At most SAMPLE (description, whole file) mutants of the lesson's functions, evenly spread."""
    item = exercise(lesson)
    base = solution_text(item, "en")
    every = [(f"{name}: {what}", with_function(base, name, source))
             for target, name in zip(item.targets, item.names) for what, source in mutants(target)]
    if len(every) <= SAMPLE:
        return every
    return [every[round(i * (len(every) - 1) / (SAMPLE - 1))] for i in range(SAMPLE)]


@pytest.mark.slow
@pytest.mark.parametrize("lesson", [item.lesson for item in EXERCISES])
def test_most_single_operator_changes_of_the_reference_fail_the_check(lesson, monkeypatch):
    monkeypatch.setattr(checking, "TIME_LIMIT_S", TIME_LIMIT_S)
    item = exercise(lesson)
    try:
        cases = sampled(lesson)
    except (OSError, TypeError):
        pytest.skip("no source")
    survivors = [what for what, text in cases
                 if check_source(item, text, "lesson.py", "en", fail_fast=True).code == 0]
    killed = 1 - len(survivors) / len(cases)
    listed = "\n".join(survivors)
    assert killed > KILLED, f"{len(survivors)} of {len(cases)} mutants pass the check:\n{listed}"
