"""Answering a query: here, by replaying the instance with the workflow's code when this process
has it; otherwise by asking a live worker that serves the workflow (a request row it answers,
:meth:`~stepline.store.base.Store.ask_query`). Both answer alike: :func:`answer_here` is what
the worker runs for a request."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _json
from .._runtime import ActivationSettings, answer_query
from ..durations import Duration, format_duration, parse_duration
from ..errors import InvalidPayloadError, PayloadKeyError, QueryError
from ..handlers import check_handler_name
from ..payloads import PayloadCodec, Slot, query_column
from ..store.base import QueryAnswer, QueryRequest, Store
from ..workflow import WorkflowDefinition
from ._waiting import changes, deadline_of

DEFAULT_QUERY_TIMEOUT = 10.0
"""How long a query asked of a worker waits for its answer, by default (seconds)."""


def query_args(name: str, args: Sequence[Any], max_payload: int) -> str:
    """The arguments as JSON text (checked as any payload is)."""
    check_handler_name(name, what="query")
    return _json.dumps(list(args), what=f"arguments of query {name!r}", limit=max_payload)


async def answer_here(
    store: Store,
    definition: WorkflowDefinition,
    instance_id: str,
    name: str,
    args: Sequence[Any],
    settings: ActivationSettings,
    versions: Mapping[str, WorkflowDefinition] | None = None,
) -> str:
    """The answer of query ``name``, from a replay in this process, as JSON text; raises
    :class:`QueryError` (or ``InstanceNotFoundError``). The replay runs the code of the
    instance's version: ``definition``'s, or one of ``versions`` (by version); an instance of
    a version this process does not have is a :class:`QueryError`, never a replay on other
    code."""
    record = await store.get_instance(definition.name, instance_id)
    chosen = definition
    if record.version != definition.version:
        found = (versions or {}).get(record.version)
        if found is None:
            raise QueryError(
                f"query {name!r} of {record.workflow}/{record.id}",
                "UnknownVersionError",
                f"this process has no code of version {record.version!r} of {record.workflow!r}",
            )
        chosen = found
    steps = await store.get_steps(definition.name, instance_id)
    value = await answer_query(store, record, steps, chosen.make(), name, args, settings)
    try:
        return _json.dumps(value, what=f"the answer of query {name!r}", limit=settings.max_payload)
    except InvalidPayloadError as exc:
        raise QueryError(
            f"query {name!r} of {record.workflow}/{record.id}", "InvalidPayloadError", str(exc)
        ) from exc


async def answer_request(
    store: Store,
    definition: WorkflowDefinition,
    request: QueryRequest,
    settings: ActivationSettings,
    versions: Mapping[str, WorkflowDefinition] | None = None,
) -> QueryAnswer:
    """A worker's answer to a routed query (its error, if the query could not be answered)."""
    codec = settings.payloads
    slot = Slot(definition.name, request.instance_id, query_column(request.name))
    try:
        args = await codec.open(_json.loads(request.args), slot)
        if not isinstance(args, list):
            raise QueryError(f"query {request.name!r}", "InvalidArgumentsError", "not a list")
        text = await answer_here(
            store, definition, request.instance_id, request.name, args, settings, versions
        )
    except QueryError as exc:
        return QueryAnswer(None, {"name": exc.error_name, "message": exc.message})
    except (LookupError, PayloadKeyError) as exc:
        return QueryAnswer(None, {"name": type(exc).__name__, "message": str(exc)})
    return QueryAnswer(await codec.seal(text, slot, offload=False), None)


async def ask_a_worker(
    store: Store,
    workflow: str,
    instance_id: str,
    name: str,
    args: str,
    timeout: Duration | None,
    codec: PayloadCodec,
) -> Any:
    """The answer of a query that a live worker serving ``workflow`` gives; raises
    :class:`QueryError` (no such worker, or its answer is an error) or :class:`TimeoutError`.
    Its arguments and answer are sealed (encrypted) in their row, never offloaded."""
    what = f"query {name!r} of {workflow}/{instance_id}"
    now = store.now()
    workers = await store.workers.list_workers()
    if not any(workflow in w.workflows and w.live(now) for w in workers):
        raise QueryError(
            what,
            "NoWorkerError",
            f"this process does not have the code of workflow {workflow!r}, and no live worker "
            "serves it to replay the instance: start a worker that serves it (stepline worker), "
            "or register the workflow with this engine",
        )
    await store.get_instance(workflow, instance_id)  # an unknown instance: said at once
    limit = DEFAULT_QUERY_TIMEOUT if timeout is None else timeout
    deadline = deadline_of(limit, "timeout")
    slot = Slot(workflow, instance_id, query_column(name))
    sealed = await codec.seal(args, slot, offload=False)
    pk = await store.messages.ask_query(workflow, instance_id, name, sealed, now)
    answered = False
    try:
        async for _ in changes(store, workflow, instance_id, deadline):
            answer = await store.messages.query_answer(pk)
            if answer is not None:
                answered = True
                if answer.error is not None:
                    raise QueryError(what, answer.error["name"], answer.error["message"])
                return await codec.open(_json.loads(answer.answer), slot)
    finally:
        if not answered:
            with contextlib.suppress(Exception):
                await asyncio.shield(store.messages.forget_query(pk))
    waited = format_duration(parse_duration(limit, what="timeout", allow_zero=True))
    raise TimeoutError(
        f"no worker answered {what} within {waited}; is a worker serving {workflow!r} running "
        "(stepline workers list)?"
    )
