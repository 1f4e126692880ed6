"""What a workflow's source says about its steps, without running it (``stepline workflows
describe``, the dashboard): steps called with a literal name (``step.do("load", ...)``) and
steps declared with the decorator (``@step.do()`` on a function), whose parameters name the
decorated steps they depend on, so that their graph can be drawn as a DAG's is; and the patch
ids it names, which the code can replay (a worker claims only instances whose patches its code
has: docs/versioning.md)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from ._graph import build_plan
from .errors import DefinitionError

STEP_METHODS = {
    "do": "do",
    "sleep": "sleep",
    "sleep_until": "sleep",
    "wait_for_event": "wait_for_event",
    "start_workflow": "start_workflow",
    "wait_for_workflow": "wait_for_workflow",
}
_CONTEXT = "ctx"


def _tree(fn: Callable[..., Any]) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None


def _decorated(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[ast.Call, str] | None:
    """``(decorator, step name)`` of a function declared with ``@step.do(...)`` whose name is
    known from the source (a literal, or the function's own name)."""
    for decorator in node.decorator_list:
        if not (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "do"
        ):
            continue
        given = decorator.args[0] if decorator.args else None
        for keyword in decorator.keywords:
            if keyword.arg == "name":
                given = keyword.value
        if given is None or (isinstance(given, ast.Constant) and given.value is None):
            return decorator, node.name
        if isinstance(given, ast.Constant) and isinstance(given.value, str):
            return decorator, given.value
        return None
    return None


def static_steps(fn: Callable[..., Any]) -> list[dict[str, Any]]:
    """Steps a function's source names, in source order: ``{"name", "type"}``, and for a
    decorated step with dependencies ``depends_on`` (the parameters naming decorated steps)."""
    tree = _tree(fn)
    if tree is None:
        return []
    found: list[tuple[int, dict[str, Any]]] = []
    decorators: set[int] = set()
    declared: list[tuple[int, str, list[str], str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        decorated = _decorated(node)
        if decorated is not None:
            decorator, name = decorated
            decorators.add(id(decorator))
            args = node.args
            params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            declared.append((node.lineno, name, params, node.name))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        kind = STEP_METHODS.get(node.func.attr)
        if kind is None or not node.args or id(node) in decorators:
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            found.append((node.lineno, {"name": first.value, "type": kind}))
    by_name = {name: name for _line, name, _params, _fn in declared}
    by_name.update({fn_name: name for _line, name, _params, fn_name in declared})
    for line, name, params, _fn in declared:
        entry: dict[str, Any] = {"name": name, "type": "do"}
        deps = [by_name[p] for p in params if p != _CONTEXT and p in by_name]
        if deps:
            entry["depends_on"] = deps
        found.append((line, entry))
    found.sort(key=lambda item: item[0])
    return [entry for _line, entry in found]


def step_graph(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The graph of the decorated steps (``nodes``, ``edges``, ``levels``, as a DAG's
    definition carries them) when some depend on others; None otherwise, or when the source's
    graph is not one (a name declared twice, a cycle)."""
    decorated = [s for s in steps if s["type"] == "do" and "depends_on" in s]
    if not decorated:
        return None
    names: list[str] = []
    deps: dict[str, list[str]] = {}
    for entry in steps:
        if entry["type"] != "do":
            continue
        if entry["name"] in deps:
            return None
        names.append(entry["name"])
        deps[entry["name"]] = list(entry.get("depends_on", []))
    try:
        plan = build_plan("workflow", names, deps)
    except DefinitionError:
        return None
    level_of = {name: i for i, level in enumerate(plan.levels) for name in level}
    return {
        "nodes": [
            {"name": n, "type": "do", "depends_on": deps[n], "level": level_of[n]} for n in names
        ],
        "edges": [[dep, name] for name in names for dep in deps[name]],
        "levels": [list(level) for level in plan.levels],
    }


PATCH_METHODS = frozenset({"patched", "deprecate_patch"})


def literal_patches(fn: Any) -> set[str]:
    """The patch ids ``fn``'s source (a function or a class) names as literals:
    ``step.patched("id")`` and ``step.deprecate_patch("id")``; none if its source is unknown."""
    tree = _tree(fn)
    if tree is None:
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in PATCH_METHODS
            and node.args
        ):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            found.add(first.value)
    return found
