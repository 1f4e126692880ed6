"""Defining workflows: the :class:`Workflow` base class, the ``@workflow`` decorator, events."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Generic

from typing_extensions import TypeVar

from ._shown import shown
from ._source_steps import literal_patches, static_steps, step_graph
from .durations import Duration, parse_duration
from .errors import DefinitionError
from .limits import WORKFLOW_LIMIT_KEYS, Rate, WorkflowLimits, workflow_limits
from .records import DEFAULT_VERSION
from .retention import Retention, parse_retention
from .schedule import Schedule, as_schedule
from .step import WorkflowStep, validate_patch_id
from .values import convertible

_Payload = TypeVar("_Payload", default=Any)
_NAME_RE = re.compile(r"^[a-zA-Z0-9_][a-zA-Z0-9_-]{0,99}$")
_VERSION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,49}$")

RateLimit = Rate | str | tuple[int, Duration] | list[Any]
"""A rate as declared: ``"100/minute"``, ``"5 per 10 seconds"``, ``(100, "1 minute")``."""


@dataclass(frozen=True)
class WorkflowEvent(Generic[_Payload]):
    """What ``run()`` receives: the params it was created with, and where it runs.

    ``payload`` is the instance's params, or ``{}`` when it was created without any (no params,
    ``params=None`` or a JSON ``null``), so ``event.payload.get("x")`` always works. Declared as
    ``event: WorkflowEvent[Order]``, the payload is converted into an ``Order`` (docs/data.md).
    """

    payload: _Payload
    timestamp: datetime
    instance_id: str
    workflow_name: str
    schedule: dict[str, Any] | None = None
    """For an instance a cron schedule created: ``{"cron": ..., "scheduled_time": datetime}``
    (the tick, in UTC); None otherwise."""

    def __post_init__(self) -> None:
        if self.payload is None:
            object.__setattr__(self, "payload", {})

    @property
    def params(self) -> _Payload:
        """Alias of ``payload`` (Cloudflare's name for it)."""
        return self.payload


class Workflow:
    """Base class of code-first workflows. Override :meth:`run`.

    ``name`` defaults to the class name in kebab-case (``SendWelcome`` -> ``send-welcome``).
    ``run`` is called from the top on every activation and replays recorded steps, so it must be
    deterministic: branch only on step results, ``event.payload`` and other recorded values.

    Flow control (each None or empty for no limit; see :class:`~stepline.limits.WorkflowLimits`)
    is declared with the attributes below, on the class or on a Pipeline or Dag object; a bad
    value raises :class:`DefinitionError` when the workflow is registered.
    """

    name: str = ""
    version: str = DEFAULT_VERSION
    """The version of this code (docs/versioning.md): an instance records the version it
    started under and only code of that version runs it. Several classes may share a ``name``
    with different versions; a create uses the newest unless told otherwise."""
    schedules: ClassVar[Iterable[str | Schedule]] = ()
    """Cron schedules that create instances: cron strings or :class:`~stepline.Schedule`."""
    patches: ClassVar[Iterable[str]] = ()
    """Patch ids this code has beyond those its source names as literals
    (``step.patched("id")``, ``step.deprecate_patch("id")``, found at registration): ids
    computed at run time. A worker claims an instance that took a patch only if its code has
    that patch (docs/versioning.md, "Patches in a rolling deploy")."""
    concurrency: int | None = None
    """Instances running at once across every worker."""
    worker_concurrency: int | None = None
    """Instances running at once in one worker process."""
    rate_limit: RateLimit | None = None
    """Instances starting per period, across every worker: ``"100/minute"``,
    ``(100, "1 minute")``."""
    key_concurrency: int | None = None
    """Instances of one key (``create(key=...)``) running at once."""
    limits: Iterable[str] = ()
    """Names of shared limits (``[[limits]]`` in stepline.toml, ``Engine(limits=...)``) that its
    instances also count toward."""
    retention: ClassVar[Mapping[str, Duration] | None] = None
    """How long finished instances are kept, by outcome: ``{"complete": "7 days", "errored":
    "30 days", "terminated": "1 day"}`` (outcomes not named: the workers' ``retention``)."""
    timeout: Duration | None = None
    """Each instance's deadline, from its creation (``"2 hours"``): past it the instance errors
    with :class:`~stepline.WorkflowTimeoutError` after its rollbacks ran
    (``create(timeout=...)`` overrides it; docs/operations.md, "Deadlines")."""

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.run() is not implemented")

    def validate(self) -> None:
        """Check the definition; raise :class:`DefinitionError`. Called when an object (Pipeline,
        Dag) is registered, so definition errors surface then and not at run time."""

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """A JSON description of the definition shown by ``stepline workflows describe``.

        ``steps`` lists the steps found in the source of ``run`` (calls such as
        ``step.do("name", ...)`` with a literal name), in source order: what can be known without
        running it. Steps named at run time are not listed.
        """
        run = getattr(cls, "__wrapped__", None) or cls.run
        steps = static_steps(run)
        described: dict[str, Any] = {
            "kind": "workflow",
            "doc": (cls.__doc__ or "").strip() or None,
            "steps": steps,
        }
        graph = step_graph(steps)
        if graph is not None:
            described.update(graph)  # decorated steps with dependencies: drawn as a DAG
        return described


RunFunction = Callable[[WorkflowEvent, WorkflowStep], Awaitable[Any]]


def kebab_case(name: str) -> str:
    """``SendWelcomeEmail`` -> ``send-welcome-email``; ``send_welcome`` -> ``send-welcome``."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name)
    return text.replace("_", "-").lower()


def is_valid_name(name: object) -> bool:
    """Whether ``name`` may be a workflow name, an instance id or an event type."""
    return isinstance(name, str) and _NAME_RE.fullmatch(name) is not None


def validate_name(name: str, *, what: str) -> str:
    """Workflow names, instance ids and event types share one pattern."""
    if not is_valid_name(name):
        raise ValueError(
            f"invalid {what} {shown(name)}: use 1-100 ASCII letters, digits, '_' or '-', "
            "not starting with '-'"
        )
    return name


def validate_version(version: object, *, what: str = "version") -> str:
    """A version is 1-50 ASCII letters, digits, '_', '.', '+' or '-', starting with a letter,
    digit or '_' (``"2"``, ``"2024.06"``, ``"v3-beta"``): else ``ValueError`` naming it."""
    if not isinstance(version, str) or _VERSION_RE.fullmatch(version) is None:
        raise ValueError(
            f"invalid {what} {shown(version)}: use 1-50 ASCII letters, digits, '_', '.', '+' or "
            "'-', starting with a letter, digit or '_'"
        )
    return version


def version_order(version: str) -> tuple[tuple[int, int | str], ...]:
    """The order of versions, newest last: dotted parts compared as numbers where both are
    (``"10"`` after ``"9"``, ``"2.10"`` after ``"2.9"``), as text otherwise, numbers first."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in version.split("."))


def workflow(
    name: str | None = None,
    *,
    version: str = DEFAULT_VERSION,
    schedules: Iterable[str | Schedule] = (),
    concurrency: int | None = None,
    worker_concurrency: int | None = None,
    rate_limit: RateLimit | None = None,
    key_concurrency: int | None = None,
    limits: Iterable[str] = (),
    retention: Mapping[str, Duration] | None = None,
    timeout: Duration | None = None,
    patches: Iterable[str] = (),
) -> Callable[[RunFunction], type[Workflow]]:
    """Decorator form: ``@workflow(name="greeting")`` on ``async def fn(event, step)``.

    Returns a :class:`Workflow` subclass, usable everywhere a workflow class is. ``version``:
    :attr:`Workflow.version`. ``schedules``:
    cron strings or :class:`~stepline.Schedule` objects (see :attr:`Workflow.schedules`). The
    flow control arguments are the :class:`Workflow` attributes of the same names, checked here;
    ``patches``: :attr:`Workflow.patches`.
    """
    declared = tuple(schedules)
    settings: dict[str, Any] = {
        "concurrency": concurrency,
        "worker_concurrency": worker_concurrency,
        "rate_limit": rate_limit,
        "key_concurrency": key_concurrency,
        "limits": limits,
    }
    _timeout(timeout, f"@workflow({name or ''})")

    def decorate(fn: RunFunction) -> type[Workflow]:
        if not callable(fn):
            raise DefinitionError(f"@workflow decorates an async function, not {fn!r}")
        label = getattr(fn, "__qualname__", repr(fn))
        _check_run(fn, f"@workflow function {label!r}", ("event", "step"))
        wf_name = validate_name(name or kebab_case(fn.__name__), what="workflow name")
        workflow_limits(settings, what=f"workflow {wf_name!r} ({label})")
        try:
            validate_version(version, what=f"version of workflow {wf_name!r} ({label})")
        except ValueError as exc:
            raise DefinitionError(str(exc)) from None
        _retention(retention, f"workflow {wf_name!r} ({label})")

        async def run(self: Workflow, event: WorkflowEvent[Any], step: WorkflowStep) -> Any:
            return await fn(event, step)

        cls = type(
            fn.__name__,
            (Workflow,),
            {
                "name": wf_name,
                "version": version,
                "schedules": declared,
                "retention": retention,
                **settings,
                "timeout": timeout,
                "patches": tuple(patches),
                "run": run,
                "__doc__": fn.__doc__,
                "__module__": fn.__module__,
                "__qualname__": fn.__qualname__,
                "__wrapped__": fn,
            },
        )
        return cls

    return decorate


@dataclass(frozen=True)
class WorkflowDefinition:
    """A workflow as the engine knows it."""

    name: str
    cls: type[Workflow]
    schedules: tuple[Schedule, ...] = field(default=(), kw_only=True)
    """The declared schedules, each with its name set (:meth:`Schedule.named`)."""
    limits: WorkflowLimits = field(default_factory=WorkflowLimits, kw_only=True)
    """Its flow control, checked (:func:`~stepline.limits.workflow_limits`)."""
    version: str = field(default=DEFAULT_VERSION, kw_only=True)
    """The version of the code (:attr:`Workflow.version`)."""
    retention: Retention | None = field(default=None, kw_only=True, hash=False)
    """How long its finished instances are kept, seconds by outcome (:mod:`stepline.retention`)."""
    timeout: float | None = field(default=None, kw_only=True)
    """Its instances' deadline in seconds from their creation (:attr:`Workflow.timeout`)."""
    patches: frozenset[str] = field(default=frozenset(), kw_only=True)
    """The patch ids the code has: named in its source as literals, declared
    (:attr:`Workflow.patches`) or, for a Pipeline or Dag, its nodes' ``patch``. The worker
    claims only instances whose patches are among them."""

    @property
    def class_name(self) -> str:
        target = getattr(self.cls, "__wrapped__", self.cls)
        return f"{target.__module__}:{target.__qualname__}"

    def make(self) -> Workflow:
        return self.cls()

    def describe(self) -> dict[str, Any]:
        return self.cls.describe()


def _check_run(fn: Any, what: str, args: tuple[str, ...]) -> None:
    """A run function must be ``async def`` and accept ``args``: else :class:`DefinitionError`."""
    shown = ", ".join(args)
    # A decorator made with functools.wraps around an async function counts as async.
    if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(inspect.unwrap(fn))):
        raise DefinitionError(
            f"{what} must be an async function: write `async def` (it was {fn!r})"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args)
    except TypeError as exc:
        raise DefinitionError(
            f"{what} must accept ({shown}), but its signature is {signature}: {exc}"
        ) from None


