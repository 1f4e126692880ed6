"""Flow control as users declare it: how many instances of a workflow may run at once (across
the fleet and per worker process), how many may start per period, how many per key, and named
limits that several workflows share.

Every value is checked where it is declared (a workflow class, the ``@workflow`` decorator,
``stepline.toml``), so a mistake (``concurrency = -1``, ``rate_limit = "5 per fortnight"``)
raises naming the setting and the workflow, never later in a worker. The store enforces the
limits when it claims instances (``Store.claim``), reading them from where workers register
them, so every worker of a fleet applies the same ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._shown import shown
from .durations import check_duration
from .errors import DefinitionError

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$")
_PER_UNIT = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+)\s*$")
_PER_DURATION = re.compile(r"^\s*(\d+)\s+per\s+(.+?)\s*$")
_UNIT_PERIODS = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0, "week": 604800.0}
_RATE_FORMS = "'60/minute', '5 per 10 seconds' or (60, '1 minute')"

WORKFLOW_LIMIT_KEYS = (
    "concurrency", "worker_concurrency", "rate_limit", "key_concurrency", "limits",
)  # fmt: skip
"""The flow control settings of a workflow, as class attributes, decorator arguments and keys of
a ``[[workflows]]`` table."""
LIMIT_KEYS = ("name", "concurrency", "rate")
"""The keys of a ``[[limits]]`` table (:class:`Limit`)."""


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any ``period`` seconds (a sliding window)."""

    count: int
    period: float

    def __str__(self) -> str:
        for unit, seconds in _UNIT_PERIODS.items():
            if self.period == seconds:
                return f"{self.count}/{unit}"
        return f"{self.count} per {self.period:g} seconds"

    def to_json(self) -> list[Any]:
        return [self.count, self.period]


def parse_rate(value: object, *, what: str) -> Rate:
    """``value`` as a :class:`Rate`: ``"60/minute"``, ``"5 per 10 seconds"``, ``(60, "1 minute")``
    or a Rate. Anything else raises :class:`DefinitionError` quoting it and naming ``what``."""
    if isinstance(value, Rate):
        return Rate(_count(value.count, what=what), _period(value.period, value, what))
    if isinstance(value, str):
        text = value.lower()
        per_unit = _PER_UNIT.match(text)
        if per_unit is not None and per_unit.group(2).rstrip("s") in _UNIT_PERIODS:
            return Rate(
                _count(int(per_unit.group(1)), what=what),
                _UNIT_PERIODS[per_unit.group(2).rstrip("s")],
            )
        per_duration = _PER_DURATION.match(text)
        if per_duration is not None:
            period = per_duration.group(2)
            if re.fullmatch(r"[a-z]+", period):  # "5 per minute": one unit
                period = f"1 {period}"
            return Rate(_count(int(per_duration.group(1)), what=what), _period(period, value, what))
        raise DefinitionError(f"invalid {what} {shown(value)}: write it as {_RATE_FORMS}")
    if isinstance(value, (tuple, list)) and len(value) == 2:
        count, period = value
        return Rate(_count(count, what=what), _period(period, value, what))
    raise DefinitionError(f"invalid {what} {shown(value)}: write it as {_RATE_FORMS}")


def _count(value: object, *, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DefinitionError(
            f"invalid {what} {shown(value)}: the count must be a whole number >= 1"
        )
    return value


def _period(value: object, given: object, what: str) -> float:
    seconds = check_duration(value)
    if isinstance(seconds, str):
        raise DefinitionError(
            f"invalid {what} {shown(given)}: its period {seconds}; write it as {_RATE_FORMS}"
        )
    return seconds


def _slots(value: object, *, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DefinitionError(
            f"invalid {what} {shown(value)}: a whole number >= 1 (or None for no limit)"
        )
    return value


def is_valid_limit_name(name: object) -> bool:
    return isinstance(name, str) and _NAME_RE.fullmatch(name) is not None


@dataclass(frozen=True)
class Limit:
    """A named limit that several workflows share (``[[limits]]`` in stepline.toml, or
    ``Engine(limits=[...])``): at most ``concurrency`` of their instances run at once, and at
    most ``rate`` start per period, across every worker."""

    name: str
    concurrency: int | None = None
    rate: Rate | None = None

    def __init__(self, name: str, *, concurrency: int | None = None, rate: object = None) -> None:
        if not is_valid_limit_name(name):
            raise DefinitionError(
                f"invalid limit name {name!r}: use 1-100 ASCII letters, digits, '_', '-', '.' "
                "or ':'"
            )
        what = f"limit {name!r}"
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "concurrency", _slots(concurrency, what=f"{what}: concurrency"))
        object.__setattr__(
            self, "rate", None if rate is None else parse_rate(rate, what=f"{what}: rate")
        )
        if self.concurrency is None and self.rate is None:
            raise DefinitionError(f"{what} sets neither concurrency nor rate; give it one or both")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "concurrency": self.concurrency,
            "rate": None if self.rate is None else self.rate.to_json(),
        }


