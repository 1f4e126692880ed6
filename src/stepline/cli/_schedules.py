"""``stepline schedules ...``: list, pause, resume, trigger and backfill cron schedules (create,
update and delete are in :mod:`._schedule_edits`)."""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.table import Table
from rich.text import Text

from ..records import InstanceRecord
from ..triggers.cron import Backfill, ScheduleInfo, parse_moment
from ._common import (
    State,
    check_workflow,
    cli_errors,
    json_option,
    pass_state,
    print_json,
    run_async,
)
from ._render import fmt_time, plural, simple_table, status_text

name_argument = click.argument("name", metavar="NAME")


@click.group("schedules")
def schedules() -> None:
    """Create, update, delete, list, pause, resume, trigger and backfill cron schedules.

    A worker serving a workflow with schedules stores them in the database when it starts;
    `create` stores one at run time. These commands act on the stored schedules.
    """


def policies_text(info: ScheduleInfo) -> str:
    record = info.record
    catch_up = record.catch_up
    if catch_up == "all":
        catch_up = f"all (at most {record.catch_up_limit})"
    return f"catch-up {catch_up}, overlap {record.overlap}"


def schedules_table(rows: Sequence[ScheduleInfo]) -> Table:
    table = simple_table(
        [
            "Name",
            "Source",
            "Workflow",
            "Cron",
            "Timezone",
            "State",
            "Last run",
            "Next run",
            "Policies",
        ],
        wrap=["Policies"],
    )
    for row in rows:
        record = row.record
        state = (
            Text("⏸ paused", style="yellow") if record.paused else Text("▶ active", style="green")
        )
        table.add_row(
            record.name,
            record.source,
            record.workflow,
            record.cron,
            record.timezone,
            state,
            fmt_time(row.last_run),
            fmt_time(row.next_run),
            policies_text(row),
        )
    return table


async def _list(state: State, workflow: str | None) -> list[ScheduleInfo]:
    async with state.client() as engine:
        if workflow is not None:
            await check_workflow(engine, state, workflow)
        return await engine.schedules().list(workflow)


@schedules.command("list")
@click.option("--workflow", metavar="W", help="Only the schedules of workflow W.")
@json_option
@pass_state
def list_schedules(state: State, workflow: str | None, as_json: bool) -> None:
    """List the stored schedules: name, workflow, cron, time zone, paused or not, last run
    (the latest tick handled), next run (none while paused), catch-up and overlap policies."""
    rows = run_async(_list(state, workflow))
    if as_json:
        print_json([row.to_json() for row in rows])
        return
    if not rows:
        which = f' of workflow "{workflow}"' if workflow else ""
        state.out.print(
            Text(
                f"No schedules{which} are stored: a worker serving a workflow with schedules "
                "stores them when it starts."
            )
        )
        return
    paused = sum(1 for row in rows if row.record.paused)
    state.out.print(Text(f"Showing {plural(len(rows), 'schedule')} ({paused} paused):"))
    state.out.print(schedules_table(rows))


async def _pause(state: State, name: str, paused: bool) -> ScheduleInfo:
    async with state.client() as engine:
        client = engine.schedules()
        return await (client.pause(name) if paused else client.resume(name))


@schedules.command("pause")
@name_argument
@json_option
@pass_state
def pause(state: State, name: str, as_json: bool) -> None:
    """Stop firing a schedule's ticks until it is resumed (its running instances go on)."""
    info = run_async(_pause(state, name, True))
    if as_json:
        print_json(info.to_json())
        return
    state.out.print(Text(f'⏸ Schedule "{info.name}" of "{info.record.workflow}" is paused'))


@schedules.command("resume")
@name_argument
@json_option
@pass_state
def resume(state: State, name: str, as_json: bool) -> None:
    """Fire a paused schedule's ticks again from now on (the ticks due while it was paused
    are skipped, whatever its catch-up policy)."""
    info = run_async(_pause(state, name, False))
    if as_json:
        print_json(info.to_json())
        return
    state.out.print(
        Text(
            f'▶ Schedule "{info.name}" of "{info.record.workflow}" is active '
            f"(next run {fmt_time(info.next_run)})"
        )
    )


def _moment(value: str, option: str) -> float:
    with cli_errors():
        return parse_moment(value, option)


async def _trigger(state: State, name: str, at: float | None) -> InstanceRecord:
    async with state.client() as engine:
        return await engine.schedules().trigger(name, at)


@schedules.command("trigger")
@name_argument
@click.option(
    "--at",
    metavar="TIME",
    help="The tick to create (truncated to its minute): ISO 8601 (UTC without an offset) or "
    "seconds since the epoch. Default: now.",
)
@json_option
@pass_state
def trigger(state: State, name: str, at: str | None, as_json: bool) -> None:
    """Create the instance of one tick now, as the scheduler would (same id, trigger cron).

    If that tick's instance exists already it is shown unchanged: a tick never runs twice.
    Works on a paused schedule; the schedule's state is not changed.
    """
    moment = None if at is None else _moment(at, "--at")
    record = run_async(_trigger(state, name, moment))
    if as_json:
        print_json(record.to_json())
        return
    text = Text(f'⏰ Schedule "{name}": instance "{record.id}" of "{record.workflow}" (')
    text.append_text(status_text(record.status))
    text.append(")")
    state.out.print(text)


async def _backfill(state: State, name: str, start: float, end: float) -> Backfill:
    async with state.client() as engine:
        return await engine.schedules().backfill(name, start, end)


@schedules.command("backfill")
@name_argument
@click.option("--from", "start", metavar="T", required=True, help="The range's start (ISO 8601 "
              "or seconds since the epoch), included.")  # fmt: skip
@click.option("--to", "end", metavar="T", required=True, help="The range's end, included.")
@json_option
@pass_state
def backfill(state: State, name: str, start: str, end: str, as_json: bool) -> None:
    """Create the instances of every tick from --from to --to, oldest first.

    Ticks whose instance exists are left as they are (so a backfill can be repeated). A range
    of more than 10,000 ticks is refused and creates nothing. The schedule's state is not
    changed.
    """
    first, last = _moment(start, "--from"), _moment(end, "--to")
    done = run_async(_backfill(state, name, first, last))
    if as_json:
        print_json(
            {
                "schedule": name,
                "count": len(done),
                "created": done.created,
                "existing": done.existing,
                "instances": [{"id": r.id, "status": r.status} for r in done],
            }
        )
        return
    if not done:
        state.out.print(Text(f'⏰ No ticks of schedule "{name}" fall in that range'))
        return
    state.out.print(
        Text(
            f'⏰ Backfilled schedule "{name}" (workflow "{done[0].workflow}"): '
            f"{plural(done.created, 'instance')} created, {done.existing} existed already: "
            + ", ".join(r.id for r in done)
        )
    )