def check_workflow_class(cls: type[Workflow]) -> None:
    """Reject a workflow class whose ``run`` is missing, not ``async def`` or of the wrong
    signature (it would otherwise fail only when an instance runs)."""
    what = f"workflow class {cls.__module__}.{cls.__qualname__}"
    run = getattr(cls, "run", None)
    if run is None or run is Workflow.run:
        raise DefinitionError(f"{what} has no run(): define `async def run(self, event, step)`")
    _check_run(run, f"{what}: run()", ("self", "event", "step"))


def definition_of(obj: Any) -> WorkflowDefinition:
    """Accept a :class:`Workflow` subclass or instance (pipelines and DAGs are instances)."""
    if isinstance(obj, type) and issubclass(obj, Workflow):
        check_workflow_class(obj)
        name = validate_name(
            obj.__dict__.get("name") or kebab_case(obj.__name__), what="workflow name"
        )
        schedules = _schedules(obj.schedules, name, f"workflow class {obj.__qualname__}")
        what = f"workflow {name!r} ({obj.__qualname__})"
        limits = _limits(obj, what)
        retention = _retention(obj.retention, what)
        version = _version(obj, what)
        return WorkflowDefinition(
            name,
            obj,
            schedules=schedules,
            limits=limits,
            retention=retention,
            timeout=_timeout(obj.timeout, what),
            version=version,
            patches=_patches(obj, what),
        )
    if isinstance(obj, Workflow):
        check_workflow_class(type(obj))
        obj.validate()
        name = validate_name(obj.name or kebab_case(type(obj).__name__), what="workflow name")
        what = f"workflow {name!r} ({type(obj).__qualname__})"
        schedules = _schedules(obj.schedules, name, what)
        return _InstanceDefinition(
            name,
            type(obj),
            obj,
            schedules=schedules,
            limits=_limits(obj, what),
            version=_version(obj, what),
            retention=_retention(obj.retention, what),
            timeout=_timeout(obj.timeout, what),
            patches=_patches(obj, what),
        )
    raise DefinitionError(
        f"{obj!r} is not a workflow: pass a Workflow subclass, a @workflow function, "
        "a Pipeline or a Dag"
    )