@dataclass(frozen=True)
class WorkflowLimits:
    """A workflow's flow control; None (or empty) is no limit.

    - ``concurrency``: instances running at once across every worker;
    - ``worker_concurrency``: instances running at once in one worker process;
    - ``rate``: instances starting per period (a first start; resuming after a sleep is not one);
    - ``key_concurrency``: instances of one key (``create(key=...)``) running at once;
    - ``limits``: the named limits (:class:`Limit`) its instances also count toward.

    Instances that sleep, wait for an event or are paused run nowhere, so they count toward no
    concurrency limit: they take a slot again when they resume.
    """

    concurrency: int | None = None
    worker_concurrency: int | None = None
    rate: Rate | None = None
    key_concurrency: int | None = None
    limits: tuple[str, ...] = field(default=())

    @property
    def fleet_wide(self) -> bool:
        """Whether any limit applies across workers (all but ``worker_concurrency``)."""
        return bool(
            self.concurrency is not None
            or self.rate is not None
            or self.key_concurrency is not None
            or self.limits
        )

    @property
    def holds_slots(self) -> bool:
        """Whether a running instance holds a slot of a limit across workers (the workflow's
        concurrency, its key's, or a named limit's) until its lease ends."""
        return bool(self.concurrency is not None or self.key_concurrency is not None or self.limits)

    @property
    def empty(self) -> bool:
        return not self.fleet_wide and self.worker_concurrency is None

    def to_json(self) -> dict[str, Any] | None:
        """What the store keeps (None when no limit is set)."""
        if self.empty:
            return None
        return {
            "concurrency": self.concurrency,
            "worker_concurrency": self.worker_concurrency,
            "rate": None if self.rate is None else self.rate.to_json(),
            "key_concurrency": self.key_concurrency,
            "limits": list(self.limits),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> WorkflowLimits:
        if not data:
            return cls()
        rate = data.get("rate")
        return cls(
            concurrency=data.get("concurrency"),
            worker_concurrency=data.get("worker_concurrency"),
            rate=None if rate is None else Rate(int(rate[0]), float(rate[1])),
            key_concurrency=data.get("key_concurrency"),
            limits=tuple(data.get("limits") or ()),
        )

    def describe(self) -> list[str]:
        """One line per limit set, for ``describe`` and ``workflows list``."""
        lines = []
        if self.concurrency is not None:
            lines.append(f"concurrency {self.concurrency}")
        if self.worker_concurrency is not None:
            lines.append(f"worker concurrency {self.worker_concurrency}")
        if self.rate is not None:
            lines.append(f"rate {self.rate}")
        if self.key_concurrency is not None:
            lines.append(f"key concurrency {self.key_concurrency}")
        lines.extend(f"limit {name}" for name in self.limits)
        return lines


def workflow_limits(settings: Mapping[str, Any], *, what: str) -> WorkflowLimits:
    """The limits among ``settings`` (keys of :data:`WORKFLOW_LIMIT_KEYS`; others are ignored),
    checked; errors name ``what`` (``workflow 'orders'``) and the setting."""
    rate = settings.get("rate_limit")
    names = settings.get("limits", ())
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise DefinitionError(f"{what}: limits must be a list of limit names, not {names!r}")
    checked: list[str] = []
    for name in names:
        if not is_valid_limit_name(name):
            raise DefinitionError(f"{what}: invalid limit name {name!r} in limits")
        if name not in checked:
            checked.append(name)
    return WorkflowLimits(
        concurrency=_slots(settings.get("concurrency"), what=f"{what}: concurrency"),
        worker_concurrency=_slots(
            settings.get("worker_concurrency"), what=f"{what}: worker_concurrency"
        ),
        rate=None if rate is None else parse_rate(rate, what=f"{what}: rate_limit"),
        key_concurrency=_slots(settings.get("key_concurrency"), what=f"{what}: key_concurrency"),
        limits=tuple(checked),
    )


def check_limit_names(
    workflows: Iterable[tuple[str, WorkflowLimits]], limits: Sequence[Limit]
) -> None:
    """Every named limit a workflow uses is defined, once: else :class:`DefinitionError`
    naming the workflow and the limit."""
    defined: dict[str, Limit] = {}
    for limit in limits:
        if limit.name in defined and defined[limit.name] != limit:
            raise DefinitionError(f"limit {limit.name!r} is defined twice, differently")
        defined[limit.name] = limit
    for workflow, declared in workflows:
        for name in declared.limits:
            if name not in defined:
                known = ", ".join(sorted(defined)) or "none"
                raise DefinitionError(
                    f"workflow {workflow!r} uses limit {name!r}, which is not defined "
                    f"(defined: {known}); add a [[limits]] table named {name!r} to "
                    "stepline.toml or pass stepline.Limit to the Engine"
                )
