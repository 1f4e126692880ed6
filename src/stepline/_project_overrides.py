"""What ``stepline.toml`` sets over the workflows' code: the schedules of ``[[schedules]]``
tables (:func:`with_schedules`, added to the code's), and flow control (:func:`with_limits`):
the limit keys of ``[[workflows]]`` tables, which override what the code declares, and the
``[[limits]]`` tables of named limits::

    [[workflows]]
    name = "orders"
    class_name = "shop:Orders"
    concurrency = 10                 # across every worker
    worker_concurrency = 2           # in one worker process
    rate_limit = "60/minute"         # or [60, "1 minute"]
    key_concurrency = 1              # per key (create(key=...))
    limits = ["payments"]            # named limits its instances also count toward
    version = "2"                    # the code's version (docs/versioning.md)
    timeout = "2 hours"              # each instance's deadline (docs/operations.md)

    [[limits]]
    name = "payments"
    concurrency = 5
    rate = "100/second"

Errors are :class:`~stepline.ConfigError` naming the file and the key (``workflows[0].rate_limit``,
``limits[1].rate``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ._config_keys import check_keys
from .durations import parse_duration
from .errors import ConfigError, DefinitionError
from .limits import (
    LIMIT_KEYS,
    WORKFLOW_LIMIT_KEYS,
    Limit,
    is_valid_limit_name,
    parse_rate,
    workflow_limits,
)
from .schedule import Schedule
from .workflow import definition_of, validate_version


def workflow_limit_settings(
    item: Mapping[str, Any], name: str, path: Path, where: str
) -> dict[str, Any]:
    """The flow control keys (and the ``version`` and ``timeout``) a ``[[workflows]]`` table
    sets, each checked on its own so that an error names it (``workflows[0].concurrency``)."""
    settings: dict[str, Any] = {}
    for key in WORKFLOW_LIMIT_KEYS:
        if key not in item:
            continue
        try:
            workflow_limits({key: item[key]}, what=f"workflow {name!r}")
        except DefinitionError as exc:
            raise ConfigError(f"{path}: key '{where}.{key}': {exc}") from None
        settings[key] = item[key]
    if "version" in item:
        try:
            settings["version"] = validate_version(item["version"], what=f"version of {name!r}")
        except ValueError as exc:
            raise ConfigError(f"{path}: key '{where}.version': {exc}") from None
    if "timeout" in item:  # not a limit, but set over the code alike
        try:
            parse_duration(item["timeout"], what="timeout")
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: key '{where}.timeout': {exc}") from None
        settings["timeout"] = item["timeout"]
    return settings


def named_limits(raw: Any, path: Path, prefix: str) -> tuple[Limit, ...]:
    """The ``[[limits]]`` tables as :class:`~stepline.Limit` objects, names unique."""
    key = f"{prefix}limits"
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: key '{key}' must be an array of tables ([[limits]])")
    found: dict[str, tuple[Limit, str]] = {}
    for index, item in enumerate(raw):
        where = f"{key}[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: key '{where}' must be a table ([[limits]])")
        check_keys(item, LIMIT_KEYS, path, where)
        limit = _limit(item, path, where)
        if limit.name in found:
            raise ConfigError(
                f"{path}: key '{where}.name': limit {limit.name!r} is already defined by "
                f"{found[limit.name][1]}; limit names must be unique"
            )
        found[limit.name] = (limit, where)
    return tuple(limit for limit, _ in found.values())


def _limit(item: Mapping[str, Any], path: Path, where: str) -> Limit:
    if "name" not in item:
        raise ConfigError(f"{path}: key '{where}.name' is missing")
    name = item["name"]
    if not is_valid_limit_name(name):
        raise ConfigError(
            f"{path}: key '{where}.name': invalid limit name {name!r}: use 1-100 ASCII "
            "letters, digits, '_', '-', '.' or ':'"
        )
    concurrency = item.get("concurrency")
    if concurrency is not None:
        try:
            Limit(name, concurrency=concurrency)
        except DefinitionError as exc:
            raise ConfigError(f"{path}: key '{where}.concurrency': {exc}") from None
    rate = item.get("rate")
    if rate is not None:
        try:
            rate = parse_rate(rate, what=f"limit {name!r}: rate")
        except DefinitionError as exc:
            raise ConfigError(f"{path}: key '{where}.rate': {exc}") from None
    try:
        return Limit(name, concurrency=concurrency, rate=rate)
    except DefinitionError as exc:
        raise ConfigError(f"{path}: key '{where}': {exc}") from None


def check_limit_references(
    workflows: Iterable[tuple[str, Mapping[str, Any]]], limits: Iterable[Limit], path: Path
) -> None:
    """Every named limit a ``[[workflows]]`` table lists has a ``[[limits]]`` table; else
    ConfigError naming the key. (Limits named in code are checked when the workflow is
    registered, where the Engine's limits are known.)"""
    defined = {limit.name for limit in limits}
    for where, settings in workflows:
        for name in settings.get("limits", ()):
            if name not in defined:
                raise ConfigError(
                    f"{path}: key '{where}.limits': no [[limits]] table is named {name!r} "
                    f"(defined: {', '.join(sorted(defined)) or 'none'})"
                )


def with_limits(workflow: Any, settings: Mapping[str, Any]) -> Any:
    """``workflow`` with the flow control ``settings`` in place of its own (key by key): a class
    is subclassed, an object (Pipeline, Dag) copied."""
    if not settings:
        return workflow
    if isinstance(workflow, type):
        return type(
            workflow.__name__,
            (workflow,),
            {
                "name": definition_of(workflow).name,
                **settings,
                "__module__": workflow.__module__,
                "__qualname__": workflow.__qualname__,
                "__doc__": workflow.__doc__,
            },
        )
    copied = copy.copy(workflow)
    for key, value in settings.items():
        setattr(copied, key, value)
    return copied


def with_schedules(workflow: Any, schedules: list[Schedule]) -> Any:
    """``workflow`` declaring ``schedules`` after its own: a class is subclassed, an object
    (Pipeline, Dag) copied."""
    definition = definition_of(workflow)
    declared = (*definition.schedules, *schedules)
    if isinstance(workflow, type):
        return type(
            workflow.__name__,
            (workflow,),
            {
                "name": definition.name,
                "schedules": declared,
                "__module__": workflow.__module__,
                "__qualname__": workflow.__qualname__,
                "__doc__": workflow.__doc__,
            },
        )
    copied = copy.copy(workflow)
    copied.schedules = declared
    return copied
