"""``stepline workers list``: the workers registered in the database, live or not."""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.table import Table
from rich.text import Text

from ..records import WorkerInfo
from ._common import State, json_option, pass_state, print_json, run_async
from ._render import fmt_span, fmt_time, plural, simple_table


@click.group("workers")
def workers() -> None:
    """Show which workers are running (each registers itself with a heartbeat)."""


async def _list(state: State) -> tuple[list[WorkerInfo], float]:
    async with state.client() as engine:
        return await engine.list_workers(), engine.now()


def workers_table(rows: Sequence[WorkerInfo], now: float) -> Table:
    table = simple_table(
        ["Id", "Host", "PID", "State", "Started", "Last seen", "Running", "Workflows"],
        wrap=["Workflows"],
    )
    for row in rows:
        state = Text("● live", style="green") if row.live(now) else Text("✖ dead", style="red")
        table.add_row(
            row.id,
            row.host,
            str(row.pid),
            state,
            fmt_time(row.started_at),
            f"{fmt_span(row.last_seen, now)} ago",
            f"{row.running}/{row.concurrency}",
            ", ".join(row.workflows) or "-",
        )
    return table


@workers.command("list")
@json_option
@pass_state
def list_workers(state: State, as_json: bool) -> None:
    """List the workers: id, host, pid, live or dead, started, last heartbeat, activations
    running out of their concurrency, workflows served.

    A worker is live while its last heartbeat is at most 3 of its heartbeat intervals old; a
    dead worker's row is deleted once it is 20 intervals old.
    """
    rows, now = run_async(_list(state))
    if as_json:
        print_json([row.to_json(now) for row in rows])
        return
    if not rows:
        state.out.print(
            Text(
                "No workers are registered: start one with `stepline worker` (queued instances "
                "wait until a worker runs their workflow)."
            )
        )
        return
    live = sum(1 for row in rows if row.live(now))
    state.out.print(Text(f"Showing {plural(len(rows), 'worker')} ({live} live):"))
    state.out.print(workers_table(rows, now))
