"""Declarative workflows: :class:`Dag` (steps with dependencies, run in parallel when ready) and
:class:`Pipeline` (each step after the one before), built on the durable core.

A ``Dag`` or ``Pipeline`` *is* a :class:`~stepline.Workflow`: its ``run()`` drives the graph with
one ``step.do`` per node (named after the node), so every node is recorded, retried, timed out,
rolled back and replayed by the engine exactly like the steps of a code-first workflow. After a
crash, the nodes already recorded are not run again.

Context: each node receives a read-only mapping of the instance params merged with the outputs
of the nodes it depends on, directly or not, in topological order (among nodes ready at the same
time, declaration order); a later node's keys replace an earlier one's. Two nodes that may run at
the same time (neither depends on the other) must not return the same key: that ends the
instance with :class:`DagContextError` naming both nodes and the key.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar, overload

from ._callbacks import CallbackShape, is_async, positional_arity
from ._dagrun import ChildNode, DagContextError, Node, NodeRollback, Runner, StepNode
from ._graph import Plan, build_plan, format_graph, node_states
from .config import RetryConfig, StepConfig, parse_step_config
from .durations import Duration, parse_duration
from .errors import DefinitionError
from .step import WorkflowStep, validate_patch_id
from .workflow import Workflow, WorkflowEvent, validate_name

__all__ = ["Dag", "DagContextError", "Graph", "Pipeline", "format_graph", "node_states"]

F = TypeVar("F", bound=Callable[..., Any])
Context = Mapping[str, Any]
ChildParams = Callable[[Context], Any]


@dataclass(frozen=True)
class Graph:
    """The shape of a DAG: node names in declaration order, edges ``(dependency, node)``, and the
    levels (level n holds the nodes whose longest chain of dependencies has n nodes)."""

    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    levels: tuple[tuple[str, ...], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": list(self.nodes),
            "edges": [list(edge) for edge in self.edges],
            "levels": [list(level) for level in self.levels],
        }


def _shape(fn: Callable[..., Any], what: str, allowed: tuple[int, ...]) -> CallbackShape:
    """How to call a node's function or rollback: how many of its arguments (context, then the
    others) to pass: its required ones, and at least the context if it takes any."""
    count = positional_arity(fn, fill=1, varargs=allowed[-1], unknown=allowed[-1])
    if count not in allowed:
        counts = " or ".join(str(n) for n in allowed)
        raise DefinitionError(
            f"{what} takes {count} required positional arguments; it must take {counts}"
        )
    return CallbackShape(is_async(fn), count)


def _doc_line(fn: Callable[..., Any]) -> str | None:
    doc = inspect.getdoc(fn)
    return doc.strip().splitlines()[0] if doc else None


class _GraphWorkflow(Workflow):
    """What :class:`Dag` and :class:`Pipeline` share: nodes, validation, description, run()."""

    kind = "dag"

    def __init__(
        self,
        name: str,
        *,
        max_parallel: int | None = None,
        output: Callable[[Context], Any] | None = None,
        doc: str | None = None,
    ) -> None:
        try:
            self.name = validate_name(name, what=f"{self.kind} name")
        except ValueError as exc:
            raise DefinitionError(str(exc)) from None
        if max_parallel is not None and (
            isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1
        ):
            raise DefinitionError(
                f"{self.kind} {name!r}: max_parallel must be a whole number >= 1 or None, "
                f"got {max_parallel!r}"
            )
        if output is not None and not callable(output):
            raise DefinitionError(f"{self.kind} {name!r}: output must be a function of the context")
        self.max_parallel = max_parallel
        self.output = output
        self.doc = doc
        self._nodes: dict[str, Node] = {}
        self._plan: Plan | None = None
        self._frozen = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {', '.join(self._nodes) or 'no steps'}>"

    @property
    def _what(self) -> str:
        return f"{self.kind} {self.name!r}"

    # -- definition ------------------------------------------------------------------------------

    def _node_name(self, name: str | None, fn: Callable[..., Any] | None) -> str:
        if name is None:
            name = getattr(fn, "__name__", None)
            if not isinstance(name, str) or name == "<lambda>":
                raise DefinitionError(f"{self._what}: give the step a name with name='...'")
        try:
            validate_name(name, what="step name")
        except ValueError as exc:
            raise DefinitionError(f"{self._what}: {exc}") from None
        if name in self._nodes:
            raise DefinitionError(f"{self._what}: duplicate step name {name!r}")
        return name

    def _check_depends_on(self, name: str, depends_on: Sequence[str]) -> tuple[str, ...]:
        if isinstance(depends_on, str) or not isinstance(depends_on, Sequence):
            raise DefinitionError(
                f"{self._what}: step {name!r}: depends_on must be a list of step names, "
                f"e.g. depends_on=[{depends_on!r}]"
            )
        deps = tuple(depends_on)
        for dep in deps:
            if not isinstance(dep, str):
                raise DefinitionError(
                    f"{self._what}: step {name!r}: depends_on holds {dep!r}, not a step name"
                )
        if name in deps:
            raise DefinitionError(f"{self._what} has a cycle: {name} -> {name}")
        if len(set(deps)) != len(deps):
            raise DefinitionError(f"{self._what}: step {name!r} lists a dependency twice")
        return deps

    def _add(self, node: Node) -> None:
        if self._frozen:
            raise DefinitionError(
                f"{self._what} is already registered with an engine; define every step before "
                "registering it"
            )
        self._nodes[node.name] = node
        self._plan = None

    def _add_step(
        self,
        fn: Callable[..., Any],
        depends_on: Sequence[str],
        retries: RetryConfig | Mapping[str, Any] | None,
        timeout: Duration | None,
        rollback: Callable[..., Any] | None,
        rollback_config: StepConfig | Mapping[str, Any] | None,
        name: str | None,
        patch: str | None = None,
    ) -> None:
        if not callable(fn):
            raise DefinitionError(f"{self._what}: a step must be a function, not {fn!r}")
        node_name = self._node_name(name, fn)
        what = f"{self._what}: step {node_name!r}"
        deps = self._check_depends_on(node_name, depends_on)
        raw: dict[str, Any] = {}
        if retries is not None:
            raw["retries"] = retries
        if timeout is not None:
            raw["timeout"] = timeout
        try:
            config = parse_step_config(raw)
            rb_config = parse_step_config(rollback_config) if rollback_config is not None else None
        except ValueError as exc:
            raise DefinitionError(f"{what}: {exc}") from None
        if rollback is not None and not callable(rollback):
            raise DefinitionError(f"{what}: rollback must be a function, not {rollback!r}")
        if rollback is None and rollback_config is not None:
            raise DefinitionError(f"{what}: rollback_config is set but there is no rollback")
        undo = None
        if rollback is not None:
            shape = _shape(rollback, f"{what}: the rollback", (1, 2, 3))
            undo = NodeRollback(rollback, shape, rb_config)
        self._add(
            StepNode(
                name=node_name,
                depends_on=deps,
                fn=fn,
                shape=_shape(fn, f"{what}: the function", (0, 1, 2)),
                config=config,
                rollback=undo,
                doc=_doc_line(fn),
                patch=self._patch(what, patch),
            )
        )

    @staticmethod
    def _patch(what: str, patch: str | None) -> str | None:
        """A node's ``patch``, checked: None or a valid patch id."""
        try:
            return None if patch is None else validate_patch_id(patch)
        except ValueError as exc:
            raise DefinitionError(f"{what}: {exc}") from None

    def _add_child(
        self,
        name: str,
        workflow: str,
        depends_on: Sequence[str],
        params: ChildParams | Any,
        wait: bool,
        timeout: Duration,
        patch: str | None = None,
    ) -> None:
        node_name = self._node_name(name, None)
        what = f"{self._what}: step {node_name!r}"
        try:
            validate_name(workflow, what="workflow name")
            seconds = parse_duration(
                timeout, what="timeout", allow_zero=True
            )  # as wait_for_workflow
        except ValueError as exc:
            raise DefinitionError(f"{what}: {exc}") from None
        self._add(
            ChildNode(
                name=node_name,
                depends_on=self._check_depends_on(node_name, depends_on),
                workflow=workflow,
                params=params,
                wait=wait,
                timeout=seconds,
                doc=f"{'runs' if wait else 'starts'} workflow {workflow}",
                patch=self._patch(what, patch),
            )
        )

    # -- shape -----------------------------------------------------------------------------------

    def validate(self) -> None:
        """Check the whole graph (raise :class:`~stepline.DefinitionError`) and freeze it.

        Called when the workflow is registered with an engine; no step may be added afterwards.
        """
        self.plan()
        self._frozen = True

    def plan(self) -> Plan:
        """The validated graph (cached until a step is added)."""
        if self._plan is None:
            self._plan = build_plan(
                self._what,
                list(self._nodes),
                {n: node.depends_on for n, node in self._nodes.items()},
            )
        return self._plan

    def graph(self) -> Graph:
        """Nodes, edges and levels (raises :class:`~stepline.DefinitionError` if invalid)."""
        plan = self.plan()
        return Graph(
            nodes=tuple(self._nodes),
            edges=tuple((dep, name) for name in self._nodes for dep in plan.deps[name]),
            levels=plan.levels,
        )

    def describe(self) -> dict[str, Any]:  # type: ignore[override]  # per-object, not per-class
        """The JSON definition stored in the workflows table: the graph with every node's
        configuration. :func:`format_graph` turns it into text."""
        plan = self.plan()
        level_of = {name: i for i, level in enumerate(plan.levels) for name in level}
        graph = self.graph().to_json()
        return {
            "kind": self.kind,
            "doc": self.doc,
            "max_parallel": self.max_parallel,
            "nodes": [node.to_json(level_of[name]) for name, node in self._nodes.items()],
            "edges": graph["edges"],
            "levels": graph["levels"],
            "order": list(plan.order),
        }

    def format(self) -> str:
        """The graph as text (what ``stepline workflows describe NAME`` prints)."""
        return format_graph(self.describe())

    # -- running ---------------------------------------------------------------------------------

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        """Drive the graph: one durable ``step.do`` per node, ready nodes concurrently."""
        params = event.payload if event.payload is not None else {}
        if not isinstance(params, dict):
            raise DagContextError(
                f"the params of a {self.kind} instance must be a JSON object (or null), "
                f"got {type(params).__name__}; create it with params={{...}}"
            )
        runner = Runner(
            self._what, self._nodes, self.plan(), self.max_parallel, event, step, params
        )
        context = await runner.run()
        if self.output is None:
            return context
        return self.output(MappingProxyType(context))


