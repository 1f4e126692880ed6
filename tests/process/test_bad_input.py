"""Bad input, table-driven: the Python API, the CLI and HTTP refuse it, and change nothing.

Each row names its front end, the input, the exact error (class, exit code, or HTTP status and
code) and text the message must contain naming what was wrong. For every refused input the rows
of the instances, steps, events and workflows tables are dumped before and after and must be
equal; CLI errors are one line on stderr (click's usage errors: the usage, a hint, the error)
and HTTP errors a JSON body, neither with a traceback. Rows that must succeed (unicode and SQL
metacharacters in every string field) read their values back equal and leave every other row as
it was. Rows run on both stores where a store is involved; the database of each store is
seeded once (an instance in every status, tests/_seeded.py) and shared by the rows.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
import math
import socket
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from stepline import (
    ConfigError,
    DefinitionError,
    Engine,
    IllegalStateError,
    Instance,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    InvalidPayloadError,
    QueryError,
    RetryConfig,
    StepConfig,
    UpdateRejectedError,
    WorkflowNotFoundError,
)
from stepline.http import create_app

from .._bad_workflows import (
    LATE,
    LEAKED,
    MIB,
    ODD,
    ODD_NAME,
    ODD_VALUE,
    BadName,
    FortnightRate,
    Messenger,
    NegativeConcurrency,
    NoRun,
    SyncRun,
    UnknownLimit,
    WrongSignature,
    bad_config,
    bad_sleep,
    bad_step_name,
    bad_wait,
    big_result,
    leaky,
    nan_output,
    nested,
    object_result,
    odd_steps,
    orphan,
    sync_decorated,
)
from .._seeded import STATES, Worlds, dump, others
from ..conftest import STORES, drain
from .test_cli import cli_env

FINISHED = ("complete", "errored", "terminated")
UNFINISHED = ("queued", "running", "waiting", "paused", "waitingForPause")
SQL_ID = "x' OR '1'='1"
# An error quotes what it refused, cut short: a 5,000-character key must not fill the screen.
MOST_CHARS = 400
HUGE = "k" * 5000


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worlds]:
    seeded = Worlds(tmp_path_factory.mktemp("seeded"))
    yield seeded
    seeded.close()


def new_id() -> str:
    return f"n-{uuid.uuid4().hex[:12]}"


def params(cases: list[Any], stores: Callable[[Any], tuple[str, ...]]) -> list[Any]:
    """``(store, case)`` pairs, PostgreSQL ones marked, xfail rows marked strictly."""
    found = []
    for case in cases:
        for store in stores(case):
            if store not in STORES:
                continue
            marks = [pytest.mark.postgres] if store == "postgres" else []
            if getattr(case, "xfail", None):
                marks.append(pytest.mark.xfail(strict=True, reason=case.xfail))
            found.append(pytest.param(store, case, id=f"{store}-{case.id}", marks=marks))
    return found


# -- the Python API ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Raises:
    """The call raises exactly ``error``, its message naming ``names``; nothing changes."""

    error: type[Exception]
    names: str


@dataclass(frozen=True)
class Errored:
    """The instance the call ran ended errored with ``error`` (a class name), its message
    naming ``names``; no other row changed."""

    error: str
    names: str


@dataclass(frozen=True)
class Succeeds:
    """The call succeeds, checks that what it stored reads back equal, and returns the
    instances it changed; no other row changed."""


@dataclass
class Ctx:
    """What a row's call gets: an open engine (the row's workflows registered, no worker)."""

    engine: Engine
    prepared: Any = None

    async def at(self, status: str) -> Instance:
        """The seeded instance in ``status``."""
        return await self.engine.get_instance(*STATES[status])

    async def run(self, params: Any = None) -> Instance:
        """A new instance of the row's workflow (the one registered), run to its end."""
        (name,) = self.engine.workflows
        instance = await self.engine.workflow(name).create(new_id(), params)
        await drain(self.engine)
        return instance


@dataclass(frozen=True)
class Api:
    id: str
    call: Callable[[Ctx], Any]
    expect: Raises | Errored | Succeeds
    workflows: tuple[Any, ...] = ()
    setup: Callable[[Ctx], Awaitable[Any]] | None = None
    xfail: str | None = None


def run(ctx: Ctx) -> Awaitable[Instance]:
    """A new instance of the row's workflow, run to its end."""
    return ctx.run()


def on(status: str, action: Callable[[Instance], Awaitable[Any]]) -> Callable[[Ctx], Any]:
    async def call(ctx: Ctx) -> Any:
        return await action(await ctx.at(status))

    return call


def create(params: Any, id: str = "n-new") -> Callable[[Ctx], Any]:
    return lambda c: c.engine.workflow("greet").create(id, params)


def bad_id(value: Any) -> Raises:
    return Raises(ValueError, f"invalid instance id {value!r}: use 1-100 ASCII letters")


async def call_leaked_step(ctx: Ctx) -> Any:
    return await LEAKED.pop(ctx.prepared.id).do("late", lambda: "ran")


async def call_step_from_task(ctx: Ctx) -> Any:
    go, task = LATE.pop(ctx.prepared.id)
    go.set()
    return await task


async def nothing_found(ctx: Ctx) -> list[Instance]:
    """A name no workflow can have (here one PostgreSQL text cannot hold) finds nothing."""
    assert (await ctx.engine.list_instances("a\x00b")).instances == []
    binding = ctx.engine.workflow("a\x00b")
    assert (await binding.list()).instances == []
    assert await binding.delete(["x"]) == 0
    assert await binding.purge() == 0
    return []


DIRECTORY = Path(__file__).parent
"""A directory that a SQLite URL may name by mistake."""


async def open_directory(ctx: Ctx, create: bool) -> None:
    async with Engine(f"sqlite:///{DIRECTORY}", worker=False, create=create):
        pass


async def odd_params(ctx: Ctx) -> list[Instance]:
    instance = await ctx.engine.workflow("greet").create("api-odd", ODD_VALUE)
    assert (await instance.record()).params == ODD_VALUE
    return [instance]


async def new_gate(ctx: Ctx) -> Instance:
    return await ctx.engine.workflow("gate").create(new_id())


async def odd_payload(ctx: Ctx) -> list[Instance]:
    await ctx.prepared.send_event("note", ODD_VALUE)
    assert [(e.type, e.payload) for e in await ctx.prepared.events()] == [("note", ODD_VALUE)]
    return [ctx.prepared]


