"""What a store tells the process it runs in, as it happens: that an instance may have become
runnable (ready listeners: the worker's wake), that one has a timer from now on (timer
listeners: the worker's next look), that a watched instance changed (change watches:
``Instance.wait``, the HTTP event stream), and an update's answer as it was written (answer
watches: a caller of ``update`` in this process). ``Store.signals``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence

from .types import ChangeWatch, StepWrite, UpdateAnswer


class Signals:
    """One store's ready listeners and change watches."""

    def __init__(self) -> None:
        self._ready_listeners: list[Callable[[], None]] = []
        self._timer_listeners: list[Callable[[float], None]] = []
        self._answer_watches: dict[tuple[str, str, str], list[asyncio.Future[UpdateAnswer]]] = {}
        self._change_watches: dict[tuple[str, str], list[ChangeWatch]] = {}

    def watched(self) -> list[tuple[str, str]]:
        """The instances watched now, as (workflow, id)."""
        return list(self._change_watches)

    def add_ready_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the store's loop) whenever an instance may have become runnable."""
        self._ready_listeners.append(callback)

    def remove_ready_listener(self, callback: Callable[[], None]) -> None:
        if callback in self._ready_listeners:
            self._ready_listeners.remove(callback)

    def ready(self) -> None:
        """An instance may have become runnable: call every ready listener."""
        for callback in list(self._ready_listeners):
            callback()

    def add_timer_listener(self, callback: Callable[[float], None]) -> None:
        """Call ``callback(at)`` (on the store's loop) whenever an instance this process
        suspended becomes runnable at ``at`` (store time), later than now: no need to look for
        work before then, but not later."""
        self._timer_listeners.append(callback)

    def remove_timer_listener(self, callback: Callable[[float], None]) -> None:
        if callback in self._timer_listeners:
            self._timer_listeners.remove(callback)

    def timer(self, at: float) -> None:
        """An instance becomes runnable at ``at``: call every timer listener."""
        for callback in list(self._timer_listeners):
            callback(at)

    def suspended(self, status: str, ready_at: float | None, now: float) -> None:
        """What a finish to ``status`` that made the instance runnable at ``ready_at`` (None:
        not by time) tells: runnable now (an event came meanwhile), a timer, or nothing."""
        if status != "waiting" or ready_at is None:
            return
        if ready_at <= now:
            self.ready()
        else:
            self.timer(ready_at)

    @contextlib.contextmanager
    def watch_answer(
        self, workflow: str, instance_id: str, update_id: str
    ) -> Iterator[asyncio.Future[UpdateAnswer]]:
        """Watch for the answer to one update, written by this process from now on, for as
        long as the block runs: the future is done with it once a handler's end record carrying
        it has committed (before the instance's change watches are told). Stores that push
        notifications tell other processes' answers too, when they fit in one. An answer written
        before the watch began is not seen: read the update."""
        key = (workflow, instance_id, update_id)
        future: asyncio.Future[UpdateAnswer] = asyncio.get_running_loop().create_future()
        futures = self._answer_watches.setdefault(key, [])
        futures.append(future)
        try:
            yield future
        finally:
            futures.remove(future)
            if not futures:
                del self._answer_watches[key]

    def answered(self, workflow: str, instance_id: str, writes: Sequence[StepWrite]) -> None:
        """Records in ``writes`` that end an update's handler committed: tell the update's
        answer watches (a store calls this after the commit)."""
        if self._answer_watches:
            found = (UpdateAnswer.of(write) for write in writes)
            self.tell_answers(workflow, instance_id, [a for a in found if a is not None])

    def tell_answers(
        self, workflow: str, instance_id: str, answers: Sequence[UpdateAnswer]
    ) -> None:
        """Tell the answer watches of the instance's updates their answers (committed)."""
        for answer in answers:
            for future in self._answer_watches.get((workflow, instance_id, answer.update_id), ()):
                if not future.done():
                    future.set_result(answer)

    def changed(self, workflow: str, instance_id: str) -> None:
        """Instance ``instance_id`` of ``workflow`` changed: signal its watches."""
        for watch in self._change_watches.get((workflow, instance_id), ()):
            watch.changed()

    @contextlib.contextmanager
    def watch_changes(self, workflow: str, instance_id: str) -> Iterator[ChangeWatch]:
        """Watch one instance for changes from now on, for as long as the block runs.

        Start watching *before* reading the instance, then wait on the watch after each read: a
        change that lands while the read is in flight is kept, not lost (it makes the next
        :meth:`ChangeWatch.wait` return at once). What signals a watch: status changes made
        through ``Store.control`` and ``Store.finish`` (the changes a wait for an instance's end is
        after), by this process always, by other processes only on stores that are notified of
        them (PostgreSQL); so callers also poll, through the wait's timeout. So do an update's
        reply, a stream item and a routed query's answer (``Store.messages``). Claims, releases,
        events and other step records do not signal.
        """
        key = (workflow, instance_id)
        watch = ChangeWatch()
        watches = self._change_watches.setdefault(key, [])
        watches.append(watch)
        try:
            yield watch
        finally:
            watches.remove(watch)
            if not watches:
                del self._change_watches[key]
