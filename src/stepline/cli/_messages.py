"""``stepline workflows instances query|update|subscribe``: talking to a running instance
(docs/messaging.md). A query is replayed here when the project configures the workflow's code,
else a live worker answers it."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import click
import orjson

from .._json import parse_json_argument
from ..client import Instance
from ..durations import parse_duration
from ..messages import Messaging, check_cursor, check_update_id
from ..project import load_workflow
from ..workflow import WorkflowDefinition, definition_of
from ._common import (
    CliFailure,
    State,
    cli_errors,
    pass_state,
    print_json,
    resolve_instance,
    run_async,
)
from ._instances import id_argument, instances
from ._workflows import workflow_argument


def _args(values: tuple[str, ...]) -> list[Any]:
    return [parse_json_argument(text, what=f"argument {n}") for n, text in enumerate(values, 1)]


def _code(state: State, name: str) -> dict[str, WorkflowDefinition]:
    """The workflow's code if the project configures it (then queries are replayed here)."""
    for entry in state.project.workflows:
        if entry.name == name:
            return {name: definition_of(load_workflow(state.project, entry))}
    return {}


def _seconds(timeout: str | None) -> float | None:
    return None if timeout is None else parse_duration(timeout, what="--timeout", allow_zero=True)


async def _on_instance(
    state: State, name: str, instance_id: str, code: dict[str, WorkflowDefinition], use: Any
) -> Any:
    async with state.client() as engine:
        record = await resolve_instance(engine, state, name, instance_id)
        max_payload = engine.settings.max_payload
        messaging = Messaging(engine.store, max_payload, code, payloads=engine.payloads)
        instance = Instance(
            engine.store, name, record.id, max_payload, messaging, payloads=engine.payloads
        )
        return await use(instance)


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        return run_async(coro)
    except TimeoutError as exc:
        raise CliFailure(str(exc)) from None


@instances.command("query", short_help="Ask an instance a query (answered from its history).")
@workflow_argument
@id_argument
@click.argument("query")
@click.argument("args", nargs=-1)
@click.option("--timeout", help="How long a worker may take to answer (default 10 seconds).")
@pass_state
def query(
    state: State,
    name: str,
    instance_id: str,
    query: str,
    args: tuple[str, ...],
    timeout: str | None,
) -> None:
    """Print the answer (JSON) of the workflow's query QUERY, each of ARGS a JSON value.

    The instance's recorded history is replayed (no step runs, nothing changes): here if
    stepline.toml configures the workflow, else by a live worker that serves it.
    """
    with cli_errors():
        values = _args(args)
        seconds = _seconds(timeout)
        code = _code(state, name)

    async def ask(instance: Instance) -> Any:
        return await instance.query(query, *values, timeout=seconds)

    print_json(_run(_on_instance(state, name, instance_id, code, ask)))


@instances.command("update", short_help="Send an instance an update and print its reply.")
@workflow_argument
@id_argument
@click.argument("update")
@click.argument("args", nargs=-1)
@click.option(
    "--update-id", help="Idempotency key: the same id gets the recorded reply, no second run."
)
@click.option("--timeout", help="How long to wait for the reply (default: no limit).")
@pass_state
def update(
    state: State,
    name: str,
    instance_id: str,
    update: str,
    args: tuple[str, ...],
    update_id: str | None,
    timeout: str | None,
) -> None:
    """Send the workflow's update UPDATE (each of ARGS a JSON value), wait for its handler to
    run, and print its reply (JSON). The update is recorded before this waits: after a timeout,
    the same command with the same --update-id waits again for the same reply."""
    with cli_errors():
        values = _args(args)
        seconds = _seconds(timeout)
        chosen = check_update_id(update_id)
        code = _code(state, name)

    async def send(instance: Instance) -> Any:
        return await instance.update(update, *values, update_id=chosen, timeout=seconds)

    print_json(_run(_on_instance(state, name, instance_id, code, send)))


@instances.command("subscribe", short_help="Print the items of a stream as they come.")
@workflow_argument
@id_argument
@click.option("--stream", required=True, help="The stream's name (what step.publish names).")
@click.option("--after", default=0, help="Print the items after this seq (a cursor).")
@click.option("--no-follow", is_flag=True, help="Stop at the last item stored.")
@pass_state
def subscribe(
    state: State, name: str, instance_id: str, stream: str, after: int, no_follow: bool
) -> None:
    """Print each item of the instance's stream STREAM after --after, one JSON line each
    ({"seq", "value", "created_at"}), following it until the instance ends."""
    with cli_errors():
        cursor = check_cursor(after)

    async def read(instance: Instance) -> None:
        async for item in instance.subscribe(stream, after=cursor, follow=not no_follow):
            line = {"seq": item.seq, "value": item.value, "created_at": item.created_at}
            click.echo(orjson.dumps(line).decode())

    _run(_on_instance(state, name, instance_id, {}, read))
