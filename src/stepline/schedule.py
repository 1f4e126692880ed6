"""Cron schedules: :class:`Schedule` (validated on construction) and its tick maths.

A low module: ``workflow.py`` validates the schedules a workflow declares at registration, so
this imports nothing above errors and the JSON rule. Cron expressions are parsed by cronsim
(Debian cron's semantics, including its daylight-saving behaviour, on ``zoneinfo`` zones); ticks
are computed in the schedule's time zone and handed out as float seconds since the epoch.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ._json import dumps
from .errors import DefinitionError, InvalidPayloadError
from .operations.language import TagError, check_tags

CatchUp = Literal["skip", "one", "all"]
Overlap = Literal["allow", "skip", "buffer_one"]
CATCH_UPS: tuple[str, ...] = get_args(CatchUp)
OVERLAPS: tuple[str, ...] = get_args(Overlap)

TICK_FORMAT = "%Y%m%dT%H%MZ"
"""A tick's part of its instance id, in UTC (``20240131T0900Z``)."""
NAME_MAX = 100 - len("-20240131T0900Z")
"""A schedule name leaves room for the tick in a 100-character instance id."""
MAX_TICKS = 10_000
"""The most ticks one call computes (a range or a backfill is bounded)."""

_NAME_RE = re.compile(rf"^[a-zA-Z0-9_][a-zA-Z0-9_-]{{0,{NAME_MAX - 1}}}$")


