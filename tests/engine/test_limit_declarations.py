"""Flow control as declared in code: Workflow class attributes, ``@workflow(...)`` arguments,
Pipeline and Dag attributes, and ``Engine(limits=[...])``; bad values fail at registration naming
the workflow and the setting; what registration hands the store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import stepline
from stepline import (
    Dag,
    DefinitionError,
    DuplicateInstanceError,
    Engine,
    Limit,
    Pipeline,
    Rate,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline.limits import WorkflowLimits
from stepline.store.base import WorkflowMeta
from stepline.workflow import definition_of


class Orders(Workflow):
    concurrency = 5
    worker_concurrency = 2
    rate_limit = (100, "1 minute")
    key_concurrency = 1
    limits = ("payments", "email")

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


class Plain(Workflow):
    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


def noop(ctx: Any) -> dict[str, Any]:
    return {}


EXPECTED = WorkflowLimits(
    concurrency=5,
    worker_concurrency=2,
    rate=Rate(100, 60.0),
    key_concurrency=1,
    limits=("payments", "email"),
)


def test_class_attributes_declare_the_limits() -> None:
    assert definition_of(Orders).limits == EXPECTED
    assert definition_of(Plain).limits == WorkflowLimits()

    class MoreOrders(Orders):  # inherited, and overridden one by one
        rate_limit = "5 per 10 seconds"

    assert definition_of(MoreOrders).limits == WorkflowLimits(
        concurrency=5,
        worker_concurrency=2,
        rate=Rate(5, 10.0),
        key_concurrency=1,
        limits=("payments", "email"),
    )


def test_decorator_arguments_declare_the_limits() -> None:
    @workflow(
        name="deco",
        concurrency=5,
        worker_concurrency=2,
        rate_limit="100/minute",
        key_concurrency=1,
        limits=["payments", "email", "payments"],
    )
    async def deco(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None

    assert definition_of(deco).limits == EXPECTED


def test_pipeline_and_dag_attributes_declare_the_limits() -> None:
    pipeline = Pipeline("pipe")
    pipeline.step(name="one")(noop)
    pipeline.concurrency = 3
    pipeline.rate_limit = [10, "1 second"]
    dag = Dag("graph")
    dag.step(name="one")(noop)
    dag.worker_concurrency = 4
    dag.limits = ("shared",)
    assert definition_of(pipeline).limits == WorkflowLimits(concurrency=3, rate=Rate(10, 1.0))
    assert definition_of(dag).limits == WorkflowLimits(worker_concurrency=4, limits=("shared",))


BAD = [
    ("concurrency", -1, "concurrency -1"),
    ("concurrency", 0, "concurrency 0"),
    ("concurrency", True, "concurrency True"),
    ("concurrency", 2.5, "concurrency 2.5"),
    ("worker_concurrency", 0, "worker_concurrency 0"),
    ("key_concurrency", "3", "key_concurrency '3'"),
    ("rate_limit", "5 per fortnight", "rate_limit '5 per fortnight'"),
    ("rate_limit", (0, "1 minute"), "rate_limit 0: the count"),
    ("rate_limit", (5, "0 seconds"), "rate_limit (5, '0 seconds')"),
    ("rate_limit", 5, "rate_limit 5"),
    ("limits", "payments", "limits must be a list"),
    ("limits", ["bad name!"], "invalid limit name 'bad name!'"),
]


@pytest.mark.parametrize(("setting", "value", "words"), BAD)
def test_a_bad_class_attribute_fails_at_registration(
    setting: str, value: Any, words: str, tmp_path: Path
) -> None:
    cls = type("BadLimits", (Plain,), {setting: value})
    with pytest.raises(DefinitionError) as caught:
        Engine(f"sqlite:///{tmp_path}/never.db", [cls], worker=False)
    message = str(caught.value)
    assert "workflow 'bad-limits' (BadLimits)" in message and words in message
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize(("setting", "value", "words"), BAD)
def test_a_bad_decorator_argument_fails_at_decoration(setting: str, value: Any, words: str) -> None:
    async def bad(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None

    with pytest.raises(DefinitionError) as caught:
        workflow(name="bad", **{setting: value})(bad)
    assert "workflow 'bad'" in str(caught.value) and words in str(caught.value)


@pytest.mark.parametrize(("setting", "value", "words"), BAD)
def test_a_bad_pipeline_attribute_fails_at_registration(
    setting: str, value: Any, words: str, tmp_path: Path
) -> None:
    pipeline = Pipeline("bad-pipe")
    pipeline.step(name="one")(noop)
    setattr(pipeline, setting, value)
    engine = Engine(f"sqlite:///{tmp_path}/never.db", worker=False)
    with pytest.raises(DefinitionError) as caught:
        engine.register(pipeline)
    assert "workflow 'bad-pipe' (Pipeline)" in str(caught.value) and words in str(caught.value)


def test_named_limits_must_be_defined_at_registration(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/never.db"
    with pytest.raises(DefinitionError) as caught:
        Engine(url, [Orders], worker=False, limits=[Limit("payments", concurrency=2)])
    assert "workflow 'orders'" in str(caught.value) and "limit 'email'" in str(caught.value)
    assert "defined: payments" in str(caught.value)
    engine = Engine(url, worker=False)  # no limits at all
    with pytest.raises(DefinitionError, match="workflow 'orders' uses limit 'payments'"):
        engine.register(Orders)
    assert engine.workflows == {}
    assert not (tmp_path / "never.db").exists()


def test_a_named_limit_defined_twice_differently_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/never.db"
    with pytest.raises(DefinitionError, match="limit 'payments' is defined twice"):
        Engine(
            url,
            [Plain],
            worker=False,
            limits=[Limit("payments", concurrency=2), Limit("payments", concurrency=3)],
        )
    same = Limit("payments", concurrency=2)  # the same twice is one limit
    engine = Engine(url, [Plain], worker=False, limits=[same, Limit("payments", concurrency=2)])
    assert engine.limits == (same,)
    with pytest.raises(DefinitionError, match=r"stepline\.Limit"):
        Engine(url, worker=False, limits=[{"name": "payments"}])  # type: ignore[list-item]


class _Recording:
    """Wraps a store, recording what register_workflows receives."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.registered: list[tuple[list[WorkflowMeta], list[Limit]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def register_workflows(
        self, metas: Sequence[WorkflowMeta], limits: Sequence[Limit] = ()
    ) -> None:
        self.registered.append((list(metas), list(limits)))
        await self._store.register_workflows(metas, limits)


async def test_open_registers_the_limits_with_the_workflows(tmp_path: Path) -> None:
    payments = Limit("payments", concurrency=2, rate="10/second")
    email = Limit("email", rate=(100, "1 hour"))
    engine = Engine(
        f"sqlite:///{tmp_path}/x.db", [Orders, Plain], worker=False, limits=[payments, email]
    )
    recording = _Recording(engine.store)
    engine.store = recording  # type: ignore[assignment]
    async with engine:
        pass
    ((metas, limits),) = recording.registered
    assert {meta.name: meta.limits for meta in metas} == {
        "orders": EXPECTED,
        "plain": WorkflowLimits(),
    }
    assert limits == [payments, email]


def test_the_flow_control_names_are_public() -> None:
    assert stepline.Limit is Limit and stepline.Rate is Rate
    assert issubclass(DuplicateInstanceError, stepline.SteplineError)
