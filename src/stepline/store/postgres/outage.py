"""Outages of the PostgreSQL store's database: how long a connection fault is retried, how long
to wait between attempts, and what is logged.

An outage (the server unreachable: stopped, restarting, cut off) is logged once, when a retry
fails too, and once when the first operation succeeds again, not once per failed statement. A
connection that dies and is replaced at once (killed by an administrator, dropped by a proxy) is
no outage: logged at INFO.
"""

from __future__ import annotations

import logging
import random
import time

import psycopg

from ...errors import StoreUnavailableError

log = logging.getLogger("stepline.store.postgres")

# Reconnect back-off jitter draws from its own generator: the store's retries leave the global
# `random` state, which an application may have seeded for its own use, where it was.
_jitter = random.Random()

_SETTLE = 2.0
"""Seconds after the end of an outage during which a new one is taken for the same one settling
(logged only if it lasts that long)."""


def jittered(seconds: float) -> float:
    """``seconds`` less up to half, at random, so that retries of many clients spread out."""
    return seconds * _jitter.uniform(0.5, 1.0)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class Outages:
    """The connection faults of one database (``where``), and the outages they make."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.retry_seconds = 60.0
        """How long an operation keeps retrying connection faults before raising StoreError."""
        self._began: float | None = None
        """When the current outage began (monotonic), or None while the database answers."""
        self._last_fault = -1e9
        self._logged = False
        """Whether the current outage's start was logged (not if it began just after one ended)."""
        self._recovered_at = -1e9

    @property
    def ongoing(self) -> bool:
        return self._began is not None

    def pause(
        self, what: str, exc: psycopg.Error, started: float, attempt: int, applied: str | None
    ) -> float:
        """How long to sleep before retrying a connection fault, or StoreUnavailableError when
        the retry period is over (``applied`` says what became of the change, if any)."""
        left = started + self.retry_seconds - time.monotonic()
        if left <= 0:
            outcome = f"; {applied}" if applied else ""
            raise StoreUnavailableError(
                f"the database is unreachable: PostgreSQL at {self.where} did not answer for "
                f"{self.retry_seconds:g} s while {what} ({one_line(exc)}){outcome}. Check "
                "that the server is running and reachable, then repeat the call"
            ) from exc
        delay = min(0.02 * 2 ** (attempt - 1), 1.0)
        return min(jittered(delay), left)

    def fault(
        self, what: str, exc: BaseException, *, outage: bool, since: float | None = None
    ) -> None:
        """A connection fault; ``outage``: a retry failed too; ``since``: when the failed
        attempt began (monotonic). The first fault of an outage is logged as such, unless it
        comes within ``_SETTLE`` seconds of the end of the last one, or its attempt began
        before that end (it waited for the pool through the outage): then it is the same one
        still settling, and it is logged only if it lasts."""
        now = time.monotonic()
        stale = since is not None and since < self._recovered_at
        quiet, self._last_fault = stale or now - self._last_fault < 1.0, now
        if outage and self._began is None:
            self._began = now
            self._logged = False
        if (
            outage
            and not self._logged
            and not stale
            and (now - self._recovered_at >= _SETTLE or now - (self._began or now) >= _SETTLE)
        ):
            self._logged = True
            log.warning(
                "lost the connection to PostgreSQL at %s while %s (%s); reconnecting, each "
                "operation for up to %g s",
                self.where,
                what,
                one_line(exc),
                self.retry_seconds,
            )
        elif not outage and self._began is None and not quiet:
            log.info(
                "connection to PostgreSQL at %s lost while %s (%s); retrying",
                self.where,
                what,
                one_line(exc),
            )
        else:
            log.debug("connection fault while %s: %s", what, one_line(exc))

    def answered(self) -> None:
        """The database answered: the end of an outage, if one was going on, is logged."""
        began, self._began = self._began, None
        if began is not None and self._logged:
            self._logged = False
            self._recovered_at = time.monotonic()
            log.warning(
                "reconnected to PostgreSQL at %s after %.1f s",
                self.where,
                time.monotonic() - began,
            )
