"""The shape of a DAG: validation, topological order, levels, and the text form of a graph.

Pure functions over node names and dependency lists; :mod:`stepline.dag` builds on them. The
*start* of a DAG is the set of its root steps (those without dependencies); several roots are
fine and run in parallel. A step has a path from the start unless it is part of a cycle or
depends, directly or not, on a step that is.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import DefinitionError
from .records import StepRecord


@dataclass(frozen=True)
class Plan:
    """A validated graph, with everything the runner and ``describe()`` need precomputed."""

    order: tuple[str, ...]
    """Topological order; among steps ready at the same time, declaration order first."""
    index: dict[str, int]
    """Position of each step in ``order``."""
    deps: dict[str, tuple[str, ...]]
    dependents: dict[str, tuple[str, ...]]
    ancestors: dict[str, frozenset[str]]
    """Transitive dependencies of each step."""
    ancestor_order: dict[str, tuple[str, ...]]
    """Transitive dependencies of each step, in ``order``: the order their outputs merge."""
    levels: tuple[tuple[str, ...], ...]
    """Level n holds the steps whose longest chain of dependencies has n steps."""

    def concurrent(self, a: str, b: str) -> bool:
        """True when neither step depends on the other, so they may run at the same time."""
        return a != b and a not in self.ancestors[b] and b not in self.ancestors[a]


def _find_cycle(names: Sequence[str], dependents: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle as a closed path in execution order (``[b, c, b]``), or ``[]``."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(names, white)
    for root in names:
        if color[root] != white:
            continue
        path: list[str] = [root]
        iters = [iter(dependents[root])]
        color[root] = grey
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                color[path.pop()] = black
                iters.pop()
                continue
            if color[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            if color[nxt] == white:
                color[nxt] = grey
                path.append(nxt)
                iters.append(iter(dependents[nxt]))
    return []


def build_plan(what: str, names: Sequence[str], deps: Mapping[str, Sequence[str]]) -> Plan:
    """Validate a graph given in declaration order; raise :class:`DefinitionError` if invalid.

    ``what`` names the graph in messages (``"dag 'report'"``). Checks: at least one step, every
    dependency names a step, no cycle, every step reachable from the start.
    """
    if not names:
        raise DefinitionError(f"{what} has no steps; add some with @{what.split()[0]}.step()")
    known = set(names)
    for name in names:
        for dep in deps[name]:
            if dep not in known:
                raise DefinitionError(
                    f"{what}: step {name!r} depends on unknown step {dep!r}; "
                    f"known steps: {', '.join(names)}"
                )
    dependents: dict[str, list[str]] = {name: [] for name in names}
    for name in names:
        for dep in deps[name]:
            dependents[dep].append(name)
    position = {name: i for i, name in enumerate(names)}
    # Kahn's algorithm; the heap keeps declaration order among the steps ready together.
    waiting = {name: len(deps[name]) for name in names}
    heap = [position[name] for name in names if not deps[name]]
    heapq.heapify(heap)
    order: list[str] = []
    while heap:
        name = names[heapq.heappop(heap)]
        order.append(name)
        for child in dependents[name]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(heap, position[child])
    if len(order) != len(names):
        reached = set(order)
        stranded = [name for name in names if name not in reached]
        cycle = _find_cycle(
            stranded, {n: [c for c in dependents[n] if c not in reached] for n in stranded}
        )
        roots = [name for name in names if not deps[name]]
        start = f"the steps without dependencies: {', '.join(roots)}" if roots else "none"
        raise DefinitionError(
            f"{what} has a cycle: {' -> '.join(cycle)}. Steps with no path from the start "
            f"({start}): {', '.join(stranded)}. Remove one dependency of the cycle."
        )
    index = {name: i for i, name in enumerate(order)}
    ancestors: dict[str, frozenset[str]] = {}
    level_of: dict[str, int] = {}
    for name in order:
        found: set[str] = set()
        for dep in deps[name]:
            found.add(dep)
            found |= ancestors[dep]
        ancestors[name] = frozenset(found)
        level_of[name] = 1 + max((level_of[d] for d in deps[name]), default=-1)
    levels: list[list[str]] = [[] for _ in range(max(level_of.values()) + 1)]
    for name in names:
        levels[level_of[name]].append(name)
    return Plan(
        order=tuple(order),
        index=index,
        deps={name: tuple(deps[name]) for name in names},
        dependents={name: tuple(children) for name, children in dependents.items()},
        ancestors=ancestors,
        ancestor_order={
            name: tuple(sorted(ancestors[name], key=index.__getitem__)) for name in names
        },
        levels=tuple(tuple(level) for level in levels),
    )


# -- text form ------------------------------------------------------------------------------------


def node_states(
    definition: Mapping[str, Any] | None, steps: Iterable[StepRecord], instance_id: str
) -> dict[str, str]:
    """The state of each node of a DAG or pipeline instance, from its recorded steps.

    States: ``pending`` (not started), ``running``, ``retrying`` (waiting for its next attempt),
    ``waiting`` (a child workflow node waiting for the child), ``complete``, ``errored``, and for
    a completed node whose rollback ran: ``rolled back`` or ``rollback failed``.
    """
    if not definition or definition.get("kind") not in ("dag", "pipeline", "workflow"):
        return {}
    by_name = {(s.name, s.kind): s for s in steps}
    states: dict[str, str] = {}
    for node in definition.get("nodes", []):
        name = node["name"]
        if node.get("type") == "child":
            child = child_instance_id(instance_id, name)
            start = by_name.get((f"start {node['workflow']} {child}", "start_workflow"))
            wait = by_name.get((f"wait {node['workflow']} {child}", "wait_for_workflow"))
            if start is None:
                states[name] = "pending"
            elif not node.get("wait", True):
                states[name] = "complete"
            elif wait is None:
                states[name] = "running"
            else:
                states[name] = wait.status
            continue
        record = by_name.get((name, "do"))
        if record is None:
            state = "pending"
        elif record.status == "waiting":
            state = "retrying"
        else:
            state = record.status
        rollback = by_name.get((f"{name}:rollback", "rollback"))
        if rollback is not None:
            state = {"complete": "rolled back", "errored": "rollback failed"}.get(
                rollback.status, "rolling back"
            )
        states[name] = state
    return states


def child_instance_id(instance_id: str, node: str) -> str:
    """The id of the child instance a child-workflow node starts (unique per parent and node)."""
    return f"{instance_id[:49]}-{node[:50]}"


def _describe_node(node: Mapping[str, Any]) -> str:
    notes: list[str] = []
    if node.get("type") == "child":
        verb = "runs" if node.get("wait", True) else "starts"
        notes.append(f"{verb} workflow {node.get('workflow')}")
    retries = node.get("retries")
    if isinstance(retries, Mapping) and node.get("type") != "child":
        notes.append(f"retries {retries.get('limit')}")
    if node.get("timeout") is not None:
        notes.append(f"timeout {node['timeout']:g}s")
    if node.get("rollback"):
        notes.append(f"rollback {node['rollback']}")
    return ", ".join(notes)


def format_graph(
    definition: Mapping[str, Any] | None, states: Mapping[str, str] | None = None
) -> str:
    """A plain-text view of a stored DAG or pipeline definition, one line per step by level.

    ``definition`` is what ``describe()`` returned (as stored in the workflows table);
    ``states`` optionally maps step names to states (see :func:`node_states`). Code-first
    workflows have no static graph: a one-line note is returned for them.
    """
    if not definition or definition.get("kind") not in ("dag", "pipeline"):
        steps = (definition or {}).get("steps") or []
        if not steps:
            return "code-first workflow: its steps are known only when it runs"
        lines = [f"code-first workflow; steps named in its source ({len(steps)}):"]
        lines += [f"  {entry['name']}  ({entry['type']})" for entry in steps]
        lines.append("(steps named at run time, in loops or helpers, show only in instances)")
        return "\n".join(lines)
    nodes = {node["name"]: node for node in definition.get("nodes", [])}
    levels: list[list[str]] = definition.get("levels", [])
    kind = definition["kind"]
    header = f"{kind}: {len(nodes)} steps in {len(levels)} levels"
    if kind == "dag":
        limit = definition.get("max_parallel")
        header += f", max_parallel {limit if limit is not None else 'unbounded'}"
    rows: list[tuple[str, str, str, str, str]] = []
    for number, level in enumerate(levels, start=1):
        for position, name in enumerate(level):
            node = nodes.get(name, {})
            deps = node.get("depends_on", [])
            rows.append(
                (
                    str(number) if position == 0 else "",
                    name,
                    (states or {}).get(name, ""),
                    ", ".join(deps) if deps else "-",
                    _describe_node(node),
                )
            )
    titles = ("level", "step", "state", "after", "notes")
    if states is None:
        rows = [(lvl, name, "", deps, notes) for lvl, name, _s, deps, notes in rows]
    columns = [i for i in range(5) if i != 2 or states is not None]
    widths = {i: max(len(titles[i]), *(len(row[i]) for row in rows)) for i in columns}
    lines = [header]
    for row in [titles, *rows]:
        cells = [row[i].ljust(widths[i]) for i in columns]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
