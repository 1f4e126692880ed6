"""Answering a query (and checking an update with its validator before it is sent): replay the
instance's recorded history on a fresh workflow object, as far as it goes, then call the query's
handler (the validator) on that object (docs/messaging.md).

The replay is an activation that stops at the frontier (:mod:`.turns`): every step with a final
record returns it, every other one parks, the recorded updates' handlers replay in their
places, and the activation ends as a suspension does. No callback runs and nothing is written:
the activation holds a lease no claim ever gives (token -1), so even a write that slipped
through would be fenced out. The handler runs where it may only read (:mod:`.readonly`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InstanceFatalError, QueryError, UpdateRejectedError
from ..handlers import handlers_of
from ..records import InstanceRecord, StepRecord
from ..store.base import Claim, History, Lease, Store
from ..workflow import Workflow
from .activation import Activation
from .readonly import read_only_call
from .state import ActivationSettings

QUERY_LEASE_TOKEN = -1
"""The lease token of a query's replay: no claim gives it (tokens are never negative)."""
QUERY_OWNER = "stepline-query"


async def answer_query(
    store: Store,
    record: InstanceRecord,
    steps: list[StepRecord],
    workflow: Workflow,
    name: str,
    args: Sequence[Any],
    settings: ActivationSettings,
) -> Any:
    """The answer of query ``name`` with ``args`` on the instance ``record`` whose history is
    ``steps`` (as :meth:`Store.get_steps` reads it), replayed with ``workflow`` (a fresh
    object of its class). Raises :class:`QueryError` saying why it could not answer."""
    what = f"query {name!r} of {record.workflow}/{record.id}"
    handlers = handlers_of(type(workflow))
    handler = handlers.queries.get(name)
    if handler is None:
        known = ", ".join(sorted(handlers.queries)) or "none"
        raise QueryError(
            what,
            "UnknownQueryError",
            f"workflow {record.workflow!r} has no query {name!r} (its queries: {known})",
        )
    problem = handler.check_arguments(tuple(args), 1)
    if problem is not None:
        raise QueryError(what, "InvalidArgumentsError", problem)
    diverged = await _replay(store, record, steps, workflow, settings)
    if diverged is not None:
        raise QueryError(what, diverged.name, diverged.message)
    try:
        return await read_only_call(workflow, handler.fn, args, f"query {name!r}")
    except Exception as exc:
        raise QueryError(what, type(exc).__name__, str(exc)) from exc


async def check_update(
    store: Store,
    record: InstanceRecord,
    steps: list[StepRecord],
    workflow: Workflow,
    name: str,
    args: Sequence[Any],
    settings: ActivationSettings,
) -> None:
    """Run update ``name``'s validator (it has one) on the instance's state, replayed as for a
    query: raises :class:`UpdateRejectedError` with the validator's error, if it raises."""
    what = f"update {name!r} of {record.workflow}/{record.id}"
    handler = handlers_of(type(workflow)).updates[name]
    assert handler.validator_fn is not None  # the caller checks it has one
    diverged = await _replay(store, record, steps, workflow, settings)
    if diverged is not None:
        raise UpdateRejectedError(what, diverged.name, diverged.message)
    try:
        where = f"the validator of update {name!r}"
        await read_only_call(workflow, handler.validator_fn, args, where)
    except Exception as exc:
        raise UpdateRejectedError(what, type(exc).__name__, str(exc)) from exc


async def _replay(
    store: Store,
    record: InstanceRecord,
    steps: list[StepRecord],
    workflow: Workflow,
    settings: ActivationSettings,
) -> InstanceFatalError | None:
    """Replay ``record`` on ``workflow`` to the frontier; the divergence, if it diverged."""
    lease = Lease(record.pk, QUERY_LEASE_TOKEN, QUERY_OWNER)
    history = History(steps, [])
    claim = Claim(record, lease, None, 0, history)
    activation = Activation(store, claim, history, workflow, settings, replay_only=True)
    return await activation.replay_to_frontier()
