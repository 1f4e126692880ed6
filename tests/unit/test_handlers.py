"""Declaring message handlers (docs/messaging.md): names, the async rule for updates, one name
per kind, a validator, and decorated methods staying callable."""

from __future__ import annotations

from typing import Any

import pytest

import stepline
from stepline import DefinitionError, Engine, Workflow, WorkflowEvent, WorkflowStep
from stepline.handlers import QueryHandler, UpdateHandler, handlers_of


class Base(Workflow):
    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None

    @stepline.query
    def total(self) -> int:
        return 1

    @stepline.query("named")
    def other(self, n: int) -> int:
        return n

    @stepline.update
    async def add(self, step: WorkflowStep, by: int) -> int:
        return by

    @add.validator
    def _check(self, by: int) -> None:
        pass


class Child(Base):
    @stepline.query
    def total(self) -> int:  # overrides the base's query of the same name
        return 2


def test_handlers_are_found_by_name_through_the_bases() -> None:
    found = handlers_of(Child)
    assert sorted(found.queries) == ["named", "total"]
    assert found.queries["total"].fn is Child.__dict__["total"].fn
    assert list(found.updates) == ["add"]
    assert found.updates["add"].validator_fn is Base._check
    assert isinstance(Base.total, QueryHandler) and isinstance(Base.add, UpdateHandler)
    assert Child().total() == 2 and Base().other(3) == 3  # still methods on an instance


def test_a_handler_is_checked_when_declared_and_registered(tmp_path: Any) -> None:
    with pytest.raises(DefinitionError, match="must be an async method"):

        @stepline.update
        def sync_update(self: Any, step: Any) -> None:
            pass

    with pytest.raises(DefinitionError, match="invalid query name 'a b'"):
        stepline.query("a b")(lambda self: 1)

    class Twice(Base):
        @stepline.query("total")
        def again(self) -> int:
            return 3

    with pytest.raises(DefinitionError, match="two query handlers named 'total'"):
        Engine(f"sqlite:///{tmp_path}/x.db", [Twice], worker=False)


def test_arguments_are_checked_against_the_signature() -> None:
    add = handlers_of(Base).updates["add"]
    assert add.check_arguments((1,), 2) is None
    assert add.check_arguments((), 2) == (
        "update 'add' takes (by): missing a required argument: 'by'"
    )
    total = handlers_of(Base).queries["total"]
    assert total.check_arguments((1,), 1) == "query 'total' takes (): too many positional arguments"
