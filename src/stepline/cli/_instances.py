"""``stepline workflows instances ...``: list, describe and control instances."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import click
from rich.text import Text

from ..client import Instance
from ..durations import format_duration, parse_duration
from ..engine import Engine
from ..errors import IllegalStateError, InstanceNotFoundError
from ..held import read_held_reasons
from ..records import (
    FINISHED_STATUSES,
    INSTANCE_STATUSES,
    InstanceEvent,
    InstanceRecord,
    PendingRetry,
    StepRecord,
)
from ..retrying import retry_of
from ..workflow import validate_name
from ._common import (
    State,
    check_workflow,
    cli_errors,
    fail,
    json_file_option,
    json_option,
    pass_state,
    print_json,
    read_json_input,
    resolve_instance,
    run_async,
)
from ._filters import filter_options
from ._render import (
    DEFAULT_TRUNCATE,
    describe_instance,
    describe_json,
    instances_table,
    plural,
    status_text,
)
from ._workflows import workflow_argument

UNFINISHED = tuple(s for s in INSTANCE_STATUSES if s not in FINISHED_STATUSES)
FINISHED = tuple(s for s in INSTANCE_STATUSES if s in FINISHED_STATUSES)

id_argument = click.argument("instance_id", metavar="ID")


@click.group("instances")
def instances() -> None:
    """List, describe and control workflow instances. ID may be `latest` (the newest)."""


# -- list ---------------------------------------------------------------------------------------


async def _list(
    state: State,
    name: str,
    status: str | None,
    reverse: bool,
    page: int,
    per_page: int,
    filters: dict[str, Any],
) -> tuple[list[InstanceRecord], list[PendingRetry | None], bool]:
    async with state.client() as engine:
        await check_workflow(engine, state, name)
        cursor: str | None = None
        binding = engine.workflow(name)
        for _ in range(page - 1):
            skipped = await binding.list(
                status=status, limit=per_page, cursor=cursor, oldest_first=reverse, **filters
            )
            cursor = skipped.cursor
            if cursor is None:
                return [], [], False
        found = await binding.list(
            status=status, limit=per_page, cursor=cursor, oldest_first=reverse, **filters
        )
        retries = await engine.retries(found.instances)
        return found.instances, retries, found.cursor is not None


@instances.command("list", short_help="List the instances of a workflow.")
@workflow_argument
@click.option("--status", type=click.Choice(INSTANCE_STATUSES), help="Only this status.")
@click.option("--reverse", is_flag=True, help="Oldest first (default: newest first).")
@click.option(
    "--page", type=click.IntRange(min=1), default=1, show_default=True, help="Which page to show."
)
@click.option(
    "--per-page",
    type=click.IntRange(1, 1000),
    default=50,
    show_default=True,
    help="Instances per page.",
)
@filter_options
@json_option
@pass_state
def list_instances(
    state: State,
    name: str,
    status: str | None,
    reverse: bool,
    page: int,
    per_page: int,
    as_json: bool,
    where: str | None,
    created_after: Any,
    created_before: Any,
    ended_after: Any,
    ended_before: Any,
) -> None:
    """List the instances of workflow NAME: id, created, modified, status. --where takes a
    filter (docs/operations.md), as in --where "customer = 'c-42' and status = 'errored'"."""
    given = {
        "where": where,
        "created_after": created_after,
        "created_before": created_before,
        "ended_after": ended_after,
        "ended_before": ended_before,
    }
    chosen = {k: v for k, v in given.items() if v is not None}
    records, retries, more = run_async(_list(state, name, status, reverse, page, per_page, chosen))
    if as_json:
        print_json(
            [
                {**record.to_json(), "retry": retry.to_json() if retry else None}
                for record, retry in zip(records, retries, strict=True)
            ]
        )
        return
    if not records:
        which = f" with status {status}" if status else ""
        which += " matching the filter" if chosen else ""
        where = f" on page {page}" if page > 1 else ""
        state.out.print(Text(f'There are no instances{which} in workflow "{name}"{where}'))
        return
    state.out.print(Text(f"Showing {plural(len(records), 'instance')} from page {page}:"))
    state.out.print(instances_table(records, retries))
    if more:
        state.out.print(Text(f"More instances: --page {page + 1}"))


# -- describe -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Described:
    """Everything ``instances describe`` shows."""

    record: InstanceRecord
    steps: list[StepRecord]
    now: float
    definition: dict[str, Any] | None = None
    warning: str | None = None
    """``no live worker serves 'NAME'`` (:meth:`Engine.unserved_warnings`), or None."""
    events: list[InstanceEvent] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    """The full limits holding a due instance back (:func:`stepline.held.held_reasons`)."""
    retry: PendingRetry | None = None
    """The failed step it waits to try again (:func:`stepline.retrying.retry_of`), if any."""


async def load_instance(engine: Engine, record: InstanceRecord) -> Described:
    """The instance's steps and events, and its workflow's stored definition (for DAG
    graphs)."""
    instance = await engine.get_instance(record.workflow, record.id)
    tags = await engine.store.operations.tags_of([record.pk])
    record = replace(record, tags=tags.get(record.pk, {}))
    steps = await instance.steps(redact=True)
    events = await instance.events()
    definition = next(
        (w.definition for w in await engine.list_workflows() if w.name == record.workflow), None
    )
    (warning,) = await engine.unserved_warnings([record])
    held = await read_held_reasons(engine.store, record)
    retry = None if record.status in FINISHED_STATUSES else retry_of(steps)
    return Described(record, steps, engine.now(), definition, warning, events, held, retry)


def show_instance(
    state: State, described: Described, *, as_json: bool, step_output: bool, limit: int
) -> None:
    """Print the describe layout (or its JSON) on stdout."""
    if as_json:
        print_json(
            {
                **describe_json(described.record, described.steps),
                "warning": described.warning,
                "held": described.held,
                "retry": described.retry.to_json() if described.retry else None,
                "events": [event.to_json() for event in described.events],
            }
        )
        return
    state.out.print(
        describe_instance(
            described.record,
            described.steps,
            now=described.now,
            step_output=step_output,
            limit=limit,
            definition=described.definition,
            warning=described.warning,
            events=described.events,
            held=described.held,
            retry=described.retry,
        )
    )


async def _describe(state: State, name: str, instance_id: str) -> Described:
    async with state.client() as engine:
        return await load_instance(engine, await resolve_instance(engine, state, name, instance_id))


def step_output_options(default_limit: int) -> Callable[[Any], Any]:
    def decorate(fn: Any) -> Any:
        fn = click.option(
            "--truncate-output-limit",
            type=click.IntRange(min=0),
            default=default_limit,
            show_default=True,
            help="Truncate outputs after this many characters (0: never).",
        )(fn)
        return click.option(
            "--step-output/--no-step-output",
            default=True,
            show_default=True,
            help="Show each step's output.",
        )(fn)

    return decorate


@instances.command("describe", short_help="Show an instance with its steps and attempts.")
@workflow_argument
@click.argument("instance_id", metavar="[ID|latest]", default="latest")
@step_output_options(DEFAULT_TRUNCATE)
@json_option
@pass_state
def describe(
    state: State,
    name: str,
    instance_id: str,
    step_output: bool,
    truncate_output_limit: int,
    as_json: bool,
) -> None:
    """Show an instance: status, trigger, times, output, error, then every step with its
    attempts. ID defaults to `latest`."""
    described = run_async(_describe(state, name, instance_id))
    show_instance(
        state, described, as_json=as_json, step_output=step_output, limit=truncate_output_limit
    )


# -- control ------------------------------------------------------------------------------------

Action = Callable[[Instance], Awaitable[None]]


async def _control(state: State, name: str, instance_id: str, action: Action) -> InstanceRecord:
    async with state.client() as engine:
        record = await resolve_instance(engine, state, name, instance_id)
        instance = await engine.get_instance(name, record.id)
        await action(instance)
        return await instance.record()


def _report(state: State, record: InstanceRecord, message: str, as_json: bool) -> None:
    if as_json:
        print_json(record.to_json())
        return
    text = Text(message + " (now ")
    text.append_text(status_text(record.status))
    text.append(")")
    state.out.print(text)


@instances.command("send-event", short_help="Send an event to an instance.")
@workflow_argument
@id_argument
@click.option("--type", "event_type", required=True, help="The event type waited for.")
@click.option("--payload", help="The event payload, as JSON.")
@json_file_option("--payload-file", "Read the payload (JSON) from FILE; '-' reads stdin.")
@json_option
@pass_state
def send_event(
    state: State,
    name: str,
    instance_id: str,
    event_type: str,
    payload: str | None,
    payload_file: str | None,
    as_json: bool,
) -> None:
    """Send an event to an instance (delivered to `step.wait_for_event(type=...)`)."""
    with cli_errors():
        validate_name(event_type, what="event type")
        value = read_json_input(payload, "--payload", payload_file, "--payload-file")

    async def action(instance: Instance) -> None:
        await instance.send_event(event_type, value)

    record = run_async(_control(state, name, instance_id, action))
    _report(state, record, f'📨 Event "{event_type}" sent to instance "{record.id}"', as_json)


@instances.command("pause", short_help="Pause an instance.")
@workflow_argument
@id_argument
@json_option
@pass_state
def pause(state: State, name: str, instance_id: str, as_json: bool) -> None:
    """Pause an instance: at once if queued or waiting, after its running step otherwise."""

    async def action(instance: Instance) -> None:
        await instance.pause()

    record = run_async(_control(state, name, instance_id, action))
    if record.status == "waitingForPause":
        message = f'⏸ Instance "{record.id}" of "{name}" will pause when its running step ends'
    else:
        message = f'⏸ Instance "{record.id}" of "{name}" was paused'
    _report(state, record, message, as_json)


@instances.command("resume")
@workflow_argument
@id_argument
@json_option
@pass_state
def resume(state: State, name: str, instance_id: str, as_json: bool) -> None:
    """Resume a paused instance."""

    async def action(instance: Instance) -> None:
        await instance.resume()

    record = run_async(_control(state, name, instance_id, action))
    _report(state, record, f'▶ Instance "{record.id}" of "{name}" was resumed', as_json)


@instances.command("terminate")
@workflow_argument
@id_argument
@click.option("--rollback", is_flag=True, help="Run the rollbacks of finished steps first.")
@json_option
@pass_state
def terminate(state: State, name: str, instance_id: str, rollback: bool, as_json: bool) -> None:
    """Terminate an unfinished instance."""

    async def action(instance: Instance) -> None:
        await instance.terminate(rollback=rollback)

    record = run_async(_control(state, name, instance_id, action))
    if record.status == "terminated":
        message = f'🚫 Instance "{record.id}" of "{name}" was terminated'
    else:
        message = (
            f'🚫 Instance "{record.id}" of "{name}" is terminating: a worker runs its '
            "rollbacks, then it ends terminated"
        )
    _report(state, record, message, as_json)


@instances.command("restart")
@workflow_argument
@id_argument
@click.option("--from-step-name", help="Keep the steps recorded before this step.")
@click.option(
    "--from-step-count", type=click.IntRange(min=1), help="Which occurrence of the step [1]."
)
@click.option("--version", "version", help="Run it under this version (default: its own).")
@json_option
@pass_state
def restart(
    state: State,
    name: str,
    instance_id: str,
    from_step_name: str | None,
    from_step_count: int | None,
    version: str | None,
    as_json: bool,
) -> None:
    """Run an instance again from the start, or from one step on, under its own version (or
    --version)."""
    if from_step_count is not None and from_step_name is None:
        fail("--from-step-count needs --from-step-name")

    async def action(instance: Instance) -> None:
        await instance.restart(from_step_name, count=from_step_count or 1, version=version)

    record = run_async(_control(state, name, instance_id, action))
    where = f' from step "{from_step_name}-{from_step_count or 1}"' if from_step_name else ""
    _report(state, record, f'🔄 Instance "{record.id}" of "{name}" was restarted{where}', as_json)


# -- bulk ---------------------------------------------------------------------------------------


async def _ids_with_status(engine: Engine, name: str, statuses: tuple[str, ...]) -> list[str]:
    ids: list[str] = []
    binding = engine.workflow(name)
    for status in statuses:
        cursor: str | None = None
        while True:
            page = await binding.list(status=status, limit=500, cursor=cursor)
            ids.extend(record.id for record in page.instances)
            cursor = page.cursor
            if cursor is None:
                break
    return ids


async def _terminate_all(
    state: State, name: str, statuses: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    async with state.client() as engine:
        await check_workflow(engine, state, name)
        done: list[str] = []
        skipped: list[str] = []
        for instance_id in await _ids_with_status(engine, name, statuses):
            try:
                await (await engine.get_instance(name, instance_id)).terminate()
            except (IllegalStateError, InstanceNotFoundError):
                skipped.append(instance_id)  # it finished (or was deleted) meanwhile
            else:
                done.append(instance_id)
        return done, skipped


@instances.command("terminate-all")
@workflow_argument
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(UNFINISHED),
    help="Only instances with this status (repeatable; default: every unfinished one).",
)
@json_option
@pass_state
def terminate_all(state: State, name: str, statuses: tuple[str, ...], as_json: bool) -> None:
    """Terminate every unfinished instance of workflow NAME."""
    done, skipped = run_async(_terminate_all(state, name, statuses or UNFINISHED))
    if as_json:
        print_json({"terminated": done, "skipped": skipped})
        return
    message = f'🚫 Terminated {plural(len(done), "instance")} of workflow "{name}"'
    if skipped:
        message += f" ({len(skipped)} finished meanwhile)"
    state.out.print(Text(message))


async def _delete_ids(state: State, name: str, ids: tuple[str, ...], force: bool) -> int:
    async with state.client() as engine:
        await check_workflow(engine, state, name)
        # Resolved first, so that an unknown id (or `latest` of none) is an error; the status
        # rule is the client's, checked in the deleting transaction (all or nothing).
        resolved = [(await resolve_instance(engine, state, name, i)).id for i in ids]
        return await engine.workflow(name).delete(resolved, force=force)


async def _purge(state: State, name: str, statuses: tuple[str, ...], age: float) -> int:
    async with state.client() as engine:
        await check_workflow(engine, state, name)
        return await engine.workflow(name).purge(statuses=statuses, older_than=age)


@instances.command("delete", short_help="Delete instances by id, or by status and age.")
@workflow_argument
@click.argument("instance_ids", metavar="[ID...]", nargs=-1)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(FINISHED),
    help="Delete finished instances with this status (repeatable).",
)
@click.option(
    "--older-than", help="Delete finished instances that ended this long ago, e.g. '7 days'."
)
@click.option("--force", is_flag=True, help="Also delete unfinished instances given by id.")
@json_option
@pass_state
def delete(
    state: State,
    name: str,
    instance_ids: tuple[str, ...],
    statuses: tuple[str, ...],
    older_than: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Delete instances with their steps and events: by id, or by status and age.

    \b
    stepline workflows instances delete NAME ID [ID...]
    stepline workflows instances delete NAME --older-than "7 days" [--status complete]
    """
    if instance_ids and (statuses or older_than):
        fail("give instance ids, or --status/--older-than, not both")
    if not instance_ids and not statuses and not older_than:
        fail("give instance ids to delete, or --older-than (and --status) to delete by age")
    if instance_ids:
        count = run_async(_delete_ids(state, name, instance_ids, force))
        what = ""
    else:
        with cli_errors():
            age = (
                parse_duration(older_than, what="--older-than", allow_zero=True)
                if older_than
                else 0.0
            )
        chosen = statuses or FINISHED
        count = run_async(_purge(state, name, chosen, age))
        what = f" ({'/'.join(chosen)}"
        what += f", ended over {format_duration(age)} ago)" if age else ")"
    if as_json:
        print_json({"deleted": count})
        return
    state.out.print(Text(f'🗑 Deleted {plural(count, "instance")} of workflow "{name}"{what}'))