@dataclass(frozen=True)
class Schedule:
    """A cron schedule of a workflow: ``Schedule("0 9 * * MON-FRI", timezone="Europe/Paris")``.

    ``cron``: five fields (minute hour day-of-month month day-of-week), as cronsim reads them.
    ``timezone``: an IANA zone the ticks are computed in. ``params``: the JSON params of every
    instance it creates. ``name``: unique in the project, at most :data:`NAME_MAX` characters
    of letters, digits, ``_`` and ``-``; by default the workflow's name and a short hash of the
    cron, zone and params. ``catch_up`` (``"skip"``, ``"one"``, ``"all"``, at most
    ``catch_up_limit`` ticks) says which ticks missed while no scheduler ran still fire;
    ``overlap`` (``"allow"``, ``"skip"``, ``"buffer_one"``) what a tick does while the previous
    tick's instance is unfinished. See docs/triggers.md. Invalid values raise
    :class:`~stepline.DefinitionError` quoting them.
    """

    cron: str
    timezone: str = field(default="UTC", kw_only=True)
    params: Any = field(default=None, kw_only=True)
    name: str | None = field(default=None, kw_only=True)
    catch_up: CatchUp = field(default="skip", kw_only=True)
    catch_up_limit: int = field(default=100, kw_only=True)
    overlap: Overlap = field(default="allow", kw_only=True)
    tags: Mapping[str, Any] | None = field(default=None, kw_only=True, hash=False)
    """The tags of every instance it creates (docs/operations.md)."""

    def __post_init__(self) -> None:
        if not isinstance(self.cron, str) or len(self.cron.split()) != 5:
            raise DefinitionError(
                f"invalid cron expression {self.cron!r}: use five fields "
                "(minute hour day-of-month month day-of-week), e.g. '*/5 * * * *'"
            )
        zone = _zone(self.timezone)
        try:
            CronSim(self.cron, datetime.now(zone))
        except CronSimError as exc:
            raise DefinitionError(f"invalid cron expression {self.cron!r}: {exc}") from None
        try:
            dumps(self.params, what=f"params of schedule {self.cron!r}")
            check_tags(self.tags, where=f"tags of schedule {self.cron!r}")
        except (InvalidPayloadError, TagError) as exc:
            raise DefinitionError(str(exc)) from None
        if self.name is not None and not (
            isinstance(self.name, str) and _NAME_RE.fullmatch(self.name)
        ):
            raise DefinitionError(
                f"invalid schedule name {self.name!r}: use 1-{NAME_MAX} ASCII letters, digits, "
                "'_' or '-', not starting with '-'"
            )
        if self.catch_up not in CATCH_UPS:
            raise DefinitionError(
                f"invalid catch_up {self.catch_up!r} for schedule {self.cron!r}: "
                f"use one of {', '.join(map(repr, CATCH_UPS))}"
            )
        limit = self.catch_up_limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_TICKS:
            raise DefinitionError(
                f"invalid catch_up_limit {limit!r} for schedule {self.cron!r}: "
                f"use an integer from 1 to {MAX_TICKS}"
            )
        if self.overlap not in OVERLAPS:
            raise DefinitionError(
                f"invalid overlap {self.overlap!r} for schedule {self.cron!r}: "
                f"use one of {', '.join(map(repr, OVERLAPS))}"
            )

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def key(self) -> str:
        """The name; ``ValueError`` before it is set (:meth:`named`)."""
        if self.name is None:
            raise ValueError(f"schedule {self.cron!r} has no name yet (Schedule.named)")
        return self.name

    def named(self, workflow: str) -> Schedule:
        """This schedule with its name set: its own, else ``{workflow}-{hash}`` (stable)."""
        if self.name is not None:
            return self
        text = dumps([self.cron, self.timezone, self.params], what="schedule")
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        return replace(self, name=f"{workflow[: NAME_MAX - 9]}-{digest}")

    def ticks_after(self, after: float) -> Iterator[float]:
        """The ticks strictly after ``after``, in order (seconds since the epoch), ending where
        datetimes end (year 9999)."""
        ticks = iter(CronSim(self.cron, datetime.fromtimestamp(after, self.zone)))
        while True:
            try:
                tick = next(ticks)
            except (StopIteration, OverflowError, ValueError):
                return  # cronsim steps past year 9999 by raising: no later tick exists
            yield tick.timestamp()

    def next_tick(self, after: float) -> float | None:
        """The first tick strictly after ``after``, or None if there is none."""
        return next(self.ticks_after(after), None)

    def ticks_between(self, start: float, end: float, *, limit: int = MAX_TICKS) -> list[float]:
        """The ticks in ``(start, end]``, oldest first, at most ``limit`` of them (the first
        ones)."""
        found: list[float] = []
        if limit <= 0:
            return found
        for tick in self.ticks_after(start):
            if tick > end:
                break
            found.append(tick)
            if len(found) >= limit:
                break
        return found

    def latest_ticks(self, after: float, end: float, *, limit: int) -> list[float]:
        """The last ``limit`` ticks in ``(after, end]``, oldest first: read backwards from
        ``end``, so a long gap costs ``limit`` ticks, not every tick of the gap."""
        found: list[float] = []
        if limit <= 0:
            return found
        # cronsim reads backwards from strictly before a time; ticks fall on whole seconds.
        start = datetime.fromtimestamp(math.floor(end) + 1, self.zone)
        for tick in CronSim(self.cron, start, reverse=True):
            moment = tick.timestamp()
            if moment <= after:
                break
            found.append(moment)
            if len(found) >= limit:
                break
        found.reverse()
        return found

    def instance_id(self, tick: float) -> str:
        """The id of the instance of ``tick``: the schedule's name and the tick in UTC."""
        return tick_instance_id(self.key, tick)


def tick_instance_id(name: str, tick: float) -> str:
    """``{name}-{tick as %Y%m%dT%H%MZ}``: the same tick always gives the same id."""
    return f"{name}-{datetime.fromtimestamp(tick, UTC).strftime(TICK_FORMAT)}"


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise DefinitionError(f"invalid time zone {name!r}: use an IANA name such as 'UTC'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise DefinitionError(
            f"unknown time zone {name!r}: use an IANA name such as 'Europe/Paris' ({exc})"
        ) from None


def as_schedule(value: Any, *, where: str) -> Schedule:
    """A :class:`Schedule`, or a cron string made one; anything else: DefinitionError naming
    ``where``."""
    if isinstance(value, Schedule):
        return value
    if isinstance(value, str):
        try:
            return Schedule(value)
        except DefinitionError as exc:
            raise DefinitionError(f"{where}: {exc}") from None
    raise DefinitionError(
        f"{where}: a schedule is a cron string or a stepline.Schedule, not {value!r}"
    )
