"""The workflows an engine knows by name and version, and the named limits they share: each
definition is checked as it is added (a name and version another definition holds, its
schedules' names, the named limits it uses), and what the store keeps of them is derived here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import DefinitionError, WorkflowNotFoundError
from .handlers import handlers_of
from .limits import Limit, check_limit_names
from .records import DEFAULT_VERSION
from .store import Store
from .store.base import WorkflowMeta
from .workflow import (
    WorkflowDefinition,
    check_schedule_names,
    definition_of,
    validate_version,
    version_order,
)


class Registry:
    """An engine's workflow definitions by name, the newest version of each
    (:attr:`definitions`, the dict a worker and the scheduler read), every version by name
    (:attr:`versions`), and its named limits (:attr:`limits`)."""

    def __init__(self, limits: Iterable[Limit] = ()) -> None:
        self.definitions: dict[str, WorkflowDefinition] = {}
        self.versions: dict[str, dict[str, WorkflowDefinition]] = {}
        """Every registered version of each workflow, by name then version, oldest first."""
        self.limits = named_limits(limits)
        self._stored: dict[str, float | None] = {}
        """Workflows the database knew at the last look (registered by another process), with
        their declared ``timeout``."""

    def add(self, workflow: Any) -> WorkflowDefinition:
        """Add a workflow class, ``@workflow`` function, Pipeline or Dag; raises
        :class:`~stepline.DefinitionError` naming what is wrong with it."""
        definition = definition_of(workflow)
        handlers_of(definition.cls)  # two message handlers under one name: refused now
        known = self.versions.get(definition.name, {})
        existing = known.get(definition.version)
        if existing is not None and existing != definition:
            raise DefinitionError(
                f"two workflows are named {definition.name!r} at version "
                f"{definition.version!r}: {existing.class_name} and {definition.class_name}; "
                "give one of them another name or version"
            )
        check_schedule_names(self.definitions.values(), definition)
        check_limit_names([(definition.name, definition.limits)], self.limits)
        ordered = sorted(
            {**known, definition.version: definition}.items(),
            key=lambda item: version_order(item[0]),
        )
        self.versions[definition.name] = dict(ordered)
        self.definitions[definition.name] = ordered[-1][1]
        return definition

    def served(self) -> dict[str, tuple[str, ...]]:
        """The versions of each workflow registered here (what a worker claims)."""
        return {name: tuple(found) for name, found in self.versions.items()}

    def version_of(self, name: str, version: str | None) -> str:
        """The version a create of workflow ``name`` uses: ``version``, checked (one this
        engine does not have, of a workflow it has: ``ValueError`` naming it and those it
        has), or the newest registered here (the default version for a workflow known only
        from the database)."""
        known = self.versions.get(name)
        if version is None:
            return next(reversed(known)) if known else DEFAULT_VERSION
        validate_version(version)
        if known is not None and version not in known:
            raise ValueError(
                f"workflow {name!r} has no version {version!r} here: its versions are "
                f"{', '.join(repr(v) for v in known)}"
            )
        return version

    def metas(self, definitions: Iterable[WorkflowDefinition] | None = None) -> list[WorkflowMeta]:
        """What the store keeps of ``definitions`` (default: all): their code's name, their
        description, their limits and their retention."""
        chosen = self.definitions.values() if definitions is None else definitions
        return [
            WorkflowMeta(
                d.name, d.class_name, _described(d), limits=d.limits, retention=d.retention
            )
            for d in chosen
        ]

    async def check_known(self, store: Store, name: str) -> None:
        """Raise :class:`~stepline.WorkflowNotFoundError` unless workflow ``name`` is defined
        here or registered in the database (by a worker of another process)."""
        if name in self.definitions or name in self._stored:
            return
        self._stored = {
            info.name: (info.definition or {}).get("timeout")
            for info in await store.list_workflows()
        }
        if name not in self._stored:
            raise WorkflowNotFoundError(name, sorted({*self._stored, *self.definitions}))

    def timeout_of(self, name: str) -> float | None:
        """Workflow ``name``'s declared ``timeout`` in seconds: its code's, else as the
        database had it registered when :meth:`check_known` last looked (None: none)."""
        known = self.definitions.get(name)
        return known.timeout if known is not None else self._stored.get(name)


def _described(definition: WorkflowDefinition) -> dict[str, Any]:
    """What the store keeps of a definition: its description, and its ``timeout`` if it has one
    (read by clients without the code)."""
    described = definition.describe()
    if definition.timeout is not None:
        described = {**described, "timeout": definition.timeout}
    return described


def named_limits(limits: Iterable[Limit]) -> tuple[Limit, ...]:
    """The named limits, each once; one name defined twice differently raises."""
    given = tuple(limits)
    for limit in given:
        if not isinstance(limit, Limit):
            raise DefinitionError(f"Engine limits are stepline.Limit objects, not {limit!r}")
    check_limit_names((), given)
    return tuple({limit.name: limit for limit in given}.values())
