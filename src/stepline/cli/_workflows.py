"""``stepline workflows list | describe | trigger | versions``."""

from __future__ import annotations

from typing import Any

import click
from rich.text import Text

from .._json import parse_json_argument
from ..errors import DuplicateInstanceError, WorkflowNotFoundError
from ..operations.language.tags import parse_tag_option
from ..project import load_workflow
from ..records import WorkflowInfo
from ..versions import VersionState
from ..workflow import definition_of, validate_name
from ._common import (
    State,
    cli_errors,
    json_file_option,
    json_option,
    pass_state,
    print_json,
    read_json_input,
    run_async,
)
from ._render import describe_workflow, plural, versions_table, workflows_table


def complete_workflow(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of workflow names: configured ones (no database access)."""
    state = ctx.find_object(State)
    try:
        names = (state or State()).project.workflow_names
    except click.ClickException:
        return []
    return [name for name in names if name.startswith(incomplete)]


workflow_argument = click.argument("name", shell_complete=complete_workflow)


@click.group("workflows")
def workflows() -> None:
    """List, describe and trigger workflows; manage their instances."""


async def _database_workflows(state: State) -> dict[str, WorkflowInfo]:
    """Workflows registered in the database (none when the SQLite file does not exist yet)."""
    if not state.database_exists():
        return {}
    async with state.client() as engine:
        return {info.name: info for info in await engine.list_workflows()}


async def registrations(state: State, name: str, *, configured: bool = False) -> list[Any]:
    """What a client engine registers to use workflow ``name``: nothing if the database knows
    it (unless ``configured``: then its class whenever stepline.toml configures it, so that
    its declared schedules are known), its configured class if only stepline.toml does; an
    unknown name raises ``WorkflowNotFoundError`` listing the known ones."""
    state.require_database()
    in_database = await _database_workflows(state)
    known = sorted({*in_database, *state.project.workflow_names})
    if name not in known:
        raise WorkflowNotFoundError(name, known)
    entry = state.project.entry(name)
    if (configured or name not in in_database) and entry is not None:
        return [load_workflow(state.project, entry)]
    return []


async def _all_workflows(state: State) -> list[WorkflowInfo]:
    """Workflows in the database, plus configured ones no worker has registered yet."""
    found = await _database_workflows(state)
    for entry in state.project.workflows:
        if entry.name not in found:
            found[entry.name] = WorkflowInfo(entry.name, entry.class_name, 0.0, 0.0)
    return [found[name] for name in sorted(found)]


def _info_json(info: WorkflowInfo, state: State) -> dict[str, Any]:
    data = info.to_json()
    if not info.created_at:
        data["created_at"] = data["updated_at"] = None
    data["configured"] = state.project.entry(info.name) is not None
    return data


@workflows.command("list")
@json_option
@pass_state
def list_workflows(state: State, as_json: bool) -> None:
    """List the workflows: name, class, created, modified and instance counts by status."""
    rows = run_async(_all_workflows(state))
    if as_json:
        print_json([_info_json(info, state) for info in rows])
        return
    if not rows:
        missing = state.missing_database()  # a typo in the path looks like an empty project
        state.out.print(
            Text(
                "No workflows yet"
                + (f", and {missing}" if missing else "")
                + ": add [[workflows]] to stepline.toml, or use "
                "`stepline run path/to/file.py:ClassName`."
            )
        )
        return
    state.out.print(Text(f"Showing {plural(len(rows), 'workflow')}:"))
    state.out.print(workflows_table(rows))


async def _describe(state: State, name: str) -> WorkflowInfo:
    validate_name(name, what="workflow name")
    found = await _database_workflows(state)
    if name in found:
        return found[name]
    entry = state.project.entry(name)
    if entry is None:
        raise WorkflowNotFoundError(name, sorted({*found, *state.project.workflow_names}))
    definition = definition_of(load_workflow(state.project, entry))
    return WorkflowInfo(
        name,
        entry.class_name,
        0.0,
        0.0,
        definition.describe(),
        limits=definition.limits.to_json(),
        retention=definition.retention,
    )


@workflows.command("describe")
@workflow_argument
@json_option
@pass_state
def describe(state: State, name: str, as_json: bool) -> None:
    """Show a workflow's definition: class, description, steps when known, instance counts."""
    info = run_async(_describe(state, name))
    if as_json:
        print_json(_info_json(info, state))
        return
    entry = state.project.entry(name)
    configured = f"{state.project.path} ({entry.key})" if entry is not None else None
    state.out.print(describe_workflow(info, configured))


async def _trigger(
    state: State, name: str, params: Any, instance_id: str | None, flow: dict[str, Any]
) -> tuple[str, bool]:
    """The instance's id, and False when ``flow``'s dedup key named an unfinished instance
    instead of creating one."""
    validate_name(name, what="workflow name")
    if instance_id is not None:
        validate_name(instance_id, what="instance id")
    async with state.client(await registrations(state, name)) as engine:
        try:
            instance = await engine.workflow(name).create(
                instance_id, params, trigger="cli", on_duplicate="raise", **flow
            )
        except DuplicateInstanceError as exc:
            return exc.instance_id, False
        return instance.id, True


@workflows.command("trigger")
@workflow_argument
@click.argument("params_json", required=False, metavar="[PARAMS_JSON]")
@json_file_option("--params-file", "Read the params (JSON) from FILE; '-' reads stdin.")
@click.option("--id", "instance_id", help="Instance id (default: a random UUID).")
@click.option("--key", help="Flow control key: the workflow's key_concurrency applies per key.")
@click.option("--priority", type=int, default=0, show_default=True,
              help="Lower runs first among runnable instances.")  # fmt: skip
@click.option("--dedup-key", help="Create nothing if an unfinished instance has this key.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE",
              help="A tag to find it by (repeatable); true/false, numbers typed.")  # fmt: skip
@click.option("--version", help="The workflow version to run it (default: the newest).")
@click.option("--retention", "retention_json", metavar="JSON",
              help='Keep it so long once ended: \'{"complete": "1 day"}\'.')  # fmt: skip
@click.option("--timeout", help="The instance's deadline from now, e.g. '2 hours' (default: "
              "the workflow's timeout).")  # fmt: skip
@click.option("--on-conflict", type=click.Choice(["debounce", "replace_queued"]),
              help="With --key: debounce a burst of creates (with --debounce), or replace the "
              "key's instances that have not started.")  # fmt: skip
@click.option("--debounce", help="The quiet period of --on-conflict debounce, e.g. '5 seconds'.")
@json_option
@pass_state
def trigger(
    state: State,
    name: str,
    params_json: str | None,
    params_file: str | None,
    instance_id: str | None,
    key: str | None,
    priority: int,
    dedup_key: str | None,
    tags: tuple[str, ...],
    version: str | None,
    retention_json: str | None,
    timeout: str | None,
    on_conflict: str | None,
    debounce: str | None,
    as_json: bool,
) -> None:
    """Create (queue) an instance of NAME with PARAMS_JSON (or --params-file) as its params.

    A running `stepline worker` picks it up. The database must exist (`stepline db init`).
    """
    with cli_errors():
        params = read_json_input(params_json, "PARAMS_JSON", params_file, "--params-file")
    flow: dict[str, Any] = {
        "key": key,
        "priority": priority,
        "dedup_key": dedup_key,
        "version": version,
    }
    with cli_errors():
        flow["tags"] = dict(parse_tag_option(option) for option in tags)
    if retention_json is not None:
        with cli_errors():
            flow["retention"] = parse_json_argument(retention_json, what="--retention")
    flow |= {"timeout": timeout, "on_conflict": on_conflict, "debounce": debounce}
    created, new = run_async(_trigger(state, name, params, instance_id, flow))
    if not new:
        if as_json:
            print_json({"workflow": name, "id": created, "duplicate": True})
            return
        state.out.print(
            Text(f'🔁 Workflow instance "{created}" holds dedup key "{dedup_key}": not created')
        )
        return
    if as_json:
        print_json({"workflow": name, "id": created, "status": "queued"})
        return
    state.out.print(Text(f'🚀 Workflow instance "{created}" has been queued successfully'))


async def _versions(state: State, name: str) -> list[VersionState]:
    validate_name(name, what="workflow name")
    state.require_database()
    async with state.client() as engine:
        return await engine.workflow_versions(name)


@workflows.command("versions")
@workflow_argument
@json_option
@pass_state
def versions(state: State, name: str, as_json: bool) -> None:
    """Show a deploy of NAME: per version, unfinished and finished instances by status, the
    live workers that serve it, and "drained" once nothing of it is unfinished."""
    found = run_async(_versions(state, name))
    if as_json:
        print_json([version.to_json() for version in found])
        return
    state.out.print(versions_table(name, found))
