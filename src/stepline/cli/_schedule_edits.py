"""``stepline schedules create / update / delete``: schedules made at run time (those declared
in code are read-only here; pause and resume work on both)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from rich.text import Text

from .._json import parse_json_argument
from ..schedule import CATCH_UPS, OVERLAPS
from ..triggers.cron import ScheduleInfo
from ._common import (
    State,
    cli_errors,
    json_option,
    pass_state,
    print_json,
    run_async,
)
from ._render import fmt_time
from ._schedules import name_argument, schedules
from ._workflows import registrations


def _definition_options(*, create: bool) -> Callable[[Any], Any]:
    """The options of a schedule's definition: required by ``create`` where it has no default."""
    options = [
        click.option("--workflow", metavar="W", required=create, help="The workflow it creates."),
        click.option(
            "--cron", metavar="EXPR", required=create, help="Five fields, e.g. '0 9 * * MON-FRI'."
        ),
        click.option("--timezone", metavar="ZONE", help="IANA zone of the ticks (default UTC)."),
        click.option(
            "--params",
            "params_json",
            metavar="JSON",
            help="The params (JSON) of every instance it creates.",
        ),
        click.option(
            "--catch-up",
            type=click.Choice(CATCH_UPS),
            help="Which missed ticks still fire (default skip).",
        ),
        click.option(
            "--catch-up-limit",
            type=int,
            metavar="N",
            help="At most N missed ticks with --catch-up all (default 100).",
        ),
        click.option(
            "--overlap",
            type=click.Choice(OVERLAPS),
            help="A tick while the previous instance runs (default allow).",
        ),
    ]

    def apply(command: Any) -> Any:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def _given(**values: Any) -> dict[str, Any]:
    """The definition fields given on the command line (``--params`` parsed as JSON)."""
    params_json = values.pop("params_json")
    given = {key: value for key, value in values.items() if value is not None}
    if params_json is not None:
        with cli_errors():
            given["params"] = parse_json_argument(params_json, what="--params")
    return given


def _done(state: State, info: ScheduleInfo, verb: str, as_json: bool) -> None:
    if as_json:
        print_json(info.to_json())
        return
    record = info.record
    state.out.print(
        Text(
            f'⏰ Schedule "{info.name}" of "{record.workflow}" {verb}: {record.cron} '
            f"({record.timezone}), next run {fmt_time(info.next_run)}"
        )
    )


async def _create(state: State, name: str, fields: dict[str, Any]) -> ScheduleInfo:
    workflow, cron = fields.pop("workflow"), fields.pop("cron")
    async with state.client(await registrations(state, workflow, configured=True)) as engine:
        return await engine.schedules().create(name, workflow, cron, **fields)


@schedules.command("create")
@name_argument
@_definition_options(create=True)
@json_option
@pass_state
def create(state: State, /, name: str, as_json: bool, **values: Any) -> None:
    """Create schedule NAME at run time: the workers serving its workflow fire its ticks from
    now on, exactly once each, without a restart.

    NAME must not be taken, by a schedule declared in code included.
    """
    info = run_async(_create(state, name, _given(**values)))
    _done(state, info, "created", as_json)


async def _update(state: State, name: str, fields: dict[str, Any]) -> ScheduleInfo:
    workflow = fields.get("workflow")
    registered = [] if workflow is None else await registrations(state, workflow, configured=True)
    async with state.client(registered) as engine:
        return await engine.schedules().update(name, **fields)


@schedules.command("update")
@name_argument
@_definition_options(create=False)
@json_option
@pass_state
def update(state: State, /, name: str, as_json: bool, **values: Any) -> None:
    """Change the given fields of a schedule made at run time; the rest stays, and so do its
    paused state and last tick. Schedules declared in code change only in code."""
    fields = _given(**values)
    if not fields:
        raise click.UsageError("give at least one field to change, e.g. --cron '0 3 * * *'")
    info = run_async(_update(state, name, fields))
    _done(state, info, "updated", as_json)


async def _delete(state: State, name: str) -> ScheduleInfo:
    async with state.client() as engine:
        return await engine.schedules().delete(name)


@schedules.command("delete")
@name_argument
@json_option
@pass_state
def delete(state: State, name: str, as_json: bool) -> None:
    """Delete a schedule made at run time (the instances it created stay). Schedules declared
    in code are removed from code."""
    info = run_async(_delete(state, name))
    if as_json:
        print_json(info.to_json())
        return
    state.out.print(Text(f'⏰ Schedule "{info.name}" of "{info.record.workflow}" deleted'))