async def odd_run(ctx: Ctx) -> list[Instance]:
    instance = await ctx.run(ODD_VALUE)
    status = await instance.status()
    assert status.status == "complete", status
    failed = f"step {ODD_NAME + ' fails-1'!r} failed: ValueError: {ODD}"
    assert status.output == {"first": ODD_VALUE, "error": failed}
    steps = await instance.steps()
    assert [(s.name, s.output) for s in steps] == [
        (ODD_NAME, ODD_VALUE),
        (ODD_NAME + " fails", None),
    ]
    assert steps[1].error == {"name": "ValueError", "message": ODD}
    await instance.restart(ODD_NAME + " fails")  # the name is looked up, not run as SQL
    assert [s.name for s in await instance.steps()] == [ODD_NAME]
    return [instance]


async def new_messenger(ctx: Ctx) -> Instance:
    instance = await ctx.engine.workflow("messenger").create(new_id())
    await drain(ctx.engine)
    return instance


def msg(action: Callable[[Instance], Awaitable[Any]]) -> Callable[[Ctx], Any]:
    """A call on the row's messenger instance (its ``setup``)."""
    return lambda ctx: action(ctx.prepared)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def predicate_raises(ctx: Ctx) -> list[Instance]:
    """An event the wait's predicate raises on does not match: it stays pending, the instance
    waits on, and the log says why."""
    instance: Instance = ctx.prepared
    collect = _Collect()
    logger = logging.getLogger("stepline.runtime")
    logger.addHandler(collect)
    try:
        await instance.send_event("ok", {"m": 1})
        await drain(ctx.engine)
    finally:
        logger.removeHandler(collect)
    assert (await instance.status()).status == "waiting"
    assert [e.consumed_by for e in await instance.events()] == [None]
    assert any("the predicate of wait_for_event 'ok-1' raised KeyError" in line
               for line in collect.lines), collect.lines  # fmt: skip
    return [instance]


ILLEGAL = [
    *[("pause", status) for status in ("paused", "waitingForPause", *FINISHED)],
    *[("resume", status) for status in ("queued", "running", "waiting", *FINISHED)],
    *[("terminate", status) for status in FINISHED],
    *[("send an event to", status) for status in FINISHED],
    *[("delete", status) for status in UNFINISHED],
]
"""Every change the status of an instance does not allow (delete: without ``force``)."""
ACTIONS: dict[str, Callable[[Instance], Awaitable[Any]]] = {
    "pause": lambda i: i.pause(),
    "resume": lambda i: i.resume(),
    "terminate": lambda i: i.terminate(),
    "send an event to": lambda i: i.send_event("go", {"x": 1}),
    "delete": lambda i: i.delete(),
}


def illegal(action: str, status: str) -> str:
    name, instance_id = STATES[status]
    return f"cannot {action} instance {instance_id!r} of workflow {name!r}: it is {status}"


class Unstorable:
    """A class stepline has no codec for."""


class OddZone(datetime.tzinfo):
    """A time zone that is neither datetime.timezone nor zoneinfo.ZoneInfo."""

    def utcoffset(self, dt: datetime.datetime | None) -> datetime.timedelta:
        return datetime.timedelta(hours=1)


