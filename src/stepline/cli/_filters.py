"""The filter options the listing and bulk commands share: ``--where`` and the time ranges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

WHERE_HELP = (
    "A filter (docs/operations.md): comparisons of status, workflow, id, created, ended, ... "
    "and tags, with and/or/not, e.g. \"customer = 'c-42' and status = 'errored'\"."
)


def filter_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--where`` and ``--created-after/--created-before/--ended-after/--ended-before`` (ISO
    8601 times, or seconds since the epoch), passed as keyword arguments of those names."""
    for name in ("ended-before", "ended-after", "created-before", "created-after"):
        fn = click.option(
            f"--{name}",
            metavar="TIME",
            default=None,
            callback=_moment,
            help=f"Only instances {name.replace('-', ' ')} TIME (ISO 8601: 2026-12-01T09:00Z).",
        )(fn)
    return click.option("--where", metavar="FILTER", default=None, help=WHERE_HELP)(fn)


def _moment(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return value  # an ISO time, checked where it is used (naming the option)