def _version(obj: Any, what: str) -> str:
    """The version a class or object declares, checked."""
    try:
        return validate_version(getattr(obj, "version", DEFAULT_VERSION), what=f"version of {what}")
    except ValueError as exc:
        raise DefinitionError(str(exc)) from None


def _patches(obj: Any, what: str) -> frozenset[str]:
    """The patch ids a class or object has: declared in ``patches`` (checked), named as
    literals in the source of its classes (not stepline's own) or of the function a
    ``@workflow`` class wraps, and its graph's nodes' (a Pipeline or Dag)."""
    declared = getattr(obj, "patches", ())
    if isinstance(declared, str) or not isinstance(declared, Iterable):
        raise DefinitionError(f"{what}: patches must be a list of patch ids, not {declared!r}")
    found: set[str] = set()
    for value in declared:
        try:
            found.add(validate_patch_id(value))
        except ValueError as exc:
            raise DefinitionError(f"{what}: patches: {exc}") from None
    cls = obj if isinstance(obj, type) else type(obj)
    sources: list[Any] = [c for c in cls.__mro__ if c.__module__.split(".")[0] != "stepline"]
    sources.append(getattr(cls, "__wrapped__", None))
    for source in sources:
        if source is not None and source is not object:
            found |= literal_patches(source)
    if not isinstance(obj, type):
        nodes = obj.describe().get("nodes") or ()
        found |= {node["patch"] for node in nodes if isinstance(node.get("patch"), str)}
    return frozenset(_valid_patch_ids(found))