API = [
    # Params, payloads and results that are not JSON, or too large.
    Api("create-params-object", create({1, object()}),
        Raises(InvalidPayloadError, "of type object")),
    Api("create-params-class", create({"b": [Unstorable()]}),
        Raises(InvalidPayloadError, "['b'][0] is of type tests.process.test_bad_input.Unstorable")),
    Api("create-params-nan", create({"x": math.nan}), Raises(InvalidPayloadError, "['x'] is nan")),
    Api("create-params-inf", create([1, math.inf]), Raises(InvalidPayloadError, "[1] is inf")),
    Api("create-params-zone", create({"at": datetime.datetime(2030, 1, 1, tzinfo=OddZone())}),
        Raises(InvalidPayloadError, "['at'] is a datetime in the time zone")),
    Api("create-params-int-past-64-bits", create({"n": 2**64}),
        Raises(InvalidPayloadError, "['n'] is the integer 18446744073709551616")),
    Api("create-params-key", create({Unstorable(): "a"}),
        Raises(InvalidPayloadError, "is of type tests.process.test_bad_input.Unstorable")),
    Api("create-params-oversized", create("x" * MIB),
        Raises(InvalidPayloadError, "instance params is 1,048,578 bytes encoded, over the limit")),
    Api("batch-params-object",
        lambda c: c.engine.workflow("greet").create_batch([{}, {"params": Unstorable()}]),
        Raises(InvalidPayloadError, "params of batch item 1")),
    Api("batch-item-not-a-dict", lambda c: c.engine.workflow("greet").create_batch([5]),
        Raises(TypeError, "create_batch item 0 must be a dict")),
    Api("batch-unknown-key", lambda c: c.engine.workflow("greet").create_batch([{"idd": "x"}]),
        Raises(ValueError, "create_batch item 0: unknown key 'idd'")),
    Api("event-payload-nan", on("waiting", lambda i: i.send_event("go", math.nan)),
        Raises(InvalidPayloadError, "payload of event 'go' is not JSON-serialisable")),
    Api("event-payload-oversized", on("waiting", lambda i: i.send_event("go", ["x" * MIB])),
        Raises(InvalidPayloadError, "payload of event 'go' is 1,048,580 bytes")),
    Api("step-result-object", run, Errored("InvalidPayloadError", "the result of step 'x-1'"),
        (object_result,)),
    Api("step-result-oversized", run,
        Errored("InvalidPayloadError", "the result of step 'x-1' is 1,048,578 bytes"),
        (big_result,)),
    Api("output-nan", run, Errored("InvalidPayloadError", "the output of run()"), (nan_output,)),
    # Ids, names and event types.
    Api("id-empty", create(None, ""), bad_id("")),
    Api("id-too-long", create(None, "x" * 101),
        Raises(ValueError, "invalid instance id 'xxxxxxxxxx")),
    Api("id-control-character", create(None, "a\nb"), bad_id("a\nb")),
    Api("id-slash", create(None, "a/b"), bad_id("a/b")),
    Api("id-leading-dash", create(None, "-x"), bad_id("-x")),
    Api("id-not-text", create(None, 5), bad_id(5)),
    Api("id-sql", create(None, SQL_ID), bad_id(SQL_ID)),
    Api("id-unicode", create(None, "café"), bad_id("café")),
    Api("get-invalid-id", lambda c: c.engine.workflow("greet").get("a b"), bad_id("a b")),
    Api("get-nul-id", lambda c: c.engine.workflow("greet").get("a\x00b"), bad_id("a\x00b")),
    Api("workflow-name-invalid", lambda c: Engine(c.engine.url, [BadName], worker=False),
        Raises(ValueError, "invalid workflow name 'bad name'")),
    Api("workflow-unknown", lambda c: c.engine.workflow("nope").create(),
        Raises(WorkflowNotFoundError, "unknown workflow 'nope'; known workflows: ")),
    Api("workflow-name-sql", lambda c: c.engine.workflow("x'; DROP TABLE workflows; --").create(),
        Raises(WorkflowNotFoundError, "unknown workflow \"x'; DROP TABLE workflows; --\"")),
    Api("workflow-name-nul-finds-nothing", nothing_found, Succeeds()),
    Api("get-of-workflow-name-nul", lambda c: c.engine.get_instance("a\x00b", "x"),
        Raises(InstanceNotFoundError, "workflow 'a\\x00b' has no instance 'x'")),
    Api("step-name-reserved", run,
        Errored("ValueError", "invalid step name 'undo:rollback': the suffix ':rollback'"),
        (bad_step_name,)),
    Api("event-type-invalid", on("waiting", lambda i: i.send_event("a b")),
        Raises(ValueError, "invalid event type 'a b'")),
    Api("event-type-too-long", on("waiting", lambda i: i.send_event("t" * 101)),
        Raises(ValueError, "invalid event type 'tttt")),
    Api("wait-for-event-type-invalid", run, Errored("ValueError", "invalid event type 'a b'"),
        (bad_wait,)),
    # Durations and retry configs.
    Api("timeout-fortnights", lambda c: StepConfig(timeout="5 fortnights"),
        Raises(ValueError, "invalid step config key 'timeout': invalid timeout '5 fortnights'")),
    Api("timeout-negative", lambda c: StepConfig(timeout=-1),
        Raises(ValueError, "invalid timeout -1: it must be positive")),
    Api("timeout-zero", lambda c: StepConfig(timeout=0),
        Raises(ValueError, "invalid timeout 0: it must be positive")),
    Api("timeout-past-float", lambda c: StepConfig(timeout=10**400),
        Raises(ValueError, "invalid timeout 1000")),
    Api("sleep-fortnights", run, Errored("ValueError", "sleep 'nap' '5 fortnights'"),
        (bad_sleep,)),
    Api("engine-lease-fortnights", lambda c: Engine(c.engine.url, lease="5 fortnights"),
        Raises(ValueError, "invalid lease '5 fortnights'")),
    Api("purge-older-than-negative", lambda c: c.engine.workflow("greet").purge(older_than=-1),
        Raises(ValueError, "invalid older_than -1")),
    Api("purge-older-than-negative-text",
        lambda c: c.engine.workflow("greet").purge(older_than="-5 days"),
        Raises(ValueError, "invalid older_than '-5 days': it must not be negative")),
    Api("engine-lease-zero", lambda c: Engine(c.engine.url, lease=0),
        Raises(ValueError, "invalid lease 0: it must be at least 0.1 seconds")),
    Api("engine-grace-period-negative", lambda c: Engine(c.engine.url, grace_period="-5 seconds"),
        Raises(ValueError, "invalid grace_period '-5 seconds': it must not be negative")),
    Api("engine-poll-interval-zero", lambda c: Engine(c.engine.url, poll_interval="0 seconds"),
        Raises(ValueError, "invalid poll_interval '0 seconds': it must be positive")),
    Api("wait-timeout-negative", on("waiting", lambda i: i.wait(timeout=-1)),
        Raises(ValueError, "invalid timeout -1: it must not be negative")),
    Api("wait-timeout-not-a-duration", on("complete", lambda i: i.wait(timeout="soon")),
        Raises(ValueError, "invalid timeout 'soon': it is not a duration: expected a number of "
               "seconds or 'N unit' (units: millisecond, second, minute, hour, day, week)")),
    Api("wait-timeout-not-a-duration-type", on("complete", lambda i: i.wait(timeout=[1])),
        Raises(ValueError, "invalid timeout [1]: it is not a duration: expected a number of "
               "seconds, a timedelta or 'N unit'")),
    Api("wait-timeout-text-passes", on("waiting", lambda i: i.wait(timeout="10 milliseconds")),
        Raises(TimeoutError, "is still waiting after 10 milliseconds")),
    Api("step-inline-not-a-bool", lambda c: StepConfig(inline="yes"),  # type: ignore[arg-type]
        Raises(ValueError, "invalid step config key 'inline': 'yes' (True or False)")),
    Api("retries-limit-negative", lambda c: RetryConfig(limit=-1),
        Raises(ValueError, "'retries.limit': -1")),
    Api("retries-backoff-unknown", lambda c: RetryConfig(backoff="quadratic"),  # type: ignore[arg-type]
        Raises(ValueError, "'retries.backoff': 'quadratic'")),
    Api("retries-delay-invalid", lambda c: RetryConfig(delay="soon"),
        Raises(ValueError, "invalid retries.delay 'soon'")),
    Api("retries-unknown-key", lambda c: StepConfig(retries={"limt": 3}),
        Raises(ValueError, "'retries.limt'")),
    Api("retries-non-retryable-not-a-class", lambda c: RetryConfig(non_retryable=[5]),  # type: ignore[list-item]
        Raises(ValueError, "'retries.non_retryable': 5 is neither")),
    Api("step-config-in-run", run, Errored("ValueError", "'retries.limit': -1"), (bad_config,)),
    # A SQLite URL naming a directory, whether the engine may create the database or not.
    Api("sqlite-url-directory", lambda c: open_directory(c, create=True),
        Raises(ConfigError, f"{DIRECTORY} is a directory, not a SQLite database file: name a "
               f"file in it, e.g. sqlite:///{DIRECTORY}/stepline.db")),
    Api("sqlite-url-directory-no-create", lambda c: open_directory(c, create=False),
        Raises(ConfigError, f"{DIRECTORY} is a directory, not a SQLite database file")),
    # Unknown instances, every illegal state change, other refused changes.
    Api("get-unknown-instance", lambda c: c.engine.get_instance("greet", "nope"),
        Raises(InstanceNotFoundError, "workflow 'greet' has no instance 'nope'")),
    *[Api(f"{action.split()[0]}-{status}", on(status, ACTIONS[action]),
          Raises(IllegalStateError, illegal(action, status))) for action, status in ILLEGAL],
    Api("restart-unknown-step-sql", on("complete", lambda i: i.restart(SQL_ID)),
        Raises(ValueError, f"no recorded step {SQL_ID!r}")),
    Api("restart-step-nul", on("complete", lambda i: i.restart("a\x00b")),
        Raises(ValueError, "invalid step name 'a\\x00b' to restart from")),
    Api("restart-count-zero", on("complete", lambda i: i.restart("who", count=0)),
        Raises(ValueError, "invalid step count 0")),
    Api("purge-unfinished-status", lambda c: c.engine.workflow("greet").purge(statuses=["queued"]),
        Raises(ValueError, "purge deletes finished instances only")),
    Api("create-key-too-long", lambda c: c.engine.workflow("greet").create(key="k" * 201),
        Raises(ValueError, "invalid key 'kkkk")),
    Api("create-key-huge", lambda c: c.engine.workflow("greet").create(key=HUGE),
        Raises(ValueError, "invalid key 'kkkk")),
    Api("create-dedup-key-huge", lambda c: c.engine.workflow("greet").create(dedup_key=HUGE),
        Raises(ValueError, "invalid dedup_key 'kkkk")),
    Api("create-id-huge", lambda c: c.engine.workflow("greet").create(HUGE),
        Raises(ValueError, "invalid instance id 'kkkk")),
    Api("create-dedup-key-empty", lambda c: c.engine.workflow("greet").create(dedup_key=""),
        Raises(ValueError, "invalid dedup_key ''")),
    Api("create-priority-past-32-bits", lambda c: c.engine.workflow("greet").create(priority=2**31),
        Raises(ValueError, "invalid priority 2147483648")),
    Api("create-on-duplicate-unknown",
        lambda c: c.engine.workflow("greet").create(on_duplicate="skip"),  # type: ignore[arg-type]
        Raises(ValueError, "invalid on_duplicate 'skip'")),
    Api("create-timeout-not-duration", lambda c: c.engine.workflow("greet").create(timeout="soon"),
        Raises(ValueError, "invalid timeout 'soon'")),
    Api("create-on-conflict-unknown",
        lambda c: c.engine.workflow("greet").create(key="k", on_conflict="latest"),  # type: ignore[arg-type]
        Raises(ValueError, "invalid on_conflict 'latest'")),
    Api("create-debounce-without-key",
        lambda c: c.engine.workflow("greet").create(on_conflict="debounce", debounce=5),
        Raises(ValueError, "on_conflict='debounce' needs a key")),
    Api("create-debounce-not-duration",
        lambda c: c.engine.workflow("greet").create(key="k", on_conflict="debounce", debounce="x"),
        Raises(ValueError, "invalid debounce 'x'")),
    Api("batch-dedup-key", lambda c: c.engine.workflow("greet").create_batch([{"dedup_key": "d"}]),
        Raises(ValueError, "create_batch item 0: unknown key 'dedup_key'")),
    Api("create-existing-id", create(None, "done"),
        Raises(InstanceAlreadyExistsError, "workflow 'greet' already has an instance 'done'")),
    Api("list-unknown-status", lambda c: c.engine.workflow("greet").list(status="done"),
        Raises(ValueError, "unknown status 'done'")),
    Api("list-limit-zero", lambda c: c.engine.workflow("greet").list(limit=0),
        Raises(ValueError, "limit must be at least 1, got 0")),
    Api("list-cursor-sql", lambda c: c.engine.list_instances(cursor="'; --"),
        Raises(ValueError, "invalid cursor")),
    # Definitions, and steps outside a workflow.
    Api("run-not-async", lambda c: Engine(c.engine.url, [SyncRun], worker=False),
        Raises(DefinitionError, "SyncRun: run() must be an async function")),
    Api("workflow-decorator-on-sync-function", lambda c: sync_decorated(),
        Raises(DefinitionError, "must be an async function")),
    Api("concurrency-negative", lambda c: Engine(c.engine.url, [NegativeConcurrency]),
        Raises(DefinitionError, "workflow 'negative-concurrency' (NegativeConcurrency): "
               "concurrency -1")),
    Api("rate-limit-fortnight", lambda c: Engine(c.engine.url, [FortnightRate]),
        Raises(DefinitionError, "rate_limit '5 per fortnight'")),
    Api("named-limit-undefined", lambda c: Engine(c.engine.url, [UnknownLimit]),
        Raises(DefinitionError, "workflow 'unknown-limit' uses limit 'nowhere'")),
    Api("run-missing", lambda c: Engine(c.engine.url, [NoRun], worker=False),
        Raises(DefinitionError, "NoRun has no run()")),
    Api("run-wrong-signature", lambda c: Engine(c.engine.url, [WrongSignature], worker=False),
        Raises(DefinitionError, "run() must accept (self, event, step)")),
    Api("step-after-run-returned", call_leaked_step, Raises(DefinitionError, "'late'"), (leaky,),
        setup=run),
    Api("step-from-task-after-run-returned", call_step_from_task, Raises(DefinitionError, "'late'"),
        (orphan,), setup=run),
    Api("step-inside-a-step", run, Errored("DefinitionError", "'inner'"), (nested,)),
    # Messages (docs/messaging.md): queries, updates, streams, event predicates.
    Api("query-unknown", msg(lambda i: i.query("nope")),
        Raises(QueryError, "workflow 'messenger' has no query 'nope' (its queries: broken, "),
        (Messenger,), setup=new_messenger),
    Api("query-args-do-not-fit", msg(lambda i: i.query("sum", 1)),
        Raises(QueryError, "InvalidArgumentsError: query 'sum' takes ()"), (Messenger,),
        setup=new_messenger),
    Api("query-raises", msg(lambda i: i.query("broken")),
        Raises(QueryError, "KeyError: 'no such total'"), (Messenger,), setup=new_messenger),
    Api("query-changes-state", msg(lambda i: i.query("sneaky")),
        Raises(QueryError, "query 'sneaky' changed the workflow's state (it set self.total)"),
        (Messenger,), setup=new_messenger),
    Api("query-args-oversized", msg(lambda i: i.query("sum", "x" * MIB)),
        Raises(InvalidPayloadError, "arguments of query 'sum' is 1,048,580 bytes encoded"),
        (Messenger,), setup=new_messenger),
    Api("query-without-code-or-worker", on("waiting", lambda i: i.query("sum")),
        Raises(QueryError, "no live worker serves it")),
    Api("update-unknown", msg(lambda i: i.update("nope")),
        Raises(UpdateRejectedError, "workflow 'messenger' has no update 'nope' (its updates: add)"),
        (Messenger,), setup=new_messenger),
    Api("update-args-fail-validation", msg(lambda i: i.update("add", -5)),
        Raises(UpdateRejectedError, "ValueError: amount must be positive, got -5"),
        (Messenger,), setup=new_messenger),
    Api("update-args-do-not-fit", msg(lambda i: i.update("add")),
        Raises(UpdateRejectedError, "update 'add' takes (amount): missing a required argument"),
        (Messenger,), setup=new_messenger),
    Api("update-args-oversized", msg(lambda i: i.update("add", "x" * MIB)),
        Raises(InvalidPayloadError, "arguments of update 'add' is 1,048,6"), (Messenger,),
        setup=new_messenger),
    Api("update-id-invalid", msg(lambda i: i.update("add", 1, update_id="a\nb")),
        Raises(ValueError, "invalid update id 'a\\nb'"), (Messenger,), setup=new_messenger),
    Api("update-to-complete", on("complete", lambda i: i.update("add", 1)),
        Raises(IllegalStateError, illegal("send an update to", "complete"))),
    Api("stream-name-invalid", on("waiting", lambda i: i.read_stream("a b")),
        Raises(ValueError, "invalid stream name 'a b'")),
    Api("stream-cursor-negative", on("waiting", lambda i: i.read_stream("s", after=-1)),
        Raises(ValueError, "invalid stream cursor -1")),
    Api("predicate-raises", predicate_raises, Succeeds(), (Messenger,), setup=new_messenger),
    # Unicode and SQL metacharacters: stored and read back as they are.
    Api("unicode-sql-params", odd_params, Succeeds()),
    Api("unicode-sql-event-payload", odd_payload, Succeeds(), setup=new_gate),
    Api("unicode-sql-step-names-results-errors", odd_run, Succeeds(), (odd_steps,)),
]  # fmt: skip


