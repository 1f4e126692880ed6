"""What ``create`` and ``create_batch`` take for flow control: key, priority and dedup_key
reach the store checked; a duplicate returns the instance holding the dedup key or raises; the
sync facade takes the same; a workflow with limits is never claimed by the fast path that skips
the store's claim. (The store's own handling of the values has its contract tests.)"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from stepline import (
    DuplicateInstanceError,
    Engine,
    SyncEngine,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline._shown import shown
from stepline.records import InstanceRecord
from stepline.store.base import NewInstance


@workflow(name="plain")
async def plain(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: event.payload)


class Limited(Workflow):
    name = "limited"
    key_concurrency = 1

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


class _DedupStore:
    """Wraps a store: records the items created, and treats a dedup key as held by the
    instance ``holder`` (the stores on this branch do not dedup; their contract tests check
    that they do)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.created: list[NewInstance] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def create_instances(
        self, workflow: str, items: Sequence[NewInstance], **options: Any
    ) -> list[InstanceRecord]:
        for item in items:
            if item.dedup_key == "held":
                raise DuplicateInstanceError(workflow, item.dedup_key, "holder")
        self.created.extend(items)
        return list(await self._store.create_instances(workflow, items, **options))


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    engine = Engine(f"sqlite:///{tmp_path}/x.db", [plain, Limited], worker=False)
    engine.store = _DedupStore(engine.store)  # type: ignore[assignment]
    async with engine:
        yield engine


def created(engine: Engine) -> list[NewInstance]:
    store: _DedupStore = engine.store  # type: ignore[assignment]
    return store.created


async def test_key_priority_and_dedup_key_reach_the_store(engine: Engine) -> None:
    binding = engine.workflow("plain")
    await binding.create("a", key="customer-1", priority=-5, dedup_key="order-9")
    await binding.create("b")
    await binding.create_batch(
        [{"id": "c", "key": "k" * 200, "priority": 2**31 - 1}, {"id": "d", "priority": -(2**31)}]
    )
    assert [(i.id, i.key, i.priority, i.dedup_key) for i in created(engine)] == [
        ("a", "customer-1", -5, "order-9"),
        ("b", None, 0, None),
        ("c", "k" * 200, 2**31 - 1, None),
        ("d", None, -(2**31), None),
    ]


BAD_KEYS = ["", "k" * 201, 5, b"bytes", "line\nbreak", "nul\x00"]
BAD_PRIORITIES = [True, 1.0, "1", 2**31, -(2**31) - 1, None]


@pytest.mark.parametrize("value", BAD_KEYS)
@pytest.mark.parametrize("argument", ["key", "dedup_key"])
async def test_bad_keys_are_refused_naming_the_argument(
    engine: Engine, argument: str, value: Any
) -> None:
    with pytest.raises(ValueError, match=re.escape(f"invalid {argument} {shown(value)}")):
        await engine.workflow("plain").create(**{argument: value})
    assert created(engine) == []


@pytest.mark.parametrize("value", BAD_PRIORITIES)
async def test_bad_priorities_are_refused(engine: Engine, value: Any) -> None:
    with pytest.raises(ValueError, match=re.escape(f"invalid priority {value!r}")):
        await engine.workflow("plain").create(priority=value)
    assert created(engine) == []


async def test_bad_batch_items_are_refused_naming_the_item(engine: Engine) -> None:
    binding = engine.workflow("plain")
    with pytest.raises(ValueError, match="invalid key of batch item 1 ''"):
        await binding.create_batch([{"id": "x"}, {"key": ""}])
    with pytest.raises(ValueError, match="invalid priority of batch item 0 True"):
        await binding.create_batch([{"priority": True}])
    with pytest.raises(ValueError, match="item 0: unknown key 'dedup_key'"):
        await binding.create_batch([{"dedup_key": "d"}])
    assert created(engine) == []


async def test_a_duplicate_returns_the_holder_or_raises(engine: Engine) -> None:
    binding = engine.workflow("plain")
    holder = await binding.create("holder", dedup_key="free")
    returned = await binding.create("other", dedup_key="held")
    assert returned.id == "holder" and returned.workflow == "plain"
    assert (await returned.record()).id == holder.id
    with pytest.raises(DuplicateInstanceError) as caught:
        await binding.create("other", dedup_key="held", on_duplicate="raise")
    assert caught.value.instance_id == "holder" and caught.value.dedup_key == "held"
    with pytest.raises(ValueError, match="invalid on_duplicate 'ignore'"):
        await binding.create("other", dedup_key="held", on_duplicate="ignore")  # type: ignore[arg-type]
    assert [i.id for i in created(engine)] == ["holder"]


def test_the_sync_facade_takes_the_same_options(tmp_path: Path) -> None:
    with SyncEngine(f"sqlite:///{tmp_path}/x.db", [plain]) as engine:
        store = _DedupStore(engine.engine.store)
        engine.engine.store = store  # type: ignore[assignment]
        binding = engine.workflow("plain")
        binding.create("a", key="k", priority=3, dedup_key="d")
        binding.create_batch([{"id": "b", "key": "k2", "priority": -1}])
        assert [(i.id, i.key, i.priority, i.dedup_key) for i in store.created] == [
            ("a", "k", 3, "d"),
            ("b", "k2", -1, None),
        ]
        assert binding.create("c", dedup_key="held").id == "holder"
        with pytest.raises(DuplicateInstanceError):
            binding.create("c", dedup_key="held", on_duplicate="raise")
        with pytest.raises(ValueError, match=r"invalid priority 2\.5"):
            binding.create(priority=2.5)  # type: ignore[arg-type]


async def test_a_workflow_with_limits_is_not_reserved_by_the_creating_process(
    tmp_path: Path,
) -> None:
    @workflow(name="paced", worker_concurrency=4)
    async def paced(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None

    async with Engine(
        f"sqlite:///{tmp_path}/x.db", [plain, Limited, paced], poll_interval=30
    ) as engine:
        await asyncio.sleep(0.1)  # the worker has looked once and found nothing
        worker = engine.worker
        assert worker.reserve("limited", 1) is None  # fleet-wide: key_concurrency
        assert worker.reserve("paced", 1) is None  # worker_concurrency
        reservation = worker.reserve("plain", 1)
        assert reservation is not None  # the fast path itself still works
        reservation.release()
        instance = await engine.workflow("limited").create(key="k")
        assert (await instance.record()).lease_owner is None  # left for a claim