def _valid_patch_ids(ids: Iterable[str]) -> set[str]:
    """Of ``ids``, those a patch may have (a literal that is not fails where it is called)."""
    valid = set()
    for value in ids:
        try:
            valid.add(validate_patch_id(value))
        except ValueError:
            continue
    return valid


def _limits(obj: Any, what: str) -> WorkflowLimits:
    """The flow control a class or object declares (its attributes, inherited ones included)."""
    return workflow_limits({key: getattr(obj, key) for key in WORKFLOW_LIMIT_KEYS}, what=what)


def _retention(declared: Any, what: str) -> Retention | None:
    """The declared retention checked; a bad one raises :class:`DefinitionError` naming it."""
    try:
        return parse_retention(declared, where=f"retention of {what}")
    except ValueError as exc:
        raise DefinitionError(str(exc)) from None


def _timeout(value: Any, what: str) -> float | None:
    """A declared ``timeout`` in seconds (None: none); else :class:`DefinitionError`."""
    if value is None:
        return None
    try:
        return parse_duration(value, what="timeout")
    except (TypeError, ValueError) as exc:
        raise DefinitionError(f"{what}: {exc}") from None


def _schedules(declared: Any, workflow: str, what: str) -> tuple[Schedule, ...]:
    """The declared schedules made :class:`Schedule` objects and named; errors name ``what``."""
    if isinstance(declared, (str, Schedule)) or not isinstance(declared, Iterable):
        raise DefinitionError(
            f"{what}: schedules must be a list of cron strings or Schedules, not {declared!r}"
        )
    found: dict[str, Schedule] = {}
    for index, value in enumerate(declared):
        schedule = as_schedule(value, where=f"{what}: schedules[{index}]").named(workflow)
        if schedule.key in found:
            raise DefinitionError(
                f"{what}: two schedules are named {schedule.key!r} ({found[schedule.key].cron!r}"
                f" and {schedule.cron!r}); give one of them another name"
            )
        found[schedule.key] = schedule
    return tuple(found.values())


