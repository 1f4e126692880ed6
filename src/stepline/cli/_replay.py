"""``stepline workflows replay-check NAME``: replay recorded histories from the project's
database through the code as it is now, before a deploy (docs/versioning.md)."""

from __future__ import annotations

import time
from datetime import datetime

import click
from rich.text import Text

from ..durations import parse_duration
from ..project import load_workflow
from ..replaycheck import STATUSES, ReplayReport, replay_check
from ..workflow import validate_name
from ._common import State, fail, json_option, pass_state, print_json, run_async
from ._render import plural
from ._workflows import workflow_argument, workflows


def parse_since(value: str) -> float:
    """``--since``: a duration back from now ("7 days") or an ISO 8601 time (UTC if no zone)."""
    try:
        return time.time() - parse_duration(value, what="--since", allow_zero=True)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        fail(f"--since {value!r} is neither a duration ('7 days') nor an ISO 8601 time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.now().astimezone().tzinfo)
    return moment.timestamp()


async def _check(
    state: State, name: str, statuses: tuple[str, ...], limit: int | None, since: float | None
) -> ReplayReport:
    validate_name(name, what="workflow name")
    entry = state.project.entry(name)
    if entry is None:
        # replay needs today's code, which only stepline.toml names (the database has none)
        known = ", ".join(repr(n) for n in state.project.workflow_names) or "none"
        fail(
            f"replay-check needs the code of {name!r}: name it in stepline.toml "
            f'([[workflows]] name = "{name}", class_name = "module:Class"); '
            f"workflows stepline.toml names: {known}"
        )
    # every version stepline.toml lists for the name: each instance replays on its own
    code = [load_workflow(state.project, e) for e in state.project.workflows if e.name == name]
    state.require_database()
    return await replay_check(
        state.project.database,
        code,
        statuses=statuses or None,
        limit=limit,
        since=since,
        payloads=state.project.payloads,
    )


@workflows.command("replay-check")
@workflow_argument
@click.option("--status", "statuses", multiple=True, type=click.Choice(STATUSES),
              help="Only instances in this status (repeatable; default: all).")  # fmt: skip
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Replay at most this many instances, newest first.")  # fmt: skip
@click.option("--all", "replay_all", is_flag=True, help="Replay every instance (no --limit).")
@click.option("--since", help="Only instances created since: '7 days' (ago) or an ISO time.")
@json_option
@pass_state
def replay_check_command(
    state: State,
    name: str,
    statuses: tuple[str, ...],
    limit: int,
    replay_all: bool,
    since: str | None,
    as_json: bool,
) -> None:
    """Replay NAME's recorded instances through the code as it is now; exit 1 naming each
    instance and the step where it diverges, 0 when all replay.

    Runs no step callback and changes nothing: the database is opened read-only. The code is
    the project's (stepline.toml's [[workflows]] entry for NAME).
    """
    after = parse_since(since) if since is not None else None
    report = run_async(_check(state, name, statuses, None if replay_all else limit, after))
    if as_json:
        print_json(
            {
                "workflow": name,
                "replayed": len(report.results),
                "diverged": [r.to_json() for r in report.diverged],
                "seconds": round(report.seconds, 3),
            }
        )
    else:
        for result in report.diverged:
            where = f" at step {result.step!r}" if result.step else ""
            state.out.print(
                Text(f"✗ {result.workflow}/{result.id} ({result.status}) diverges{where}: ")
                + Text(str(result.message))
            )
        count = plural(len(report.results), "instance")
        if report.ok:
            state.out.print(
                Text(
                    f"✓ {count} of {name} replayed in {report.seconds:.1f}s: all follow their "
                    "history"
                )
            )
        else:
            state.out.print(
                Text(f"✗ {len(report.diverged)} of {count} of {name} diverge from their history")
            )
    if not report.ok:
        raise SystemExit(1)
