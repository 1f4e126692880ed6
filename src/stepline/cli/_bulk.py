"""``stepline workflows instances bulk ACTION`` (a bulk action by filter, or its dry run) and
``stepline bulk list|describe|cancel|wait`` (the durable jobs and their progress)."""

from __future__ import annotations

import getpass
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..store.operations import BULK_ACTIONS, BulkJob
from ._common import State, json_option, pass_state, print_json, run_async
from ._filters import WHERE_HELP
from ._instances import instances
from ._render import fmt_time


@instances.command("bulk", short_help="Act on every instance a filter matches (a durable job).")
@click.argument("action", type=click.Choice(BULK_ACTIONS))
@click.option("--where", metavar="FILTER", help=WHERE_HELP)
@click.option("--workflow", "workflow", metavar="NAME", help="Only instances of this workflow.")
@click.option("--from-step", metavar="STEP", help="restart: from this step (its first run).")
@click.option(
    "--dry-run", is_flag=True, help="Print how many match and the first ones; change nothing."
)
@click.option("--wait", "wait", is_flag=True, help="Wait until a worker has finished the job.")
@json_option
@pass_state
def bulk_action(
    state: State,
    action: Any,
    where: str | None,
    workflow: str | None,
    from_step: str | None,
    dry_run: bool,
    wait: bool,
    as_json: bool,
) -> None:
    """Start a durable job that applies ACTION (terminate, pause, resume, restart, delete) to
    every instance matching --where (and --workflow) now. Running workers act on them in
    batches, each exactly once, and resume after any crash; `stepline bulk describe ID` shows
    the progress. delete acts on finished instances only."""

    async def go() -> Any:
        async with state.client() as engine:
            if dry_run:
                return await engine.bulk.dry_run(action, where, workflow=workflow)
            job = await engine.bulk.start(
                action, where, workflow=workflow, from_step=from_step, started_by=_who()
            )
            return await engine.bulk.wait(job.id) if wait else job

    result = run_async(go())
    if as_json:
        print_json(result.to_json())
        return
    if not isinstance(result, BulkJob):
        state.out.print(Text(_matched(result.count, action)))
        for record in result.first:
            state.out.print(Text(f"  {record.workflow}  {record.id}  {record.status}"))
        if result.count > len(result.first):
            state.out.print(Text(f"  ... and {result.count - len(result.first)} more"))
        return
    _print_job(state, result)


def _matched(count: int, action: str) -> str:
    """A dry run's first line, in words that fit the count."""
    if count == 0:
        return f"No instance matches: {action} would act on none"
    if count == 1:
        return f"1 instance matches: {action} would act on it"
    return f"{count:,} instances match: {action} would act on them"


@click.group("bulk")
def bulk() -> None:
    """Bulk jobs: their progress, and cancelling one."""


@bulk.command("list")
@click.option("--status", type=click.Choice(("running", "complete", "cancelled")))
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@json_option
@pass_state
def list_jobs(state: State, status: Any, limit: int, as_json: bool) -> None:
    """The latest bulk jobs, newest first."""

    async def go() -> list[BulkJob]:
        async with state.client() as engine:
            return await engine.bulk.list(status=status, limit=limit)

    jobs = run_async(go())
    if as_json:
        print_json([job.to_json() for job in jobs])
        return
    if not jobs:
        state.out.print(Text("There are no bulk jobs"))
        return
    table = Table("Id", "Action", "Status", "Done", "Skipped", "Total", "Created", "By", "Filter")
    for job in jobs:
        table.add_row(
            job.id, job.action, job.status, str(job.done), str(job.skipped), str(job.total),
            fmt_time(job.created_at), Text(job.started_by or "-"), Text(job.filter),
        )  # fmt: skip
    state.out.print(table)


def _job_command(name: str, doc: str) -> Any:
    @bulk.command(name, help=doc)
    @click.argument("job_id", metavar="ID")
    @json_option
    @pass_state
    def command(state: State, job_id: str, as_json: bool) -> None:
        async def go() -> BulkJob:
            async with state.client() as engine:
                if name == "cancel":
                    return await engine.bulk.cancel(job_id)
                if name == "wait":
                    return await engine.bulk.wait(job_id)
                return await engine.bulk.get(job_id)

        job = run_async(go())
        if as_json:
            print_json(job.to_json())
            return
        _print_job(state, job)

    return command


describe_job = _job_command("describe", "A bulk job's filter, status and progress.")
cancel_job = _job_command(
    "cancel", "Stop a running bulk job: no batch acts after this (what was done stays done)."
)
wait_job = _job_command("wait", "Wait until a bulk job has ended, then describe it.")


def _who() -> str:
    """Who starts a job from the shell: the OS user, as the job shows it (``alice (cli)``)."""
    try:
        return f"{getpass.getuser()} (cli)"
    except (OSError, KeyError):  # no name for this uid (a bare container)
        return "cli"


def _print_job(state: State, job: BulkJob) -> None:
    lines = [
        f"Bulk job {job.id}: {job.action} {job.status}",
        f"Filter: {job.filter}" + (f" (from step {job.from_step})" if job.from_step else ""),
        f"Progress: {job.done} done, {job.skipped} skipped, of {job.total}",
        f"Created: {fmt_time(job.created_at)}",
    ]
    if job.ended_at is not None:
        lines.append(f"Ended: {fmt_time(job.ended_at)}")
    if job.started_by:
        lines.append(f"Started by: {job.started_by}")
    if job.last_skip:
        lines.append(f"Last skipped: {job.last_skip}")
    for line in lines:
        state.out.print(Text(line))
