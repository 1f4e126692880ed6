"""The ``[[workflows]]`` tables of ``stepline.toml``: each workflow's name, where its code lives
(``module:attribute``), and the settings it puts over the code's (flow control keys, checked by
:mod:`stepline._project_overrides`; ``retention``, ``version``, ``timeout``)::

    [[workflows]]
    name = "documents"
    class_name = "documents:DocumentWorkflow"
    concurrency = 10
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._config_keys import check_keys
from ._project_overrides import workflow_limit_settings
from .errors import ConfigError
from .limits import WORKFLOW_LIMIT_KEYS
from .retention import parse_retention
from .workflow import validate_name

_WORKFLOW_KEYS = ("name", "class_name")
_WORKFLOW_TABLE_KEYS = (*_WORKFLOW_KEYS, *WORKFLOW_LIMIT_KEYS, "retention", "version", "timeout")


@dataclass(frozen=True)
class WorkflowEntry:
    """One ``[[workflows]]`` entry: the workflow ``name`` and where its code lives."""

    name: str
    class_name: str
    key: str
    """Where the entry is in the file, for error messages: ``workflows[0]``."""
    limits: Mapping[str, Any] = field(default_factory=dict)
    """The flow control keys, the ``retention`` and the ``version`` it sets (checked), in place
    of what the code declares."""


def read_workflows(raw: Any, path: Path, prefix: str) -> tuple[WorkflowEntry, ...]:
    """The ``[[workflows]]`` tables (``prefix``: ``tool.stepline.`` in ``pyproject.toml``)."""
    key = f"{prefix}workflows"
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: key '{key}' must be an array of tables ([[workflows]])")
    entries: list[WorkflowEntry] = []
    seen: dict[tuple[str, Any], str] = {}
    for index, item in enumerate(raw):
        where = f"{key}[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: key '{where}' must be a table ([[workflows]])")
        check_keys(item, _WORKFLOW_TABLE_KEYS, path, where)
        for required in _WORKFLOW_KEYS:
            if required not in item:
                raise ConfigError(f"{path}: key '{where}.{required}' is missing")
            if not isinstance(item[required], str):
                raise ConfigError(f"{path}: key '{where}.{required}' must be a string")
        try:
            name = validate_name(item["name"], what="workflow name")
        except ValueError as exc:
            raise ConfigError(f"{path}: key '{where}.name': {exc}") from None
        class_name = item["class_name"].strip()
        module, _, attribute = class_name.partition(":")
        if not module or not attribute:
            raise ConfigError(
                f"{path}: key '{where}.class_name' must be 'module:attribute' "
                f"(e.g. 'workflows:MyWorkflow'), got {item['class_name']!r}"
            )
        # one name may be listed once per version (its classes: docs/versioning.md)
        version = item.get("version")
        if (name, version) in seen:
            at = "" if version is None else f" at version {version!r}"
            raise ConfigError(
                f"{path}: key '{where}.name': workflow {name!r}{at} is already defined by "
                f"{seen[(name, version)]}; workflow names must be unique (per version)"
            )
        seen[(name, version)] = where
        limits = workflow_limit_settings(item, name, path, where)
        if "retention" in item:
            try:
                parse_retention(item["retention"], where="retention")
            except ValueError as exc:
                raise ConfigError(f"{path}: key '{where}.retention': {exc}") from None
            limits["retention"] = item["retention"]
        entries.append(WorkflowEntry(name, class_name, where, limits))
    return tuple(entries)
