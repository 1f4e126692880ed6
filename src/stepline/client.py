"""Client side: workflow bindings (what the CLI and HTTP API sit on); the instance handles they
hand out live in :mod:`stepline.instance` and are re-exported here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Unpack

from ._creating import (
    OnConflict,
    batch_instances,
    check_create,
    check_key,
    check_priority,
    deadline,
    new_id,
    retention_json,
    sealed_params,
)
from ._json import DEFAULT_MAX_PAYLOAD
from ._reserving import Reservation as Reservation
from ._reserving import ReserveSlots, create_reserved
from ._runtime.observer import Observer
from ._traceparent import valid_traceparent
from .durations import Duration
from .errors import DuplicateInstanceError, InstanceNotFoundError
from .instance import (
    FINISHED_ORDER,
    delete_instances,
    given_version,
    purge_arguments,
    purge_instances,
)
from .instance import STATUS_ACTIONS as STATUS_ACTIONS
from .instance import Instance as Instance
from .instance import StatusAction as StatusAction
from .instance import VersionOf as VersionOf
from .messages import Messaging
from .operations.language import Filter
from .operations.search import Ranges, build_filter, listing_filter, search, tags_json
from .payloads import PayloadCodec
from .payloads.records import open_instances
from .records import (
    INSTANCE_STATUSES,
    InstancePage,
    InstanceRecord,
)
from .store.base import NewInstance, Store
from .workflow import is_valid_name, validate_name

CheckWorkflow = Callable[[str], Awaitable[None]]

OnDuplicate = Literal["return", "raise"]


def check_listing(status: str | None, limit: int) -> None:
    """Refuse a status filter that is no status, and a page size under 1 (``ValueError``)."""
    if status is not None and status not in INSTANCE_STATUSES:
        raise ValueError(f"unknown status {status!r}; use one of {', '.join(INSTANCE_STATUSES)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit!r}")


class WorkflowBinding:
    """What ``engine.workflow(name)`` returns: create and look up instances of one workflow."""

    def __init__(
        self,
        store: Store,
        name: str,
        check: CheckWorkflow,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        reserve: ReserveSlots | None = None,
        observer: Observer | None = None,
        messaging: Messaging | None = None,
        version_of: VersionOf | None = None,
        payloads: PayloadCodec | None = None,
        params_type: Any = None,
        timeout_of: Callable[[str], float | None] | None = None,
    ) -> None:
        self._store = store
        self._version_of = version_of or given_version
        self._max_payload = max_payload
        self._params_type = params_type
        self._messaging = messaging or Messaging(store, max_payload)
        self._payloads = payloads or PayloadCodec(max_payload=max_payload)
        self._timeout_of = timeout_of
        """A workflow's declared ``timeout`` (seconds), known once ``check`` passed."""
        self.name = name
        self._check_known = check
        self._reserve = reserve
        self._observer = observer
        self._possible = is_valid_name(name)
        """False for a name no workflow can have: an unknown workflow, and no store query (text
        PostgreSQL cannot hold, such as a NUL, would fail there)."""

    def __repr__(self) -> str:
        return f"<WorkflowBinding {self.name}>"

    async def _check(self) -> None:
        await self._check_known(self.name)

    def _default_timeout(self) -> float | None:
        return None if self._timeout_of is None else self._timeout_of(self.name)

    async def _params(self, instance_id: str, params: Any, what: str) -> str:
        """Params as stored (:func:`~stepline._creating.sealed_params`)."""
        return await sealed_params(
            self._payloads, self.name, instance_id, params, self._params_type, what
        )

    def _deadline_at(self) -> float | None:
        """The deadline of an instance created now with the workflow's ``timeout``."""
        return deadline(None, self._default_timeout(), self._store.now())

    async def _create(
        self, items: Sequence[NewInstance], trigger: str, skip_existing: bool
    ) -> list[InstanceRecord]:
        """Create ``items``; a worker in this process takes what it has room for at once."""
        if self._observer is None:
            return await create_reserved(
                self._store, self.name, items, trigger, skip_existing, self._reserve
            )
        items, ended = self._observer.creating(self.name, trigger, items)
        try:
            created = await create_reserved(
                self._store, self.name, items, trigger, skip_existing, self._reserve
            )
        except BaseException as exc:
            ended(0, exc)
            raise
        ended(len(created), None)
        return created

    async def create(
        self,
        id: str | None = None,
        params: Any = None,
        *,
        trigger: str = "api",
        key: str | None = None,
        priority: int = 0,
        dedup_key: str | None = None,
        on_duplicate: OnDuplicate = "return",
        traceparent: str | None = None,
        version: str | None = None,
        retention: Mapping[str, Duration] | None = None,
        timeout: Duration | None = None,
        on_conflict: OnConflict | None = None,
        debounce: Duration | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Instance:
        """Create an instance (durable when this returns): queued, or already running when the
        engine's own worker has room for it.

        ``id`` defaults to a random UUID; an existing id raises
        :class:`~stepline.InstanceAlreadyExistsError`.

        Flow control: ``key`` (1-200 characters) groups instances for the workflow's
        ``key_concurrency``; ``priority`` (a 32-bit signed integer, default 0) orders the
        claims, lower first; ``dedup_key`` (1-200 characters): while an unfinished instance of
        the workflow holds it, no other is created, and ``on_duplicate`` says what happens
        instead: ``"return"`` a handle on that instance, ``"raise"``
        :class:`~stepline.DuplicateInstanceError` (its ``instance_id`` names it).

        ``traceparent``: a W3C trace context for the instance's trace to continue (what an HTTP
        server received); by default, while stepline traces, the caller's current span's. An
        invalid one is ignored (docs/observability.md).

        ``version``: the version of the workflow's code to run it (docs/versioning.md); by
        default the newest (of this engine's registry, else of the live workers'). One no
        worker or registry here has raises ``ValueError`` naming it; nothing is created.
        ``retention``: how long this instance is kept once it ends, by outcome (``{"complete":
        "1 day"}``), over its workflow's retention (docs/reliability.md, "Retention").
        ``timeout``: the instance's deadline from now (default: the workflow's ``timeout``):
        past it, it errors with :class:`~stepline.WorkflowTimeoutError` after its rollbacks.
        ``on_conflict`` (with ``key``): ``"debounce"`` (with ``debounce``, a quiet period) makes
        a burst of creates for the key one instance, run with the last params once the key has
        been quiet that long (the handle names that instance); ``"replace_queued"`` terminates
        the key's instances that have not started, keeping the newest (docs/operations.md).
        ``tags``: up to 20 ``key: value`` pairs (text, numbers, booleans) to find it by with a
        filter (docs/operations.md); ``TagError`` names one that breaks the rules.
        """
        checked_key, conflict, quiet = check_create(
            on_duplicate, key, on_conflict, debounce, timeout
        )
        await self._check()
        chosen = await self._version_of(self.name, version)
        now = self._store.now()
        deadline_at = deadline(timeout, self._default_timeout(), now)
        instance_id = new_id(id)
        new = NewInstance(
            instance_id,
            await self._params(instance_id, params, "instance params"),
            key=checked_key,
            priority=check_priority(priority),
            dedup_key=check_key(dedup_key, what="dedup_key"),
            traceparent=valid_traceparent(traceparent),
            version=chosen,
            retention=retention_json(retention),
            deadline_at=deadline_at,
            tags=tags_json(tags),
        )
        if conflict is not None:
            ready_at = None if quiet is None else now + quiet
            record = await self._store.closing.create_keyed(
                self.name, new, trigger=trigger, on_conflict=conflict, ready_at=ready_at
            )
            return self._instance(record.id)
        try:
            await self._create([new], trigger, skip_existing=False)
        except DuplicateInstanceError as exc:
            if on_duplicate == "raise":
                raise
            return self._instance(exc.instance_id)
        return self._instance(new.id)

    async def create_batch(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        trigger: str = "api",
        version: str | None = None,
    ) -> list[Instance]:
        """Create many instances in one transaction: ``[{"id"?: ..., "params"?: ..., ...},
        ...]``. Each item takes what :meth:`create` takes for one instance but ``dedup_key``
        and ``on_duplicate``: ``key``, ``priority``, ``traceparent``, ``tags``, ``version``
        (default: this call's ``version``), ``retention``, ``timeout``, ``on_conflict`` and
        ``debounce``, checked the same way; a bad one raises naming the item's index and the
        field, and nothing is created.

        Idempotent: ids that already exist are skipped (before their key's ``on_conflict``
        acts). The items are created in order, so a later item of a key sees what an earlier
        one did (a burst of debounced items is one instance). Returns a handle for every item,
        in order: a debounced item that joined an instance names that instance, as
        :meth:`create` does. Items take no ``dedup_key``: a duplicate would be skipped, and its
        handle would name an instance that was never created; use :meth:`create` for those.
        """
        await self._check()

        async def version_of(asked: str | None) -> str:
            return await self._version_of(self.name, version if asked is None else asked)

        now = self._store.now()
        batch = await batch_instances(items, self._params, version_of, self._default_timeout(), now)
        if any(b.on_conflict is not None for b in batch):
            records = await self._store.closing.create_keyed_batch(
                self.name, batch, trigger=trigger
            )
            return [
                self._instance(b.item.id if r is None else r.id)
                for b, r in zip(batch, records, strict=True)
            ]
        await self._create([b.item for b in batch], trigger, skip_existing=True)
        return [self._instance(b.item.id) for b in batch]

    async def get(self, id: str) -> Instance:
        """A handle on an existing instance; unknown ids raise ``InstanceNotFoundError``, ids no
        instance can have ``ValueError``."""
        validate_name(id, what="instance id")
        if not self._possible:
            raise InstanceNotFoundError(self.name, id)
        await self._store.get_instance(self.name, id)
        return self._instance(id)

    def _instance(self, instance_id: str) -> Instance:
        return Instance(
            self._store,
            self.name,
            instance_id,
            self._max_payload,
            self._messaging,
            self._version_of,
            self._payloads,
        )

    async def create_and_update(
        self,
        id: str,
        update: str,
        *args: Any,
        params: Any = None,
        update_id: str | None = None,
        timeout: Duration | None = None,
        trigger: str = "api",
        key: str | None = None,
        priority: int = 0,
    ) -> Any:
        """Update-with-start: create instance ``id`` with ``params`` unless it exists, then
        send it the update (:meth:`Instance.update`) and return the reply. Both halves are
        idempotent (an existing id is kept; ``update_id`` makes the update run once), so a
        caller that retries after a failure between them gets one instance and one run."""
        await self._check()
        instance_id = validate_name(id, what="instance id")
        new = NewInstance(
            instance_id,
            await self._params(instance_id, params, "instance params"),
            key=check_key(key, what="key"),
            priority=check_priority(priority),
            deadline_at=self._deadline_at(),
            version=await self._version_of(self.name, None),
        )
        await self._create([new], trigger, skip_existing=True)
        return await self._instance(new.id).update(
            update, *args, update_id=update_id, timeout=timeout
        )

    async def list(
        self,
        *,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        oldest_first: bool = False,
        where: str | Filter | None = None,
        **ranges: Unpack[Ranges],
    ) -> InstancePage:
        """Instances of this workflow, newest first (or oldest first). ``where``: a filter
        (docs/operations.md; ``FilterError`` names the column of a mistake); the ranges bound
        the creation and end times. A filtered list's records carry their tags."""
        check_listing(status, limit)
        chosen = listing_filter(where, workflow=self.name, status=status, **ranges)
        if not self._possible:
            return InstancePage([], None)
        if chosen is not None:
            page = await search(self._store, chosen, limit, cursor, oldest_first=oldest_first)
        else:
            page = await self._store.list_instances(
                self.name, status, limit, cursor, oldest_first=oldest_first
            )
        return InstancePage(await open_instances(self._payloads, page.instances), page.cursor)

    async def count(self, where: str | Filter | None = None) -> int:
        """How many instances of this workflow match ``where`` (all of them without)."""
        chosen = build_filter(where, workflow=self.name)
        if not self._possible or chosen is None:
            return 0
        return await self._store.operations.count(chosen)

    async def delete(self, ids: Iterable[str], *, force: bool = False) -> int:
        """Delete the instances ``ids`` (with their steps and events); return how many existed.

        All or nothing: unless ``force``, if any of them is unfinished, nothing is deleted and
        :class:`~stepline.IllegalStateError` names it (checked in the deleting transaction).
        Unknown ids are skipped.
        """
        chosen = [validate_name(i, what="instance id") for i in ids]
        if not self._possible:
            return 0
        return await delete_instances(self._store, self._payloads, self.name, chosen, force)

    async def purge(
        self, *, statuses: Iterable[str] = FINISHED_ORDER, older_than: Duration = 0
    ) -> int:
        """Delete finished instances in ``statuses`` (default: complete, errored, terminated)
        that ended more than ``older_than`` ago; return how many. Unfinished statuses are
        refused (``ValueError``): delete those by id with ``force``."""
        chosen, age = purge_arguments(statuses, older_than)
        if not self._possible:
            return 0
        return await purge_instances(self._store, self._payloads, self.name, chosen, age)