class Dag(_GraphWorkflow):
    """A workflow whose steps declare what they depend on; ready steps run concurrently.

    ``Dag("report", max_parallel=4)`` bounds how many steps run at once (default: no bound).
    The instance's output is the final context (params and every step's output), or what
    ``output(ctx)`` returns when given (keep it small: it is stored). Steps are added with the
    :meth:`step` decorator (or :meth:`add_step`) and child workflows with :meth:`child`.
    Register the object itself: ``Engine(workflows=[dag])``.
    """

    kind = "dag"

    @overload
    def step(self, fn: F, /) -> F: ...

    @overload
    def step(
        self,
        fn: None = None,
        /,
        *,
        depends_on: Sequence[str] = (),
        retries: RetryConfig | Mapping[str, Any] | None = None,
        timeout: Duration | None = None,
        rollback: Callable[..., Any] | None = None,
        rollback_config: StepConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        patch: str | None = None,
    ) -> Callable[[F], F]: ...

    def step(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        depends_on: Sequence[str] = (),
        retries: RetryConfig | Mapping[str, Any] | None = None,
        timeout: Duration | None = None,
        rollback: Callable[..., Any] | None = None,
        rollback_config: StepConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        patch: str | None = None,
    ) -> Any:
        """Decorator adding a step: ``@dag.step(depends_on=["a"], retries={...}, timeout=...)``.

        The function (sync or async) takes the context (a read-only mapping), optionally
        followed by a :class:`~stepline.StepContext`, and returns a dict or None. ``rollback``
        (sync or async) is called as ``rollback(ctx)``, ``rollback(ctx, error)`` or
        ``rollback(ctx, error, info)`` (``info``: the rollback step's
        :class:`~stepline.StepContext`) with the step's context plus its own output when a
        later failure ends the instance;
        ``rollback_config`` sets its retries and timeout. Returns the function unchanged.
        """

        def decorate(func: F) -> F:
            self._add_step(
                func, depends_on, retries, timeout, rollback, rollback_config, name, patch
            )
            return func

        return decorate(fn) if fn is not None else decorate

    def add_step(
        self,
        fn: Callable[..., Any],
        *,
        depends_on: Sequence[str] = (),
        retries: RetryConfig | Mapping[str, Any] | None = None,
        timeout: Duration | None = None,
        rollback: Callable[..., Any] | None = None,
        rollback_config: StepConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        patch: str | None = None,
    ) -> Dag:
        """Non-decorator form of :meth:`step`; returns the DAG so calls can be chained."""
        self._add_step(fn, depends_on, retries, timeout, rollback, rollback_config, name, patch)
        return self

    def child(
        self,
        name: str,
        *,
        workflow: str,
        depends_on: Sequence[str] = (),
        params: ChildParams | Any = None,
        wait: bool = True,
        timeout: Duration = "24 hours",
        patch: str | None = None,
    ) -> Dag:
        """Add a step that starts an instance of ``workflow`` (once, durably) and, with ``wait``,
        waits for it to end.

        ``params`` is the child's params, or a function of the context returning them (default:
        the whole context). The child's id is ``<instance id>-<step name>``. The step's output is
        ``{name: <the child's output>}``, or ``{name: <the child's id>}`` without ``wait``. A
        child that ends errored or terminated fails the step with
        :class:`~stepline.WorkflowFailedError`; no answer within ``timeout`` fails it with
        :class:`~stepline.StepTimeoutError`.
        """
        self._add_child(name, workflow, depends_on, params, wait, timeout, patch)
        return self


