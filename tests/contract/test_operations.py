"""store.operations: tags kept with instances, every filter operator on built-in columns and
tags, counts, tags from a running workflow (fenced), and bulk jobs: each action, progress,
cancel, and a crash in the middle of a batch that leaves nothing acted on twice."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stepline import LeaseLostError, ManualClock
from stepline.errors import StoreError
from stepline.operations.language import Filter, TagError, parse
from stepline.store.base import Finish, NewInstance, Store
from stepline.store.operations import BulkJobNotFoundError, NewBulkJob

from ._support import WF, all_states, claim_one, raw, rows_of, write

TAGGED: dict[str, dict[str, Any]] = {
    "a": {"customer": "c-42", "campaign": "spring", "n": 1, "vip": True},
    "b": {"customer": "c-42", "n": 5, "vip": False},
    "c": {"customer": "c-7", "campaign": "autumn", "n": 10},
    "d": {"region": "eu"},
    "e": {},
}


async def _tagged(store: Store, clock: ManualClock) -> None:
    for instance_id, tags in TAGGED.items():
        item = NewInstance(instance_id, None, tags=json.dumps(tags) if tags else None)
        await store.create_instances(WF, [item], trigger="api", skip_existing=False)
        clock.advance(10)


async def _ids(store: Store, text: str) -> list[str]:
    page = await store.operations.search(parse(text), 100, None, oldest_first=True)
    assert await store.operations.count(parse(text)) == len(page.instances)
    return [record.id for record in page.instances]


FILTERS = [
    ("customer = 'c-42'", ["a", "b"]),
    ("tag.customer = 'c-42'", ["a", "b"]),
    ("customer != 'c-42'", ["c", "d", "e"]),
    ("customer <> 'c-42'", ["c", "d", "e"]),
    ("n < 5", ["a"]),
    ("n <= 5", ["a", "b"]),
    ("n > 5", ["c"]),
    ("n >= 5", ["b", "c"]),
    ("n = 5.0", ["b"]),
    ("customer < 'c-5'", ["a", "b"]),
    ("vip = true", ["a"]),
    ("vip = false", ["b"]),
    ("vip != true", ["b", "c", "d", "e"]),
    ("customer in ('c-7', 'c-9')", ["c"]),
    ("customer not in ('c-7')", ["a", "b", "d", "e"]),
    ("n in (1, 10, 'x')", ["a", "c"]),
    ("campaign like 'spr%'", ["a"]),
    ("campaign like 'SPR%'", ["a"]),
    ("campaign not like '%ing'", ["b", "c", "d", "e"]),
    ("exists region", ["d"]),
    ("region is null", ["a", "b", "c", "e"]),
    ("region is not null", ["d"]),
    ("customer = 'c-42' and n > 1", ["b"]),
    ("customer = 'c-7' or region = 'eu'", ["c", "d"]),
    ("not (customer = 'c-42' or exists region)", ["c", "e"]),
    ("n = '1'", []),  # text is not a number
    ("id = 'c'", ["c"]),
    ("id in ('a', 'e')", ["a", "e"]),
    ("id like 'd%'", ["d"]),
    ("workflow = 'wf' and status = 'queued'", ["a", "b", "c", "d", "e"]),
    ("status != 'queued'", []),
    ("status in ('paused', 'queued') and id > 'c'", ["d", "e"]),
    ("status not in ('paused', 'errored')", ["a", "b", "c", "d", "e"]),
    ("status not in ('queued')", []),
    ("customer = 'c-42' and status != 'complete'", ["a", "b"]),
    ("n = 5 and customer = 'c-42'", ["b"]),
    ("vip = true and status != 'queued'", []),
    ("created >= 1800000010", ["b", "c", "d", "e"]),
    ("created < '2027-01-15T08:00:30Z'", ["a", "b", "c"]),
    ("ended is null and started is null", ["a", "b", "c", "d", "e"]),
    ("ended > 0", []),
    ("not ended > 0", ["a", "b", "c", "d", "e"]),
    ("key is null and priority = 0 and trigger = 'api'", ["a", "b", "c", "d", "e"]),
    ("updated <= 1800000020", ["a", "b", "c"]),
]


@pytest.mark.parametrize(("text", "expected"), FILTERS, ids=[t for t, _ in FILTERS])
async def test_every_operator(store: Store, clock: ManualClock, text: str, expected: list[str]):
    await _tagged(store, clock)
    assert await _ids(store, text) == expected


async def _paged(store: Store, text: str, oldest_first: bool) -> list[str]:
    found: list[str] = []
    cursor = None
    while True:
        page = await store.operations.search(parse(text), 1, cursor, oldest_first=oldest_first)
        found += [record.id for record in page.instances]
        if page.cursor is None:
            return found
        cursor = page.cursor


@pytest.mark.parametrize(("text", "expected"), FILTERS, ids=[t for t, _ in FILTERS])
async def test_every_operator_pages_one_at_a_time(
    store: Store, clock: ManualClock, text: str, expected: list[str]
):
    """A page after a cursor bounds the tag tests by the cursor's pk too (a negated one
    included): pages of one, either way, are the whole answer."""
    await _tagged(store, clock)
    assert await _paged(store, text, oldest_first=True) == expected
    assert await _paged(store, text, oldest_first=False) == expected[::-1]


async def test_a_filtered_list_pages_newest_first_with_tags(store: Store, clock: ManualClock):
    await _tagged(store, clock)
    where = parse("exists customer")
    first = await store.operations.search(where, 2, None)
    assert [r.id for r in first.instances] == ["c", "b"]
    assert first.instances[0].tags == TAGGED["c"]
    second = await store.operations.search(where, 2, first.cursor)
    assert [r.id for r in second.instances] == ["a"] and second.cursor is None
    everything = await store.operations.search(Filter(None), 10, None)
    assert everything.instances[0].tags == {}


async def test_tags_go_with_their_instance(store: Store, clock: ManualClock, store_url: str):
    await _tagged(store, clock)
    assert rows_of(store_url, "instance_tags") == 11
    pks = {r.id: r.pk for r in (await store.operations.search(Filter(None), 10, None)).instances}
    assert await store.operations.tags_of([pks["a"], pks["e"]]) == {pks["a"]: TAGGED["a"]}
    await store.retention.delete_instances(WF, ["a", "b"])
    assert rows_of(store_url, "instance_tags") == 4
    ((kind, value),) = raw(store_url, "SELECT kind, num_value FROM instance_tags WHERE key='n'")
    assert (kind, value) == ("n", 10.0)


async def test_tags_added_by_a_running_instance_are_fenced(store: Store, clock: ManualClock):
    await store.create_instances(
        WF, [NewInstance("x", None, tags='{"a": "1"}')], trigger="api", skip_existing=False
    )
    claim = await claim_one(store, "x")
    assert await store.operations.add_tags(claim.lease, '{"region": "eu"}') == {
        "a": "1",
        "region": "eu",
    }
    assert await _ids(store, "region = 'eu' and a = '1'") == ["x"]
    many = json.dumps({f"k{n}": n for n in range(20)})
    with pytest.raises(TagError):
        await store.operations.add_tags(claim.lease, many)
    await store.control(WF, "x", "terminate")
    with pytest.raises(LeaseLostError):
        await store.operations.add_tags(claim.lease, '{"late": true}')
    assert await _ids(store, "exists late") == []


# -- bulk jobs ---------------------------------------------------------------------------------


async def _run(store: Store, job_id: str, batch: int = 2) -> Any:
    for _ in range(100):
        ran = await store.operations.run_bulk_batch(job_id, batch)
        if ran.job.status != "running":
            return ran.job
    raise AssertionError("the job never ended")


EXPECTED = {
    "pause": ({"queued": "paused", "waiting": "paused", "running": "waitingForPause"}, 5),
    "resume": ({"paused": "queued", "waitingForPause": "running"}, 6),
    "terminate": (
        {s: "terminated" for s in ("queued", "waiting", "running", "paused", "waitingForPause")},
        3,
    ),
}


@pytest.mark.parametrize("action", ["pause", "resume", "terminate"])
async def test_bulk_control_actions(store: Store, action: Any):
    await all_states(store)
    changes, skipped = EXPECTED[action]
    before = {r.id: r.status for r in (await store.list_instances(WF, None, 50, None)).instances}
    job = await store.operations.start_bulk(NewBulkJob("j", action, parse("workflow = 'wf'")))
    assert (job.status, job.total, job.done) == ("running", 8, 0)
    job = await _run(store, "j")
    after = {r.id: r.status for r in (await store.list_instances(WF, None, 50, None)).instances}
    for instance_id, status in before.items():
        expected = changes.get(status, status)
        assert after[instance_id] == expected, instance_id
    assert job.done + job.skipped == 8
    assert job.skipped == skipped
    assert job.status == "complete" and job.ended_at is not None and job.last_skip


async def test_bulk_restart_from_a_step_and_delete(store: Store):
    claims = await all_states(store)
    assert claims
    job = await store.operations.start_bulk(
        NewBulkJob("r", "restart", parse("status in ('complete', 'errored')"), from_step="s")
    )
    job = await _run(store, "r")
    assert (job.total, job.done, job.skipped) == (2, 2, 0)
    for instance_id in ("complete", "errored"):
        record = await store.get_instance(WF, instance_id)
        assert record.status == "queued"
        assert [s.name for s in await store.get_steps(WF, instance_id)] == []
    job = await store.operations.start_bulk(NewBulkJob("d", "delete", parse("id > 'a'")))
    job = await _run(store, "d", batch=100)
    left = {r.id for r in (await store.list_instances(WF, None, 50, None)).instances}
    assert (job.done, job.skipped) == (1, 7)  # only finished instances are deleted
    assert left == {"queued", "running", "paused", "waiting", "waitingForPause", "complete",
                    "errored"}  # fmt: skip


async def test_a_bulk_job_acts_on_what_matched_when_it_started(store: Store, clock: ManualClock):
    await _tagged(store, clock)
    job = await store.operations.start_bulk(NewBulkJob("p", "pause", parse("exists customer")))
    await store.create_instances(
        WF, [NewInstance("late", None, tags='{"customer": "c-1"}')], trigger="api",
        skip_existing=False,
    )  # fmt: skip
    job = await _run(store, "p", batch=1)
    assert (job.total, job.done) == (3, 3)
    assert (await store.get_instance(WF, "late")).status == "queued"


CRASHES: dict[str, tuple[str | None, str]] = {
    # action: (what brings the instances where it applies, the filter of those it acted on)
    "pause": (None, "status = 'paused'"),
    "resume": ("pause", "status = 'queued'"),
    "terminate": (None, "status = 'terminated'"),
    "restart": ("terminate", "status = 'queued'"),
    "delete": ("terminate", "workflow = 'gone'"),
}


@pytest.mark.parametrize("action", list(CRASHES))
async def test_a_crash_in_a_batch_acts_on_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch, action: Any
):
    """A batch that dies after acting on some instances commits none of them nor its cursor:
    the next batch acts on each exactly once (a second pause, resume, terminate or delete of
    one would be skipped, or find it gone)."""
    prepare, acted_on = CRASHES[action]
    await store.create_instances(
        WF, [NewInstance(f"i{n}", None) for n in range(7)], trigger="api", skip_existing=False
    )
    for n in range(7):
        if prepare is not None:
            await store.control(WF, f"i{n}", prepare)
    await store.operations.start_bulk(NewBulkJob("c", action, parse("workflow = 'wf'")))

    async def acted() -> int:
        if action == "delete":
            return 7 - await store.operations.count(parse("workflow = 'wf'"))
        return await store.operations.count(parse(acted_on))

    await store.operations.run_bulk_batch("c", 2)
    operations = type(store.operations)
    acting = operations._act if hasattr(operations, "_act") else None
    calls = 0

    if action == "restart":  # set-based: the batch's restarts are all written, then it dies
        _die_after_restarting(store, monkeypatch)
    elif acting is not None:  # PostgreSQL: the store's own method

        async def dying(self: Any, *args: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise StoreError("the worker died here")
            await acting(self, *args)

        monkeypatch.setattr(operations, "_act", dying)
    else:  # SQLite: the module's function
        from stepline.store.sqlite import operations as module

        real = module._act

        def dying_sync(*args: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise StoreError("the worker died here")
            real(*args)

        monkeypatch.setattr(module, "_act", dying_sync)
    with pytest.raises(StoreError):
        await store.operations.run_bulk_batch("c", 3)
    job = await store.operations.bulk_job("c")
    assert job.done == 2 and await acted() == 2
    monkeypatch.undo()
    job = await _run(store, "c", batch=3)
    assert (job.done, job.skipped, job.total) == (7, 0, 7)
    assert await acted() == 7


def _die_after_restarting(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from stepline.store.postgres.bulk_restart import BulkRestart
    from stepline.store.sqlite import operations as module

    if hasattr(store.operations, "_restart"):  # PostgreSQL
        real_run = BulkRestart.run

        async def dying(self: Any, *args: Any) -> Any:
            await real_run(self, *args)
            raise StoreError("the worker died here")

        monkeypatch.setattr(BulkRestart, "run", dying)
        return
    real = module.restart_batch

    def dying_sync(*args: Any) -> Any:
        real(*args)
        raise StoreError("the worker died here")

    monkeypatch.setattr(module, "restart_batch", dying_sync)


async def test_a_bulk_restart_batch_is_the_single_restart_of_each(store: Store, store_url: str):
    """A batch restarts each instance as ``control(restart)`` does: the steps from the step
    asked go with the events they consumed, those before it stay, the version is kept; an
    instance whose dedup key another holds, or that never ran the step, is skipped."""
    for instance_id in ("r0", "r1", "r2", "dup"):
        item = NewInstance(instance_id, None, dedup_key="k" if instance_id == "dup" else None)
        await store.create_instances(WF, [item], trigger="api", skip_existing=False)
        await store.send_event(WF, instance_id, "go", None)
        claim = await claim_one(store, instance_id)
        await store.record_step(claim.lease, write("a", 1), store.now())
        if instance_id != "r2":  # r2 never runs step b
            await store.record_step(claim.lease, write("b", 2), store.now())
        error = {"name": "E", "message": "e"}
        await store.finish(claim.lease, Finish("errored", error=error), store.now())
    raw(store_url, "UPDATE events SET consumed_by = 'b-1'")
    await store.create_instances(
        WF, [NewInstance("holder", None, dedup_key="k")], trigger="api", skip_existing=False
    )
    versions = {r.id: r.version for r in (await store.list_instances(WF, None, 50, None)).instances}
    job = await store.operations.start_bulk(
        NewBulkJob("b", "restart", parse("status = 'errored'"), from_step="b")
    )
    job = await _run(store, "b", batch=10)
    assert (job.total, job.done, job.skipped) == (4, 2, 2)
    assert job.last_skip is not None and "'holder'" in job.last_skip  # dup's, the last
    for instance_id in ("r0", "r1"):
        record = await store.get_instance(WF, instance_id)
        assert (record.status, record.version) == ("queued", versions[instance_id])
        assert [s.name for s in await store.get_steps(WF, instance_id)] == ["a"]
        assert [e.consumed_by for e in await store.get_events(WF, instance_id)] == [None]
    assert (await store.get_instance(WF, "dup")).status == "errored"
    assert [e.consumed_by for e in await store.get_events(WF, "r2")] == ["b-1"]
    assert [s.name for s in await store.get_steps(WF, "dup")] == ["a", "b"]


async def test_cancel_and_lookups(store: Store):
    await store.create_instances(
        WF, [NewInstance(f"i{n}", None) for n in range(5)], trigger="api", skip_existing=False
    )
    await store.operations.start_bulk(NewBulkJob("x", "terminate", parse("workflow = 'wf'")))
    await store.operations.run_bulk_batch("x", 2)
    job = await store.operations.cancel_bulk("x")
    assert (job.status, job.done) == ("cancelled", 2)
    assert (await store.operations.run_bulk_batch("x", 2)).job.done == 2
    assert await store.operations.count(parse("status = 'terminated'")) == 2
    assert [j.id for j in await store.operations.bulk_jobs("cancelled", 10)] == ["x"]
    assert await store.operations.bulk_jobs("running", 10) == []
    with pytest.raises(BulkJobNotFoundError):
        await store.operations.bulk_job("nope")
    with pytest.raises(BulkJobNotFoundError):
        await store.operations.cancel_bulk("nope")
    with pytest.raises(ValueError, match="exists already"):
        await store.operations.start_bulk(NewBulkJob("x", "pause", parse("id = 'a'")))


async def test_a_delete_batch_names_the_instances_it_deleted(store: Store):
    """So that their offloaded values go with their rows; other actions name none."""
    for n in range(5):  # three finished: a bulk delete acts on finished instances only
        await store.create_instances(
            WF, [NewInstance(f"d{n}", None)], trigger="api", skip_existing=False
        )
        if n < 3:
            claim = await claim_one(store, f"d{n}")
            await store.finish(claim.lease, Finish("complete", output="1"), store.now())
    await store.operations.start_bulk(NewBulkJob("del", "delete", parse("workflow = 'wf'")))
    await store.operations.start_bulk(NewBulkJob("ter", "terminate", parse("id = 'd4'")))
    deleted: list[tuple[str, str]] = []
    for _ in range(10):
        ran = await store.operations.run_bulk_batch("del", 2)
        deleted.extend(ran.deleted)
    assert sorted(deleted) == [(WF, "d0"), (WF, "d1"), (WF, "d2")]
    assert (ran.job.status, ran.job.done, ran.job.skipped) == ("complete", 3, 2)
    assert (await store.operations.run_bulk_batch("ter", 10)).deleted == ()


async def test_finish_then_write_keeps_tags(store: Store):
    await store.create_instances(
        WF, [NewInstance("f", None, tags='{"t": 1}')], trigger="api", skip_existing=False
    )
    claim = await claim_one(store, "f")
    await store.record_step(claim.lease, write("s", 1), store.now())
    await store.finish(claim.lease, Finish("complete", output="1"), store.now())
    assert await _ids(store, "t = 1 and status = 'complete'") == ["f"]


async def test_a_bulk_job_keeps_who_started_it(store: Store):
    by = await store.operations.start_bulk(
        NewBulkJob("who", "pause", parse("id = 'a'"), started_by="ops-admin")
    )
    anonymous = await store.operations.start_bulk(NewBulkJob("anon", "pause", parse("id = 'a'")))
    assert (by.started_by, anonymous.started_by) == ("ops-admin", None)
    await store.operations.run_bulk_batch("who", 10)
    assert (await store.operations.bulk_job("who")).started_by == "ops-admin"
    listed = {j.id: j.started_by for j in await store.operations.bulk_jobs(None, 10)}
    assert listed == {"who": "ops-admin", "anon": None}
    assert (await store.operations.cancel_bulk("anon")).started_by is None
