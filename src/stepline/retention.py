"""Retention policies: how long finished instances are kept, by how they ended.

``{"complete": "7 days", "errored": "30 days", "terminated": "1 day"}`` on a workflow (its
``retention`` attribute, ``@workflow(retention=...)`` or ``[workflows.NAME] retention`` in
stepline.toml) or on one instance (``create(..., retention=...)``). Each outcome named is kept
that long after the instance ended; an outcome not named follows the workflow's policy, then
the workers' ``retention`` setting, else it is kept. The database computes each instance's
``delete_at`` when it ends (docs/reliability.md, "Retention").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._shown import shown
from .durations import check_duration

OUTCOMES = ("complete", "errored", "terminated")

Retention = dict[str, float]
"""Seconds to keep an instance after it ended, by outcome (only the outcomes named)."""


def parse_retention(value: Any, *, where: str = "retention") -> Retention | None:
    """``value`` (a mapping of outcome to duration, or None) checked, in seconds; anything
    else raises :class:`ValueError` naming ``where`` and the value."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(
            f"invalid {where} {shown(value)}: it must map outcomes ({', '.join(OUTCOMES)}) to "
            "durations, e.g. {'complete': '7 days', 'errored': '30 days'}"
        )
    policy: Retention = {}
    for outcome, duration in value.items():
        if outcome not in OUTCOMES:
            raise ValueError(
                f"invalid {where}: unknown outcome {shown(outcome)}; the outcomes are "
                f"{', '.join(OUTCOMES)}"
            )
        seconds = check_duration(duration, allow_zero=True)
        if isinstance(seconds, str):
            raise ValueError(
                f"invalid {where}: {outcome} = {shown(duration)} is not a duration: it {seconds}"
            )
        policy[outcome] = seconds
    return policy


def from_cloudflare(value: Any, success: str, error: str, *, where: str) -> dict[str, Any] | None:
    """Cloudflare's retention as stepline's: ``{success: d, error: d}`` (``successRetention``
    and ``errorRetention`` in a binding's create, ``success_retention`` and
    ``error_retention`` in the REST API; a number is milliseconds there) becomes
    ``{"complete": d, "errored": d}``, checked later as any retention."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"invalid {where} {shown(value)}: it must be an object")
    unknown = sorted(set(value) - {success, error})
    if unknown:
        raise ValueError(
            f"invalid {where}: unknown key {unknown[0]!r}; the keys are {success}, {error}"
        )
    policy: dict[str, Any] = {}
    for key, outcome in ((success, "complete"), (error, "errored")):
        given = value.get(key)
        if isinstance(given, int | float) and not isinstance(given, bool):
            given = given / 1000
        if given is not None:
            policy[outcome] = given
    return policy
