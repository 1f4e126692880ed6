"""What an instance handle uses for messages: :class:`Messaging`, made by the engine with the
workflows whose code it has."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from .. import _json
from .._reserving import Reservation, ReserveForUpdate, handed_over
from .._runtime import ActivationSettings, check_update
from ..durations import Duration
from ..errors import UpdateRejectedError
from ..handlers import UpdateHandler, handlers_of
from ..payloads import PayloadCodec, Slot, event_column
from ..payloads.records import open_stream_items
from ..records import FINISHED_STATUSES
from ..store.base import Claim, Store, StreamItem, StreamRead, UpdateRecord
from ..store.types import UPDATE_EVENT
from ..workflow import WorkflowDefinition
from . import _queries, _streams, _updates


class Messaging:
    """Queries, updates and streams for the instances of one engine. ``code``: the workflows
    whose code this process has (answered here; the others' queries go to a worker);
    ``reserve``: asks the worker in this process for a slot to run an update's instance, which
    the send then claims for it if it can."""

    def __init__(
        self,
        store: Store,
        max_payload: int,
        code: Mapping[str, WorkflowDefinition] | None = None,
        versions: Mapping[str, Mapping[str, WorkflowDefinition]] | None = None,
        payloads: PayloadCodec | None = None,
        reserve: ReserveForUpdate | None = None,
    ) -> None:
        self._store = store
        self._reserve = reserve
        self._max_payload = max_payload
        self._code: Mapping[str, WorkflowDefinition] = code if code is not None else {}
        self._versions = versions if versions is not None else {}
        self.payloads = payloads or PayloadCodec(max_payload=max_payload)
        """Opens the (encrypted) stream items read, and the histories queries replay."""
        self._settings = ActivationSettings(max_payload, payloads=self.payloads)

    async def query(
        self,
        workflow: str,
        instance_id: str,
        name: str,
        args: Sequence[Any],
        timeout: Duration | None,
    ) -> Any:
        encoded = _queries.query_args(name, args, self._max_payload)
        definition = self._code.get(workflow)
        if definition is None:
            return await _queries.ask_a_worker(
                self._store, workflow, instance_id, name, encoded, timeout, self.payloads
            )
        text = await _queries.answer_here(
            self._store, definition, instance_id, name, _json.loads(encoded), self._settings,
            self._versions.get(workflow),
        )  # fmt: skip
        return _json.loads(text)

    async def send_update(
        self,
        workflow: str,
        instance_id: str,
        name: str,
        args: Sequence[Any],
        update_id: str | None,
    ) -> UpdateRecord:
        """Record the update (checked against the handler when this process has the code: an
        unknown name or arguments it does not take are refused here, recording nothing)."""
        chosen = _updates.check_update_id(update_id)
        payload = _updates.update_payload(chosen, name, args, self._max_payload)
        definition = await self._code_of(workflow, instance_id)
        if definition is not None:
            handler = self._check(definition, instance_id, name, args)
            if handler.validator_fn is not None:
                await self._validate(definition, instance_id, chosen, name, args)
        slot = Slot(workflow, instance_id, event_column(UPDATE_EVENT))
        sealed = await self.payloads.seal(payload, slot)  # travels as the update's event
        update = (chosen, name, sealed)
        reservation = None if self._reserve is None else self._reserve(workflow)
        if reservation is None:
            record = await self._store.messages.send_update(workflow, instance_id, *update)
        else:
            sent = self._sent_and_claimed(workflow, instance_id, update, reservation)
            record = await handed_over(reservation, sent)
        return await _updates.opened(self.payloads, workflow, instance_id, record)

    async def _sent_and_claimed(
        self,
        workflow: str,
        instance_id: str,
        update: tuple[str, str, str],
        taker: Reservation,
    ) -> tuple[UpdateRecord, list[Claim]]:
        """The update sent, and the instance claimed for ``taker`` if it can run at once."""
        record, claim = await self._store.messages.send_update_and_claim(
            workflow, instance_id, *update, owner=taker.owner, lease_seconds=taker.lease_seconds,
            versions=taker.versions, patches=taker.patches,
        )  # fmt: skip
        return record, [] if claim is None else [claim]

    async def _code_of(self, workflow: str, instance_id: str) -> WorkflowDefinition | None:
        """The code this process has for the instance's version: the only one it has (no read),
        else the one of the version the instance records; None when it has none of them (the
        update is then recorded unchecked, as by a process without the workflow's code)."""
        definition = self._code.get(workflow)
        versions = self._versions.get(workflow) or {}
        if definition is None or len(versions) <= 1:
            return definition
        record = await self._store.get_instance(workflow, instance_id)
        return versions.get(record.version)

    async def _validate(
        self,
        definition: WorkflowDefinition,
        instance_id: str,
        update_id: str,
        name: str,
        args: Sequence[Any],
    ) -> None:
        """The validator, here, on the state replayed as for a query: a refused update is never
        recorded. Not for an update id already sent (its answer stands) nor a finished instance
        (the store refuses it)."""
        store = self._store
        if await store.messages.get_update(definition.name, instance_id, update_id) is not None:
            return
        record = await store.get_instance(definition.name, instance_id)
        if record.status in FINISHED_STATUSES:
            return
        steps = await store.get_steps(definition.name, instance_id)
        workflow = definition.make()
        await check_update(store, record, steps, workflow, name, args, self._settings)

    def _check(
        self, definition: WorkflowDefinition, instance_id: str, name: str, args: Sequence[Any]
    ) -> UpdateHandler[Any]:
        what = f"update {name!r} of {definition.name}/{instance_id}"
        updates = handlers_of(definition.cls).updates
        handler = updates.get(name)
        if handler is None:
            known = ", ".join(sorted(updates)) or "none"
            raise UpdateRejectedError(
                what,
                "UnknownUpdateError",
                f"workflow {definition.name!r} has no update {name!r} (its updates: {known})",
            )
        problem = handler.check_arguments(tuple(args), 2)
        if problem is not None:
            raise UpdateRejectedError(what, "InvalidArgumentsError", problem)
        return handler

    async def update(
        self,
        workflow: str,
        instance_id: str,
        name: str,
        args: Sequence[Any],
        update_id: str | None,
        timeout: Duration | None,
    ) -> Any:
        # Watched from before the send: the reply's signal cannot come before the watch, and
        # the send's answer (pending) needs no second read. An answer written by this process
        # comes with its signal: no read at all.
        chosen = _updates.check_update_id(update_id)
        signals = self._store.signals
        with (
            signals.watch_changes(workflow, instance_id) as watch,
            signals.watch_answer(workflow, instance_id, chosen) as answer,
        ):
            record = await self.send_update(workflow, instance_id, name, args, chosen)
            if record.answered:
                return _updates.outcome(record, f"update {name!r} of {workflow}/{instance_id}")
            # (Not for an update the instance ended without answering: that is read at once.)
            sent = None if record.instance_status in FINISHED_STATUSES else (watch, record)
            return await _updates.wait_for_reply(
                self._store, workflow, instance_id, record.update_id, timeout, self.payloads,
                sent=sent, answer=answer,
            )  # fmt: skip

    async def reply(
        self, workflow: str, instance_id: str, update_id: str, timeout: Duration | None
    ) -> Any:
        return await _updates.wait_for_reply(
            self._store, workflow, instance_id, update_id, timeout, self.payloads
        )

    async def read_stream(
        self, workflow: str, instance_id: str, stream: str, after: int, limit: int
    ) -> StreamRead:
        _streams.check_stream(stream)
        cursor = _streams.check_cursor(after)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"invalid limit {limit!r}: a whole number of items, at least 1")
        read = await self._store.messages.read_stream(workflow, instance_id, stream, cursor, limit)
        items = await open_stream_items(self.payloads, workflow, instance_id, read.items)
        return StreamRead(items, read.instance_status)

    def subscribe(
        self, workflow: str, instance_id: str, stream: str, after: int, follow: bool
    ) -> AsyncIterator[StreamItem]:
        return _streams.subscribe(
            self._store, workflow, instance_id, stream, after, follow=follow, payloads=self.payloads
        )