@dataclass(frozen=True)
class _InstanceDefinition(WorkflowDefinition):
    """A workflow given as an object (Pipeline, Dag): every activation uses that object."""

    instance: Workflow

    @property
    def class_name(self) -> str:
        return f"{type(self.instance).__module__}:{type(self.instance).__qualname__}"

    def make(self) -> Workflow:
        return self.instance

    def describe(self) -> dict[str, Any]:
        return self.instance.describe()


def check_schedule_names(
    registered: Iterable[WorkflowDefinition], definition: WorkflowDefinition
) -> None:
    """Schedule names are unique across the workflows an engine serves: else
    :class:`DefinitionError` naming both workflows."""
    owners = {s.key: d.name for d in registered if d.name != definition.name for s in d.schedules}
    for schedule in definition.schedules:
        if schedule.key in owners:
            raise DefinitionError(
                f"workflows {owners[schedule.key]!r} and {definition.name!r} both declare a "
                f"schedule named {schedule.key!r}; schedule names must be unique"
            )


def payload_type(workflow: Workflow | type[Workflow]) -> Any:
    """The type ``run()`` declares for its event's payload (``event: WorkflowEvent[Order]``),
    if payloads are converted into it; else None."""
    cls = workflow if isinstance(workflow, type) else type(workflow)
    run = cls.run
    found = _PAYLOAD_TYPES.get(run, _UNSEEN)
    if found is _UNSEEN:
        found = _payload_type(getattr(cls, "__wrapped__", None) or run)
        _PAYLOAD_TYPES[run] = found
    return found


def _payload_type(fn: Any) -> Any:
    try:
        parameters = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    names = [p for p in parameters if p != "self"]
    if not names:
        return None
    event = names[0]
    try:
        hint = typing.get_type_hints(fn).get(event)
    except Exception:
        return None
    args = typing.get_args(hint) if typing.get_origin(hint) is WorkflowEvent else ()
    return args[0] if args and convertible(args[0]) else None


_UNSEEN: Any = object()
_PAYLOAD_TYPES: dict[Any, Any] = {}
