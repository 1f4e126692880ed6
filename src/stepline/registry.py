"""The workflows an engine knows by name, and the named limits they share: each definition is
checked as it is added (a name another definition holds, its schedules' names, the named limits
it uses), and what the store keeps of them is derived here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import DefinitionError, WorkflowNotFoundError
from .handlers import handlers_of
from .limits import Limit, check_limit_names
from .store import Store
from .store.base import WorkflowMeta
from .workflow import WorkflowDefinition, check_schedule_names, definition_of


class Registry:
    """An engine's workflow definitions by name (:attr:`definitions`, the dict a worker reads)
    and its named limits (:attr:`limits`)."""

    def __init__(self, limits: Iterable[Limit] = ()) -> None:
        self.definitions: dict[str, WorkflowDefinition] = {}
        self.limits = named_limits(limits)
        self._stored: set[str] = set()
        """Workflows the database knew at the last look (registered by another process)."""

    def add(self, workflow: Any) -> WorkflowDefinition:
        """Add a workflow class, ``@workflow`` function, Pipeline or Dag; raises
        :class:`~stepline.DefinitionError` naming what is wrong with it."""
        definition = definition_of(workflow)
        handlers_of(definition.cls)  # two message handlers under one name: refused now
        existing = self.definitions.get(definition.name)
        if existing is not None and existing != definition:
            raise DefinitionError(
                f"two workflows are named {definition.name!r}: {existing.class_name} and "
                f"{definition.class_name}; give one of them another name"
            )
        check_schedule_names(self.definitions.values(), definition)
        check_limit_names([(definition.name, definition.limits)], self.limits)
        self.definitions[definition.name] = definition
        return definition

    def metas(self, definitions: Iterable[WorkflowDefinition] | None = None) -> list[WorkflowMeta]:
        """What the store keeps of ``definitions`` (default: all): their code's name, their
        description, their limits and their retention."""
        chosen = self.definitions.values() if definitions is None else definitions
        return [
            WorkflowMeta(d.name, d.class_name, d.describe(), limits=d.limits, retention=d.retention)
            for d in chosen
        ]

    async def check_known(self, store: Store, name: str) -> None:
        """Raise :class:`~stepline.WorkflowNotFoundError` unless workflow ``name`` is defined
        here or registered in the database (by a worker of another process)."""
        if name in self.definitions or name in self._stored:
            return
        self._stored = {info.name for info in await store.list_workflows()}
        if name not in self._stored:
            raise WorkflowNotFoundError(name, sorted(self._stored | set(self.definitions)))


def named_limits(limits: Iterable[Limit]) -> tuple[Limit, ...]:
    """The named limits, each once; one name defined twice differently raises."""
    given = tuple(limits)
    for limit in given:
        if not isinstance(limit, Limit):
            raise DefinitionError(f"Engine limits are stepline.Limit objects, not {limit!r}")
    check_limit_names((), given)
    return tuple({limit.name: limit for limit in given}.values())
