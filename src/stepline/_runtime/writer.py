"""Writing step records: write-behind where nothing needs the commit yet, a wait where it does.

A step's result and a sleep's start are *sent* (:meth:`StepWriter.send`): the record goes to the
store at the end of this loop turn, with every other record of the turn, or with the
activation's finish if that comes first (or the activation may be about to suspend), in the
finish's transaction. Before anything that follows a record can be seen outside the activation
(another step's callback, a child's creation, the finish) :meth:`StepWriter.committed` waits for
it. So ``step.do`` returns without waiting for a commit, and an activation that ends right after
its last step commits once, not twice. A failed write surfaces there, as
:class:`ActivationAborted`; what a crash loses meanwhile is re-run on replay, exactly as a step
whose own commit had not finished.

Records commit in the order they were sent, or together: a turn's group goes once the group
before it has committed, and a task's records within a group one after the other. A record
committed ahead of an earlier one could outlive a crash that loses the earlier one, and the
replay would meet a recorded step after one it must run again, a divergence. Only records of
different tasks sent in one turn go at once: none of them can follow from another (a task woken
by another's step runs in a later turn).

Records that must be on disk before the step goes on (an event consumed, a failure, a retry's
wait, a child's start) are written with :meth:`StepWriter.write`, from the calling task and
outside the queue, once the records before them have committed: a finish never carries them (it
cannot consume an event), and a write that its task's cancellation cuts off is not written later
behind that task's back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Container, Hashable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ..errors import LeaseLostError, SteplineError, StoreError
from ..records import Attempt, StepKind, StepStatus
from ..store.base import Lease, StepWrite, Store
from .quiesce import Quiescence
from .replay import StepKey
from .signals import ActivationAborted


@dataclass(slots=True)
class StepRef:
    """The step a record is about, and what each of its records repeats."""

    key: StepKey
    seq: int
    kind: StepKind
    started_at: float | None = None
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.key[0]}-{self.key[1]}"


Entry = tuple[int, Hashable, StepWrite]
"""A record sent and not yet written: its place in the send order, the task that sent it (its
records are written in order), the record."""


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A background write's failure is raised where it is awaited; never logged as lost."""
    if not task.cancelled():
        task.exception()