async def _result(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


@pytest.mark.parametrize(("store", "case"), params(API, lambda case: ("sqlite", "postgres")))
async def test_python_api(store: str, case: Api, worlds: Worlds) -> None:
    url = await worlds.url(store)
    async with Engine(url, case.workflows, worker=False) as engine:
        ctx = Ctx(engine)
        if case.setup is not None:
            ctx.prepared = await case.setup(ctx)
        before = dump(url)
        expect = case.expect
        if isinstance(expect, Raises):
            try:
                await _result(case.call(ctx))
            except Exception as exc:
                assert type(exc) is expect.error, repr(exc)
                assert expect.names in str(exc), str(exc)
                assert len(str(exc)) <= MOST_CHARS, str(exc)
            else:
                pytest.fail(f"no {expect.error.__name__} raised")
            assert dump(url) == before
            return
        result = await _result(case.call(ctx))
        changed: list[Instance] = result if isinstance(expect, Succeeds) else [result]
        if isinstance(expect, Errored):
            status = await result.status()
            assert status.status == "errored", status
            assert status.error["name"] == expect.error, status.error
            assert expect.names in status.error["message"], status.error
        keys = [(i.workflow, i.id) for i in changed]
        assert others(dump(url), keys) == others(before, keys)


# -- HTTP ----------------------------------------------------------------------------------------

G = "/api/workflows/greet/instances"
GATE = "/api/workflows/gate/instances"


@dataclass(frozen=True)
class Http:
    id: str
    method: str
    path: str
    body: Any = None
    """A JSON value, or bytes sent as they are; None: no body."""
    status: int = 400
    code: str = "invalid_input"
    names: str = ""
    check: Callable[[httpx.AsyncClient], Awaitable[None]] | None = None
    """For a request that succeeds: checks what it stored reads back equal."""
    changes: tuple[str, str] | None = None
    """The instance a successful request changes."""
    setup: Callable[[Engine], Awaitable[Any]] | None = None


async def http_odd_params(client: httpx.AsyncClient) -> None:
    detail = (await client.get(f"{G}/http-odd")).json()
    assert detail["workflow"]["params"] == ODD_VALUE


async def http_odd_payload(client: httpx.AsyncClient) -> None:
    events = (await client.get(f"{GATE}/http-note/events")).json()["events"]
    assert [(e["type"], e["payload"]) for e in events] == [("note", ODD_VALUE)]


async def make_http_note(engine: Engine) -> Any:
    return await engine.workflow("gate").create("http-note")


HTTP = [
    Http("create-params-int-past-64-bits", "POST", G, b'{"params": {"n": 18446744073709551616}}',
         names="['params']['n'] is the integer 18446744073709551616"),
    Http("create-params-nan", "POST", G, b'{"params": {"x": NaN}}', 422, "invalid_json",
         "the request body is not valid JSON"),
    Http("create-params-oversized", "POST", G, {"params": "x" * MIB}, 413, "payload_too_large",
         "params is 1,048,578 bytes encoded, over the limit of 1,048,576 bytes"),
    Http("body-oversized", "POST", G, b" " * (4 * MIB + 1), 413, "payload_too_large",
         "the request body is 4,194,305 bytes, over the limit of 4,194,304 bytes"),
    Http("create-not-utf8", "POST", G, b'{"id": "\xff"}', 422, "invalid_json", "not valid JSON"),
    Http("create-id-invalid", "POST", G, {"id": "a/b"}, names="invalid instance id 'a/b'"),
    Http("create-id-not-text", "POST", G, {"id": 5}, names="'id' must be a string"),
    Http("create-unknown-key", "POST", G, {"idd": "x"}, names="unknown key 'idd'"),
    Http("create-timeout-not-duration", "POST", G, {"timeout": "soon"},
         names="invalid timeout 'soon'"),
    Http("create-on-conflict-unknown", "POST", G, {"key": "k", "on_conflict": "latest"},
         names="invalid on_conflict 'latest'"),
    Http("create-debounce-without-key", "POST", G, {"on_conflict": "debounce", "debounce": 5},
         names="on_conflict='debounce' needs a key"),
    Http("create-body-not-object", "POST", G, [1], names="must be a JSON object"),
    Http("create-existing-id", "POST", G, {"id": "done"}, 409, "instance_exists",
         "workflow 'greet' already has an instance 'done'"),
    Http("create-unknown-workflow", "POST", "/api/workflows/nope/instances", {}, 404,
         "workflow_not_found", "unknown workflow 'nope'; known workflows: "),
    Http("create-workflow-name-sql", "POST",
         "/api/workflows/x%27%3B%20DROP%20TABLE%20workflows%3B/instances", {}, 404,
         "workflow_not_found", "unknown workflow \"x'; DROP TABLE workflows;\""),
    Http("batch-item-not-object", "POST", G + "/batch", [{"id": "b1"}, 5],
         names="item 1 of the batch"),
    Http("get-id-too-long", "GET", f"{G}/{'x' * 101}", names="invalid instance id 'xxx"),
    Http("create-key-huge", "POST", G, {"key": HUGE}, names="invalid key 'kkkk"),
    Http("get-unknown-instance", "GET", f"{G}/nope", None, 404, "instance_not_found",
         "workflow 'greet' has no instance 'nope'"),
    Http("event-type-unicode", "POST", f"{GATE}/w1/events/caf%C3%A9", 1,
         names="invalid event type 'café'"),
    Http("event-payload-int-past-64-bits", "POST", f"{GATE}/w1/events/go",
         b'{"n": -9223372036854775809}', names="['n'] is the integer -9223372036854775809"),
    Http("event-payload-oversized", "POST", f"{GATE}/w1/events/go", "x" * MIB, 413,
         "payload_too_large", "the payload of event 'go' is 1,048,578 bytes"),
    Http("event-to-complete", "POST", f"{G}/done/events/go", 1, 409, "illegal_state",
         illegal("send an event to", "complete")),
    Http("pause-complete", "PATCH", f"{G}/done/status", {"status": "pause"}, 409, "illegal_state",
         illegal("pause", "complete")),
    Http("pause-waiting-for-pause", "PATCH", "/api/workflows/blocker/instances/r2/status",
         {"status": "pause"}, 409, "illegal_state", illegal("pause", "waitingForPause")),
    Http("resume-running", "PATCH", "/api/workflows/blocker/instances/r1/status",
         {"status": "resume"}, 409, "illegal_state", illegal("resume", "running")),
    Http("terminate-errored", "PATCH", "/api/workflows/failing/instances/err/status",
         {"status": "terminate"}, 409, "illegal_state", illegal("terminate", "errored")),
    Http("delete-unfinished", "DELETE", f"{GATE}/w1", None, 409, "illegal_state",
         illegal("delete", "waiting") + "; terminate it first, or delete it with ?force=true"),
    Http("delete-force-invalid", "DELETE", f"{GATE}/w1?force=yes",
         names="query parameter 'force' must be true or false, got 'yes'"),
    Http("restart-unknown-step-sql", "PATCH", f"{G}/done/status",
         {"status": "restart", "from": SQL_ID}, names=f"no recorded step {SQL_ID!r}"),
    Http("restart-step-nul", "PATCH", f"{G}/done/status", {"status": "restart", "from": "a\u0000b"},
         names="invalid step name 'a\\x00b' to restart from"),
    Http("status-unknown-action", "PATCH", f"{G}/done/status", {"status": "explode"},
         names="'status' must be one of pause, resume, terminate, restart, got 'explode'"),
    Http("list-unknown-status", "GET", "/api/instances?status=done", names="unknown status 'done'"),
    Http("list-cursor-sql", "GET", f"{G}?cursor=%27%3B%20--", names="invalid cursor \"'; --\""),
    Http("list-limit-zero", "GET", f"{G}?limit=0",
         names="query parameter 'limit' must be a whole number"),
    Http("wrong-method", "PUT", G, {}, 405, "method_not_allowed",
         "PUT is not allowed on /api/workflows/greet/instances; allowed: GET, HEAD, POST"),
    Http("query-without-code-or-worker", "GET", f"{GATE}/w1/queries/sum", None, 503, "no_worker",
         "no live worker serves it"),
    Http("query-args-not-json", "GET", f"{GATE}/w1/queries/sum?args=%7B",
         names="query parameter 'args' is not valid JSON"),
    Http("query-args-not-array", "GET", f"{GATE}/w1/queries/sum?args=5",
         names="query parameter 'args' must be a JSON array"),
    Http("update-to-complete", "POST", f"{G}/done/updates/add", {"args": [1]}, 409,
         "illegal_state", illegal("send an update to", "complete")),
    Http("update-body-not-object", "POST", f"{GATE}/w1/updates/add", [1],
         names="the request body must be a JSON object"),
    Http("update-unknown-key", "POST", f"{GATE}/w1/updates/add", {"argz": []},
         names="unknown key 'argz'"),
    Http("update-args-oversized", "POST", f"{GATE}/w1/updates/add", {"args": ["x" * MIB]}, 413,
         "payload_too_large", "'args' is 1,048,580 bytes encoded, over the limit"),
    Http("update-id-invalid", "POST", f"{GATE}/w1/updates/add", {"update_id": "a\nb"},
         names="invalid update id 'a\\nb'"),
    Http("update-timeout-invalid", "POST", f"{GATE}/w1/updates/add", {"timeout": "soon"},
         names="invalid 'timeout' 'soon'"),
    Http("update-unknown-instance", "POST", f"{GATE}/nope/updates/add", {}, 404,
         "instance_not_found", "workflow 'gate' has no instance 'nope'"),
    Http("subscribe-stream-missing", "GET", f"{GATE}/w1/subscribe",
         names="query parameter 'stream' is required"),
    Http("subscribe-after-negative", "GET", f"{GATE}/w1/subscribe?stream=s&after=-1",
         names="invalid stream cursor '-1'"),
    Http("unicode-sql-params", "POST", G, {"id": "http-odd", "params": ODD_VALUE}, 201,
         check=http_odd_params, changes=("greet", "http-odd")),
    Http("unicode-sql-event-payload", "POST", f"{GATE}/http-note/events/note", ODD_VALUE, 202,
         check=http_odd_payload, changes=("gate", "http-note"), setup=make_http_note),
]  # fmt: skip


@pytest.mark.parametrize(("store", "case"), params(HTTP, lambda case: ("sqlite", "postgres")))
async def test_http(store: str, case: Http, worlds: Worlds) -> None:
    url = await worlds.url(store)
    async with Engine(url, worker=False) as engine:
        if case.setup is not None:
            await case.setup(engine)
        before = dump(url)
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as client:
            body = case.body
            content = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
            resp = await client.request(case.method, case.path, content=content)
            assert resp.status_code == case.status, resp.text
            assert resp.headers["content-type"].startswith("application/json")
            assert "Traceback" not in resp.text
            if case.check is None:
                error = resp.json()["error"]
                assert set(resp.json()) == {"error"} and set(error) == {"code", "message"}
                assert error["code"] == case.code, error
                assert case.names in error["message"], error["message"]
                assert len(error["message"]) <= MOST_CHARS, error["message"]
                assert dump(url) == before
                if case.status == 405:
                    assert resp.headers["allow"] == "GET, HEAD, POST"
                return
            await case.check(client)
    assert case.changes is not None
    assert others(dump(url), [case.changes]) == others(before, [case.changes])


# -- the CLI -------------------------------------------------------------------------------------

FILES = {
    "broken.py": "import no_such_module_xyz\n",
    "raises.py": "raise RuntimeError('configuration missing at import')\n",
    "syntax.py": "def f(:\n",
    "syncrun.py": "from stepline import Workflow\n\n\nclass Sync(Workflow):\n"
    "    def run(self, event, step):\n        return 1\n",
    "broken.toml": '[[workflows]]\nname = "brk"\nclass_name = "broken:X"\n',
    "stepline.toml": "",
    "bad.json": '{"a": ',
    "big.json": orjson.dumps({"x": "y" * MIB}).decode(),
    "odd.json": orjson.dumps(ODD_VALUE).decode(),
    "hello.py": "from stepline import workflow\n\n\n@workflow(name='hello')\n"
    "async def hello(event, step):\n    return 1\n",
    "broken.jsonc": '{"main": "wmain.py", // a comment\n "workflows": [',
    "noclass.jsonc": '{"main": "wmain.py", "workflows": [{"name": "w", "binding": "W", '
    '"class_name": "Missing"}]}',
    "good.jsonc": '{"main": "wmain.py", "workflows": [{"name": "w", "binding": "W", '
    '"class_name": "Flow"}]}',
    "wmain.py": "from workers import WorkflowEntrypoint\n\n\nclass Flow(WorkflowEntrypoint):\n"
    "    async def run(self, event, step):\n        return 1\n",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    for name, text in FILES.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "latin1.json").write_bytes(b'{"a": "\xe9"}')
    return root


BUSY_PORT = "{busy_port}"
"""In a row's args: a port something else listens on (the ``busy_port`` fixture)."""


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@dataclass(frozen=True)
class Cli:
    id: str
    args: tuple[str, ...]
    names: str = ""
    exit: int = 2
    stdin: str | None = None
    stores: tuple[str, ...] = ("sqlite",)
    """Both stores where the store is involved; SQLite alone where it cannot matter."""
    usage: bool = False
    """A click usage error: the usage line, a hint, then the error."""
    changes: tuple[str, str] | None = None
    """For a command that succeeds: the instance it creates, whose params must be ODD_VALUE."""
    database: str | None = None
    """The --database URL instead of the seeded database's (which must stay unchanged)."""


BOTH = ("sqlite", "postgres")
TRIGGER = ("workflows", "trigger", "greet")
INST = ("workflows", "instances")

CLI = [
    Cli("run-module-import-fails", ("run", "broken.py:X"),
        "broken.py: ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    Cli("run-module-raises", ("run", "raises.py:X"),
        "RuntimeError: configuration missing at import"),
    Cli("run-module-syntax-error", ("run", "syntax.py:X"), "cannot import"),
    Cli("config-module-import-fails", ("--config", "broken.toml", "worker"),
        "key 'workflows[0].class_name' (broken:X): cannot import module 'broken'"),
    Cli("run-not-async", ("run", "syncrun.py:Sync"), "run() must be an async function"),
    Cli("wrangler-not-jsonc", ("worker", "--wrangler", "broken.jsonc"),
        "broken.jsonc is not valid JSONC"),
    Cli("wrangler-missing-class", ("worker", "--wrangler", "noclass.jsonc"),
        "key 'workflows[0].class_name': module 'wmain' has no attribute 'Missing'"),
    Cli("wrangler-unknown-workflow", ("run", "--wrangler", "good.jsonc", "nope"),
        "unknown workflow 'nope'; known workflows: w"),
    Cli("params-file-missing", (*TRIGGER, "--params-file", "missing.json"),
        "cannot read --params-file missing.json: No such file or directory"),
    Cli("params-file-directory", (*TRIGGER, "--params-file", "."), "cannot read --params-file .:"),
    Cli("params-file-invalid-json", (*TRIGGER, "--params-file", "bad.json"),
        "--params-file bad.json is not valid JSON"),
    Cli("params-file-not-utf8", (*TRIGGER, "--params-file", "latin1.json"),
        "--params-file latin1.json is not UTF-8 text"),
    Cli("params-stdin-invalid-json", (*TRIGGER, "--params-file", "-"),
        "--params-file <stdin> is not valid JSON", stdin="{"),
    Cli("params-stdin-int-past-64-bits", (*TRIGGER, "--params-file", "-"),
        "['n'] is the integer 18446744073709551616", stdin='{"n": 18446744073709551616}'),
    Cli("params-twice", (*TRIGGER, "{}", "--params-file", "odd.json"),
        "give PARAMS_JSON or --params-file, not both"),
    Cli("params-nan", (*TRIGGER, '{"x": NaN}'), "PARAMS_JSON is not valid JSON"),
    Cli("params-oversized", (*TRIGGER, "--params-file", "big.json"),
        "instance params is 1,048,584 bytes encoded, over the limit of 1,048,576 bytes"),
    Cli("payload-file-missing",
        (*INST, "send-event", "gate", "w1", "--type", "go", "--payload-file", "nope.json"),
        "cannot read --payload-file nope.json"),
    Cli("id-invalid", (*TRIGGER, "--id", "a/b"), "invalid instance id 'a/b'"),
    Cli("id-huge", (*TRIGGER, "--id", HUGE), "invalid instance id 'kkkk"),
    Cli("key-huge", (*TRIGGER, "--key", HUGE), "invalid key 'kkkk"),
    Cli("timeout-not-duration", (*TRIGGER, "--timeout", "soon"), "invalid timeout 'soon'"),
    Cli("debounce-without-key", (*TRIGGER, "--on-conflict", "debounce", "--debounce", "5"),
        "on_conflict='debounce' needs a key"),
    Cli("event-type-invalid", (*INST, "send-event", "gate", "w1", "--type", "a b"),
        "invalid event type 'a b'"),
    Cli("lease-fortnights", ("worker", "--lease", "5 fortnights"),
        "invalid --lease '5 fortnights'"),
    Cli("older-than-negative", (*INST, "delete", "greet", "--older-than", "-1 days"),
        "invalid --older-than '-1 days'"),
    Cli("older-than-negative-says-so", (*INST, "delete", "greet", "--older-than", "-5 days"),
        "invalid --older-than '-5 days': it must not be negative"),
    Cli("older-than-not-a-duration", (*INST, "delete", "greet", "--older-than", "5 fortnights"),
        "invalid --older-than '5 fortnights': it is not a duration: expected a number of "
        "seconds or 'N unit' (units: millisecond, second, minute, hour, day, week)"),
    Cli("lease-zero", ("worker", "--lease", "0"),
        "invalid --lease '0': it must be at least 0.1 seconds"),
    Cli("lease-negative", ("worker", "--lease", "-5 seconds"),
        "invalid --lease '-5 seconds': it must be at least 0.1 seconds"),
    Cli("grace-period-negative", ("worker", "--grace-period", "-1"),
        "invalid --grace-period '-1': it must not be negative"),
    Cli("schedule-none-stored", ("schedules", "backfill", "nightly", "--from", "0", "--to", "60"),
        "no schedule is named 'nightly': no schedules are stored yet (a worker serving a "
        "workflow with schedules stores them when it starts)", stores=BOTH),
    *[Cli(f"sqlite-url-directory-{name}", args,
          "is a directory, not a SQLite database file (from --database): name a file in it, "
          "e.g. sqlite:///", database="sqlite:///.")
      for name, args in [("client", ("workers", "list")),
                         ("trigger", ("workflows", "trigger", "hello")),
                         ("db-init", ("db", "init")),
                         ("worker", ("worker", "hello.py:hello")),
                         ("run", ("run", "hello.py:hello")),
                         ("serve", ("serve", "--port", "0"))]],
    Cli("serve-port-in-use", ("serve", "--port", BUSY_PORT),
        "cannot serve on 127.0.0.1:{port}: the port is in use", stores=BOTH),
    Cli("status-unknown", (*INST, "list", "greet", "--status", "done"),
        "Invalid value for '--status': 'done' is not one of", usage=True),
    Cli("restart-step-not-utf8",
        (*INST, "restart", "greet", "done", "--from-step-name", "a\udcffb"),
        "invalid step name 'a\\udcffb' to restart from"),
    Cli("unknown-workflow", ("workflows", "trigger", "nope"),
        "unknown workflow 'nope'; known workflows: ", stores=BOTH),
    Cli("unknown-instance", (*INST, "describe", "greet", "nope"),
        "workflow 'greet' has no instance 'nope'", stores=BOTH),
    Cli("pause-complete", (*INST, "pause", "greet", "done"), illegal("pause", "complete"),
        stores=BOTH),
    Cli("resume-running", (*INST, "resume", "blocker", "r1"), illegal("resume", "running"),
        stores=BOTH),
    Cli("terminate-terminated", (*INST, "terminate", "gate", "t1"),
        illegal("terminate", "terminated"), stores=BOTH),
    Cli("send-event-errored", (*INST, "send-event", "failing", "err", "--type", "go"),
        illegal("send an event to", "errored"), stores=BOTH),
    Cli("delete-unfinished", (*INST, "delete", "blocker", "r2"),
        illegal("delete", "waitingForPause"), stores=BOTH),
    Cli("restart-unknown-step-sql", (*INST, "restart", "greet", "done", "--from-step-name", SQL_ID),
        f"no recorded step {SQL_ID!r}", stores=BOTH),
    Cli("create-existing-id", (*TRIGGER, "--id", "done"),
        "workflow 'greet' already has an instance 'done'", stores=BOTH),
    Cli("query-args-not-json", (*INST, "query", "gate", "w1", "sum", "{"),
        "argument 1 is not valid JSON"),
    Cli("query-without-code-or-worker", (*INST, "query", "gate", "w1", "sum"),
        "no live worker serves it", exit=1, stores=BOTH),
    Cli("update-to-complete", (*INST, "update", "greet", "done", "add", "1"),
        illegal("send an update to", "complete"), stores=BOTH),
    Cli("update-id-invalid", (*INST, "update", "gate", "w1", "add", "--update-id", ""),
        "invalid update id ''"),
    Cli("subscribe-cursor-negative",
        (*INST, "subscribe", "gate", "w1", "--stream", "s", "--after", "-1"),
        "invalid stream cursor -1"),
    Cli("unicode-sql-params-file", (*TRIGGER, "--params-file", "odd.json", "--id", "cli-file"),
        exit=0, changes=("greet", "cli-file")),
    Cli("unicode-sql-params-stdin", (*TRIGGER, "--params-file", "-", "--id", "cli-stdin"), exit=0,
        stdin=FILES["odd.json"], stores=BOTH, changes=("greet", "cli-stdin")),
]  # fmt: skip


async def _params(url: str, name: str, instance_id: str) -> Any:
    async with Engine(url, worker=False) as engine:
        return (await (await engine.get_instance(name, instance_id)).record()).params


@pytest.mark.parametrize(("store", "case"), params(CLI, lambda case: case.stores))
def test_cli(store: str, case: Cli, worlds: Worlds, project: Path, busy_port: int) -> None:
    url = asyncio.run(worlds.url(store))
    before = dump(url)
    args = [arg.replace(BUSY_PORT, str(busy_port)) for arg in case.args]
    result = subprocess.run(
        [sys.executable, "-m", "stepline.cli", "--database", case.database or url, *args],
        cwd=project,
        input=case.stdin,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert result.returncode == case.exit, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    if case.changes is not None:
        assert asyncio.run(_params(url, *case.changes)) == ODD_VALUE
        assert others(dump(url), [case.changes]) == others(before, [case.changes])
        return
    assert not result.stdout
    lines = result.stderr.strip().splitlines()
    if case.usage:
        assert lines[0].startswith("Usage: stepline ") and lines[1].startswith("Try "), lines
        lines = lines[3:]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert case.names.replace("{port}", str(busy_port)) in lines[0], lines[0]
    assert len(lines[0]) <= MOST_CHARS, lines[0]
    assert dump(url) == before
