"""Running a DAG: the nodes as the runner sees them, and one activation's walk over the graph.

Private to :mod:`stepline.dag`, which defines the public API (``Dag``, ``Pipeline``).
"""

from __future__ import annotations

import asyncio
import copy
import heapq
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from ._callbacks import CallbackShape, invoke
from ._graph import Plan, child_instance_id
from ._json import PLAIN_ONLY
from .config import StepConfig
from .errors import NonRetryableError, SuspendInstance
from .step import StepContext, WorkflowStep
from .workflow import WorkflowEvent


class DagContextError(NonRetryableError):
    """A node returned something other than a dict or None, two nodes that may run at the same
    time returned the same key, or the instance params are not a JSON object.

    Raised inside a node's step it fails that step at once (no retries); raised by the graph it
    ends the instance ``errored``.
    """


@dataclass(frozen=True)
class NodeRollback:
    """What undoes a step node: called with its context, then ``error`` and ``info`` if it takes
    them (``shape.arity`` of the three)."""

    fn: Callable[..., Any]
    shape: CallbackShape
    config: StepConfig | None
    """None: the step's own retries and timeout."""


@dataclass(frozen=True)
class StepNode:
    """A function run with ``step.do``: called with its context, then a
    :class:`~stepline.StepContext` if it takes one (``shape.arity`` of the two)."""

    name: str
    depends_on: tuple[str, ...]
    fn: Callable[..., Any]
    shape: CallbackShape
    config: StepConfig
    rollback: NodeRollback | None
    doc: str | None
    patch: str | None = None
    """Added under this patch: runs only if ``step.patched(patch)`` (else outputs nothing)."""

    def to_json(self, level: int) -> dict[str, Any]:
        data = _common_json(self, "step", level)
        data.update(self.config.to_json())
        rollback = self.rollback
        data["rollback"] = getattr(rollback.fn, "__name__", "rollback") if rollback else None
        if rollback is not None and rollback.config is not None:
            data["rollback_config"] = rollback.config.to_json()
        return data


@dataclass(frozen=True)
class ChildNode:
    """A child workflow: started once, and with ``wait`` awaited until it ends."""

    name: str
    depends_on: tuple[str, ...]
    workflow: str
    params: Any
    """The child's params, a function of the context returning them, or None (the context)."""
    wait: bool
    timeout: float
    doc: str | None
    patch: str | None = None
    """As :attr:`StepNode.patch`."""

    def to_json(self, level: int) -> dict[str, Any]:
        data = _common_json(self, "child", level)
        data.update(workflow=self.workflow, wait=self.wait, timeout=self.timeout)
        return data


Node = StepNode | ChildNode
"""A step of a DAG."""


def _common_json(node: Node, kind: str, level: int) -> dict[str, Any]:
    return {
        "name": node.name,
        "type": kind,
        "depends_on": list(node.depends_on),
        "level": level,
        "doc": node.doc,
        **({"patch": node.patch} if node.patch is not None else {}),
    }