class StepWriter:
    """Builds and writes the step records of one activation (fenced by its lease)."""

    __slots__ = (
        "_history",
        "_lease",
        "_loop",
        "_quiet",
        "_send_scheduled",
        "_sending",
        "_sent",
        "_spans_turns",
        "_store",
        "_unsent",
        "_written",
    )

    def __init__(
        self,
        store: Store,
        lease: Lease,
        history: Container[StepKey],
        quiet: Quiescence,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._store = store
        self._lease = lease
        self._history = history
        self._quiet = quiet
        self._loop = loop
        self._written: set[StepKey] = set()
        """Steps without a record in the history that this activation has written."""
        self._unsent: list[Entry] = []
        """Records nothing waits for yet, to send at the end of the turn (or with the finish)."""
        self._sent = 0
        """How many records have been sent: the place in the send order of the next."""
        self._spans_turns = False
        """Whether the unsent records were sent over several turns of the loop (then one may
        follow from another task's, see :meth:`_write_entries`)."""
        self._send_scheduled = False
        """An end-of-turn send is scheduled (one per turn, however many records)."""
        self._sending: list[asyncio.Future[None]] = []
        """Records sent and maybe not yet committed (one future per group sent, in order: a
        group is written once the one before it has committed)."""

    # -- the two ways to write -------------------------------------------------------------------

    def send(self, step: StepRef, status: StepStatus, **fields: Any) -> None:
        """Record the step's new state without waiting: write-behind (see the module)."""
        self._sent += 1
        task = asyncio.current_task(self._loop)
        self._unsent.append((self._sent, task, self._build(step, status, fields)))
        self._schedule_send()

    async def write(self, step: StepRef, status: StepStatus, **fields: Any) -> None:
        """Record the step's new state and wait for its commit, after every record before it,
        counted in flight so that nothing suspends meanwhile. (Committed first, a record could
        outlive a crash that took an earlier one: the replay would find a recorded step after
        one it has to run again, and end the instance as diverged.)"""
        write = self._build(step, status, fields)
        quiet = self._quiet
        quiet.begin()
        try:
            await self._commit_earlier()
            await self._write(write)
        finally:
            quiet.end()

    async def committed(self) -> None:
        """Wait until every record so far has committed (raises :class:`ActivationAborted` if one
        could not be written). Counted in flight, so nothing suspends meanwhile."""
        if not self._sending and not self._unsent:
            return
        quiet = self._quiet
        quiet.begin()
        try:
            await self._commit_earlier()
        finally:
            quiet.end()

    async def _commit_earlier(self) -> None:
        # The groups in flight first: the unsent records come after them.
        while self._unsent or self._sending:
            if self._sending:
                await self._sent_committed()
            else:
                await self._write_unsent()

    async def for_finish(self) -> tuple[StepWrite, ...]:
        """Wait for the records sent; hand over those not sent, for the finish to carry in its
        transaction (one commit instead of two for the activation's last records)."""
        await self._sent_committed()
        entries, _spans = self._take_unsent()
        return tuple(write for _, _, write in entries)

    async def record_running(self, step: StepRef, attempt: int, started: float) -> None:
        """Show an attempt in flight as ``running`` (for the attempt clock). Best effort: a
        failure meets the attempt's final record again, which reports it."""
        write = self._build(
            step, "running", {"info": {"running_attempt": attempt, "attempt_started_at": started}}
        )
        store = self._store
        with contextlib.suppress(ActivationAborted, SteplineError):
            await store.record_step(self._lease, write, store.now())

    # -- building --------------------------------------------------------------------------------

    def _build(self, step: StepRef, status: StepStatus, fields: dict[str, Any]) -> StepWrite:
        key = step.key
        # `new`: no record of this step is known (none in the history, none written since), so
        # the store may insert without looking for one to replace
        new = key not in self._history and key not in self._written
        if new:
            self._written.add(key)
        return StepWrite(
            key[0], key[1], step.seq, step.kind, status,
            attempts=tuple(step.attempts), started_at=step.started_at, new=new, **fields,
        )  # fmt: skip

    # -- sending ---------------------------------------------------------------------------------

    async def _write(self, write: StepWrite) -> None:
        """Record a step (fenced). Sees a pause request; aborts if the lease is gone."""
        store = self._store
        try:
            status = await store.record_step(self._lease, write, store.now())
        except LeaseLostError as exc:
            raise ActivationAborted(str(exc)) from exc
        except StoreError as exc:
            # The database failed, not the workflow: stop (run() cannot catch this) and let the
            # instance run again once the lease expires, instead of ending it errored.
            raise ActivationAborted(f"could not record step {write.name!r}: {exc}") from exc
        if status == "waitingForPause":
            self._quiet.request_stop("pause")

    def _schedule_send(self) -> None:
        if not self._send_scheduled:
            self._send_scheduled = True
            self._loop.call_soon(self._send_at_turn_end)

    def _send_at_turn_end(self) -> None:
        self._send_scheduled = False
        if self._quiet.testing:
            # The activation may be about to suspend: then its finish carries the records; if
            # it does not suspend after all, they go out then.
            self._spans_turns = bool(self._unsent)
            self._quiet.unless_suspended(self._schedule_send)
        elif self._unsent:
            entries, spans = self._take_unsent()
            after = self._sending[-1] if self._sending else None
            group = self._write_group(entries, spans, after)
            task = asyncio.ensure_future(group, loop=self._loop)
            task.add_done_callback(_retrieve)
            self._sending.append(task)

    def _take_unsent(self) -> tuple[list[Entry], bool]:
        entries, self._unsent = self._unsent, []
        spans, self._spans_turns = self._spans_turns, False
        return entries, spans

    def _put_back(self, entries: list[Entry]) -> None:
        """Records whose write was cut off: unsent again, in their place in the send order."""
        self._unsent = sorted([*entries, *self._unsent], key=itemgetter(0))
        self._spans_turns = True

    async def _write_group(
        self, entries: list[Entry], spans: bool, after: asyncio.Future[None] | None
    ) -> None:
        """Write a group sent at the end of a turn once the group before it (``after``) has
        committed: a record that commits before one sent earlier could outlive a crash that
        takes the earlier one, and the replay would diverge."""
        if after is not None:
            if not after.done():
                await asyncio.wait([after])  # neither raises nor cancels it
            if after.cancelled():
                # Its records went back unsent (a cancelled caller's, see _write_unsent): these
                # follow them, and so do those of a group waiting for this one, which sees it
                # cancelled too. The next write or the finish takes them all, in order.
                self._put_back(entries)
                raise asyncio.CancelledError
            failed = after.exception()
            if failed is not None:
                raise ActivationAborted(f"an earlier step record was not written: {failed}")
        await self._write_entries(entries, spans)

    async def _write_entries(self, entries: list[Entry], spans: bool) -> None:
        """Write records in their send order: each task's one after the other; those of
        different tasks at once (one batch), unless they were sent over several turns, when a
        record of one task may follow from another's."""
        if len(entries) == 1:
            await self._write(entries[0][2])
            return
        chains: dict[Hashable, list[StepWrite]] = {}
        for _, task, write in entries:
            chains.setdefault(None if spans else task, []).append(write)
        if len(chains) == 1:
            (writes,) = chains.values()
            await self._write_chain(writes)
            return
        await asyncio.gather(*(self._write_chain(writes) for writes in chains.values()))

    async def _write_chain(self, writes: list[StepWrite]) -> None:
        for write in writes:
            await self._write(write)

    async def _sent_committed(self) -> None:
        """Wait until the records already sent have committed. Records whose write a
        cancellation cut off are back in ``_unsent`` afterwards (see :meth:`_write_unsent`)."""
        while self._sending:
            pending = self._sending[0]
            try:
                # Shielded: a waiter cancelled here must not cancel a write others wait on.
                await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task(self._loop)
                if not (pending.cancelled() and task is not None and not task.cancelling()):
                    raise
                # Its writer was cancelled, not this task: the records are back in _unsent.
            if self._sending and self._sending[0] is pending:
                self._sending.pop(0)

    async def _write_unsent(self) -> None:
        # Written from this task (no task of its own: cheaper, and a lone writer commits at
        # once), with nothing in flight before it; others that must wait for it wait for its
        # future.
        entries, spans = self._take_unsent()
        sent: asyncio.Future[None] = self._loop.create_future()
        self._sending.append(sent)
        try:
            await self._write_entries(entries, spans)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                # This task was cancelled, perhaps mid-write (PostgreSQL runs a lone write in its
                # caller's task): the records go back, for the next write or the finish (written
                # twice is harmless: a record write replaces the same row), and whoever waits on
                # them writes them itself.
                self._sending.remove(sent)
                self._put_back(entries)
                sent.cancel()
            else:
                sent.set_exception(exc)
                sent.exception()  # retrieved: raised here, and to whoever awaits it
            raise
        sent.set_result(None)
        if len(self._sending) == 1 and self._sending[0] is sent:
            self._sending.clear()  # nothing else was in flight: no need to wait on it
