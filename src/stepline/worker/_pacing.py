"""How the claim loop paces its looks at the database: how long it waits between polls, and how
many instances a claim asks for."""

from __future__ import annotations


class Pacing:
    """The claim loop's waits and asks.

    Without notifications from other processes (SQLite) the loop polls quickly after a poll
    found work and backs off while polls find nothing; with them (PostgreSQL) it polls at the
    longest interval throughout. A claim answering a wake from this process (its own finish or
    create) says nothing of other processes' work, so it leaves the wait as it is: quick polls
    that find nothing new would each take the database's time.

    Woken only by the ends of its own instances under a limit, the worker asks for as many
    instances as ended: what they freed is mostly what there is to take, and on PostgreSQL a
    key-limited claim that cannot fill its ask reads past every held key to the end of the due
    backlog. Anything else due is found by the next poll or wake. While more of those ends are
    being written, the claim waits for them (``WorkflowCaps.ending``), so that one claim answers
    them all.
    """

    __slots__ = ("_answered", "_fastest", "_held_ends", "_longest", "_polled", "_told", "wait")

    def __init__(self) -> None:
        self._fastest = self._longest = self.wait = 0.0
        self._polled = True
        """Whether the coming claim is a poll, not the answer to a wake."""
        self._told = False
        """Whether anything but the end of an instance under a limit came since the last claim."""
        self._held_ends = 0
        """Instances under a limit that ended since the last claim."""
        self._answered = False
        """Whether the last claim only answered this worker's own ends."""

    def start(self, fastest: float, longest: float) -> None:
        """The loop begins: its quickest and longest waits."""
        self._fastest, self._longest = fastest, longest
        self.wait = fastest
        self._polled = True

    def told(self) -> None:
        """Something may be runnable (a wake, or the end of an instance under no limit)."""
        self._told = True

    def held_end(self) -> None:
        """An instance under a limit ended, its finish written."""
        self._held_ends += 1

    def answering(self) -> bool:
        """Whether the next claim would only answer this worker's own ends under a limit."""
        return not self._polled and not self._told and self._held_ends > 0

    def ask(self, limit: int) -> tuple[int, bool]:
        """How many the next claim asks for, at most ``limit``, and whether it only answers
        this worker's own ends (then a full answer is not a sign of more)."""
        answer = self._answered = self.answering()
        if answer:
            limit = min(limit, self._held_ends)
        self._told = False
        self._held_ends = 0
        return limit, answer

    def claimed(self, asked: int, took: int, *, contested: bool = False) -> None:
        """The claim took ``took`` of the ``asked`` instances. After a poll that found work,
        more may follow soon. After an answer to the worker's own ends that came back short
        while peers run the same key-limited work (``contested``), a peer's claim took what
        they freed, and the peer, above its split, leaves keys soon."""
        if (took and self._polled) or (contested and self._answered and took < asked):
            self.wait = self._fastest

    def waited(self, woken: bool, *, back_off: bool = True) -> None:
        """The loop waited, until a wake (``woken``) or its timeout; with ``back_off`` the
        next wait doubles up to the longest."""
        self._polled = not woken
        if back_off:
            self.wait = min(self.wait * 2, self._longest)