def check_output(node: str, value: Any) -> dict[str, Any] | None:
    """A node's output as a dict (or None), or :class:`DagContextError`."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    raise DagContextError(
        f"step {node!r} returned {type(value).__name__} {value!r:.80}; a DAG step returns a dict "
        "(merged into the context of the steps after it) or None"
    )


# -- the runner -----------------------------------------------------------------------------------


def _copy(value: dict[str, Any]) -> dict[str, Any]:
    """A private deep copy of the context, so no step can change what another one sees (plain
    JSON through orjson, the quickest copy; typed values, docs/data.md, by ``deepcopy``)."""
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(value, option=PLAIN_ONLY))
    except TypeError:
        return copy.deepcopy(value)
    return copied if copied == value else copy.deepcopy(value)


class Runner:
    """One activation's walk over the graph.

    Concurrency is deterministic where it matters for replay: every node is one step named after
    it (so occurrence counts are always 1), and nodes are started in topological order as soon
    as their dependencies are done, at most ``max_parallel`` at a time. Successors are started
    in the same event-loop turn as the step that unblocks them, so the engine never sees the
    graph idle between two nodes.

    When a node fails for good, no new node starts; the nodes already running finish (their
    results are recorded, so their rollbacks run), then the failure is raised. If several fail,
    the instance error is the one of the failed node first in topological order.
    """

    def __init__(
        self,
        what: str,
        nodes: Mapping[str, Node],
        plan: Plan,
        max_parallel: int | None,
        event: WorkflowEvent,
        step: WorkflowStep,
        params: dict[str, Any],
    ) -> None:
        self.what = what
        self.nodes = nodes
        self.plan = plan
        self.event = event
        self.step = step
        self.params = params
        self.limit = max_parallel or len(plan.order)
        self.waiting = {name: len(plan.deps[name]) for name in plan.order}
        self.ready = [plan.index[name] for name in plan.order if not plan.deps[name]]
        heapq.heapify(self.ready)
        self.running: dict[str, asyncio.Task[None]] = {}
        self.outputs: dict[str, dict[str, Any] | None] = {}
        self.errors: dict[str, Exception] = {}
        self.signals: dict[str, BaseException] = {}
        self.done: asyncio.Future[None] | None = None

    async def run(self) -> dict[str, Any]:
        self.done = asyncio.get_running_loop().create_future()
        self._launch()
        try:
            if self.running:
                await self.done
        finally:
            await self._cancel_running()
        self._raise_outcome()
        return self._context(self.plan.order, include_params=True)

    def _raise_outcome(self) -> None:
        by_order = self.plan.index.__getitem__
        signals = sorted(self.signals, key=by_order)
        # Engine control flow (termination, fatal errors, a lost lease) wins, then a node's
        # failure, then suspension (a sibling waiting for a retry is not worth waiting for).
        for name in signals:
            if not isinstance(self.signals[name], SuspendInstance):
                raise self.signals[name]
        if self.errors:
            raise self.errors[min(self.errors, key=by_order)]
        if signals:
            raise self.signals[signals[0]]
        missing = [name for name in self.plan.order if name not in self.outputs]
        if missing:  # pragma: no cover - a validated graph always drains
            raise RuntimeError(f"{self.what}: steps never became ready: {missing}")

    async def _cancel_running(self) -> None:
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _launch(self) -> None:
        while self.ready and not (self.errors or self.signals) and len(self.running) < self.limit:
            name = self.plan.order[heapq.heappop(self.ready)]
            self.running[name] = asyncio.get_running_loop().create_task(
                self._node(name), name=f"stepline-{self.event.instance_id}-{name}"
            )

    async def _node(self, name: str) -> None:
        try:
            output = await self._execute(name)
        except asyncio.CancelledError:
            self.running.pop(name, None)
            raise
        except Exception as exc:
            self.errors[name] = exc
        except BaseException as exc:  # engine signals: suspension, termination, lost lease
            self.signals[name] = exc
        else:
            self._complete(name, output)
        self.running.pop(name, None)
        self._launch()
        if not self.running and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def _complete(self, name: str, output: Any) -> None:
        try:
            checked = check_output(name, output)
        except DagContextError as exc:
            self.errors[name] = exc
            return
        if checked:
            for other, theirs in self.outputs.items():
                if theirs and self.plan.concurrent(name, other):
                    shared = sorted(set(checked) & set(theirs))
                    if shared:
                        first, second = sorted((name, other), key=self.plan.index.__getitem__)
                        self.errors[second] = DagContextError(
                            f"steps {first!r} and {second!r} may run at the same time (neither "
                            f"depends on the other) and both return the key {shared[0]!r}; "
                            "rename one of the keys or make one step depend on the other"
                        )
                        return
        self.outputs[name] = checked
        for child in self.plan.dependents[name]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0:
                heapq.heappush(self.ready, self.plan.index[child])

    def _context(self, names: Sequence[str], *, include_params: bool = True) -> dict[str, Any]:
        merged: dict[str, Any] = dict(self.params) if include_params else {}
        for dep in names:
            output = self.outputs.get(dep)
            if output:
                merged.update(output)
        return _copy(merged)

    async def _execute(self, name: str) -> Any:
        patch = self.nodes[name].patch
        if patch is not None and not self.step.patched(patch):
            return None  # an instance that went past this point without the node
        match self.nodes[name]:
            case ChildNode() as child:
                return await self._run_child(child)
            case StepNode() as node:
                return await self.step.do(
                    name,
                    node.config,
                    self._callback(node),
                    rollback=self._rollback(node.name, node.rollback) if node.rollback else None,
                    rollback_config=node.rollback.config if node.rollback else None,
                )

    def _callback(self, node: StepNode) -> Callable[[StepContext], Awaitable[Any]]:
        fn, shape = node.fn, node.shape
        ancestors = self.plan.ancestor_order[node.name]

        async def call(info: StepContext) -> Any:
            view = MappingProxyType(self._context(ancestors))
            result = await invoke(fn, shape.is_async, (view, info)[: shape.arity])
            return check_output(node.name, result)

        return call

    def _rollback(
        self, name: str, rollback: NodeRollback
    ) -> Callable[[BaseException | None, Any, StepContext], Awaitable[Any]]:
        fn, shape = rollback.fn, rollback.shape
        ancestors = self.plan.ancestor_order[name]

        async def undo(error: BaseException | None, output: Any, info: StepContext) -> Any:
            ctx = self._context(ancestors)
            if isinstance(output, Mapping):
                ctx.update(output)
            args = (MappingProxyType(ctx), error, info)[: shape.arity]
            return await invoke(fn, shape.is_async, args)

        return undo

    async def _run_child(self, node: ChildNode) -> dict[str, Any]:
        ctx = self._context(self.plan.ancestor_order[node.name])
        params = node.params(MappingProxyType(ctx)) if callable(node.params) else node.params
        if params is None:
            params = ctx
        child_id = child_instance_id(self.event.instance_id, node.name)
        await self.step.start_workflow(node.workflow, params, id=child_id)
        if not node.wait:
            return {node.name: child_id}
        output = await self.step.wait_for_workflow(node.workflow, child_id, timeout=node.timeout)
        return {node.name: output}