class Pipeline(_GraphWorkflow):
    """A linear workflow: every step runs after the one declared before it.

    The context flows like ``{**ctx, **output}`` from step to step; after a crash the pipeline
    resumes from the last recorded step. Same step options as :class:`Dag`, minus
    ``depends_on``.
    """

    kind = "pipeline"

    def __init__(
        self,
        name: str,
        *,
        output: Callable[[Context], Any] | None = None,
        doc: str | None = None,
    ) -> None:
        super().__init__(name, max_parallel=1, output=output, doc=doc)

    def _previous(self) -> tuple[str, ...]:
        return (next(reversed(self._nodes)),) if self._nodes else ()

    @overload
    def step(self, fn: F, /) -> F: ...

    @overload
    def step(
        self,
        fn: None = None,
        /,
        *,
        retries: RetryConfig | Mapping[str, Any] | None = None,
        timeout: Duration | None = None,
        rollback: Callable[..., Any] | None = None,
        rollback_config: StepConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        patch: str | None = None,
    ) -> Callable[[F], F]: ...

    def step(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        retries: RetryConfig | Mapping[str, Any] | None = None,
        timeout: Duration | None = None,
        rollback: Callable[..., Any] | None = None,
        rollback_config: StepConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        patch: str | None = None,
    ) -> Any:
        """Decorator adding the next step; options as in :meth:`Dag.step`."""

        def decorate(func: F) -> F:
            self._add_step(
                func, self._previous(), retries, timeout, rollback, rollback_config, name, patch
            )
            return func

        return decorate(fn) if fn is not None else decorate

    def add_step(
        self,
        fn: Callable[..., Any],
        *,
        retries: RetryConfig | Mapping[str, Any] | None = None,
        timeout: Duration | None = None,
        rollback: Callable[..., Any] | None = None,
        rollback_config: StepConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        patch: str | None = None,
    ) -> Pipeline:
        """Non-decorator form of :meth:`step` (the seed's ``addStep``); chainable."""
        self._add_step(
            fn, self._previous(), retries, timeout, rollback, rollback_config, name, patch
        )
        return self

    def child(
        self,
        name: str,
        *,
        workflow: str,
        params: ChildParams | Any = None,
        wait: bool = True,
        timeout: Duration = "24 hours",
        patch: str | None = None,
    ) -> Pipeline:
        """Add a step that runs another workflow; see :meth:`Dag.child`."""
        self._add_child(name, workflow, self._previous(), params, wait, timeout, patch)
        return self
