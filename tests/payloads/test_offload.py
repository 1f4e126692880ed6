"""Large values offloaded to a blob store, on both stores: small rows, values read back equal,
fetched lazily, deleted with their instances, orphans swept, and an unreachable blob store
failing the step's attempt (retried, nothing lost)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

from stepline import BlobStoreError, Engine, ManualClock, WorkflowEvent, WorkflowStep
from stepline import workflow as workflow_decorator
from stepline.http import create_app
from stepline.payloads import BlobsConfig, FileBlobStore, PayloadConfig

from ..conftest import drain

MADE: list[int] = []


@workflow_decorator(name="big")
async def big(event: WorkflowEvent, step: WorkflowStep) -> Any:
    size = event.payload["size"]

    def make() -> str:
        MADE.append(size)
        return "x" * size

    data = await step.do("make", make)
    await step.sleep("nap", "1 minute")
    length = await step.do("measure", lambda: len(data))
    return {"length": length, "params": len(event.payload["pad"])}


class CountingStore(FileBlobStore):
    """A directory blob store that counts reads and can fail its next writes."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gets = 0
        self.failing_puts = 0

    async def get(self, key: str) -> bytes:
        self.gets += 1
        return await super().get(key)

    async def put(self, key: str, data: bytes) -> None:
        if self.failing_puts:
            self.failing_puts -= 1
            raise BlobStoreError(f"blob store {self.url}: cannot write blob {key!r}: unreachable")
        await super().put(key, data)


def engine(store_url: str, root: Path, clock: ManualClock, **options: Any) -> Engine:
    config = PayloadConfig(offload_over=64 * 1024, blobs=BlobsConfig(url=root.as_uri()))
    made = Engine(store_url, [big], worker=False, clock=clock, payloads=config, **options)
    made.payloads.blobs = CountingStore(root)  # the same directory, counted
    return made


def blob_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def row_sizes(values: Sequence[Any]) -> list[int]:
    return [len(orjson.dumps(value)) for value in values]


async def test_large_values_are_offloaded_and_read_back_lazily(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    MADE.clear()
    root = tmp_path / "blobs"
    size = 3 * 1024 * 1024  # over max_payload: refused without a blob store
    pad = "p" * (200 * 1024)
    async with engine(store_url, root, clock) as eng:
        counting = eng.payloads.blobs
        assert isinstance(counting, CountingStore)
        instance = await eng.workflow("big").create("one", {"size": size, "pad": pad})
        await drain(eng)
        assert (await instance.status()).status == "waiting"
        # The rows hold references of a few hundred bytes.
        raw = await eng.store.get_instance("big", "one")
        raw_steps = await eng.store.get_steps("big", "one")
        assert max(row_sizes([raw.params, *(s.output for s in raw_steps)])) < 2048
        assert "$blob" in raw.params
        files = blob_files(root)
        assert len(files) == 2 and all(f.startswith("big/one/") for f in files)
        counting.gets = 0
        clock.advance(61)
        await drain(eng)
        # The replay fetched the params and the one offloaded result it used, once each.
        assert counting.gets == 2
        assert (await instance.status()).output == {"length": size, "params": len(pad)}
        assert MADE.count(size) == 1
        steps = {s.name: s.output for s in await instance.steps()}
        assert steps["make"] == "x" * size and steps["measure"] == size
        assert (await instance.record()).params == {"size": size, "pad": pad}


async def finished(eng: Engine, clock: ManualClock, names: Sequence[str], **options: Any) -> None:
    """Instances of ``big`` named ``names``, each with an offloaded result, run to their end."""
    for name in names:
        await eng.workflow("big").create(name, {"size": 100 * 1024, "pad": ""}, **options)
    await drain(eng)
    clock.advance(61)
    await drain(eng)


def blobs_of(root: Path, name: str) -> list[str]:
    return [f for f in blob_files(root) if f.startswith(f"big/{name}/")]


async def test_blobs_go_with_their_instances_deleted_purged_or_expired(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    root = tmp_path / "blobs"
    async with engine(store_url, root, clock) as eng:
        wf = eng.workflow("big")
        await finished(eng, clock, ["deleted", "purged", "kept"])
        clock.advance(3600)
        await finished(eng, clock, ["expired"], retention={"complete": "1 hour"})
        assert all(blobs_of(root, n) for n in ("deleted", "purged", "kept", "expired"))
        await (await wf.get("deleted")).delete()
        assert blobs_of(root, "deleted") == []
        assert await wf.purge(statuses=["complete"], older_than="30 minutes") == 2
        assert blobs_of(root, "purged") == [] and blobs_of(root, "kept") == []
        assert blobs_of(root, "expired")  # purge's older_than spared it; retention's turn
        clock.advance(3600)
        assert await eng.worker.purge_now() == 1
        assert blob_files(root) == []


async def test_a_bulk_delete_takes_its_instances_blobs_with_their_rows(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    root = tmp_path / "blobs"
    async with engine(store_url, root, clock) as eng:
        await finished(eng, clock, ["gone-1", "gone-2", "stays"])
        job = await eng.bulk.start("delete", "id != 'stays'", workflow="big")
        while await eng.worker.run_bulk_now():
            pass
        assert (await eng.bulk.wait(job.id)).done == 2
        assert blobs_of(root, "gone-1") == [] and blobs_of(root, "gone-2") == []
        assert blobs_of(root, "stays")  # no sweep ran: the batch deleted them


class FailingDeletes(CountingStore):
    """A directory blob store whose deletes fail: a crash between the rows and the blobs."""

    async def delete(self, keys: Sequence[str]) -> None:
        raise BlobStoreError(f"blob store {self.url}: cannot delete blob {keys[0]!r}: down")


async def test_blobs_a_failed_delete_left_go_to_the_sweep_and_the_rows_are_gone(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    root = tmp_path / "blobs"
    async with engine(store_url, root, clock) as eng:
        wf = eng.workflow("big")
        await finished(eng, clock, ["deleted", "purged"])
        clock.advance(3600)
        await finished(eng, clock, ["expired"], retention={"complete": "1 hour"})
        working = eng.payloads.blobs
        eng.payloads.blobs = FailingDeletes(root)
        assert await wf.delete(["deleted"]) == 1
        assert await wf.purge(statuses=["complete"], older_than="30 minutes") == 1
        clock.advance(3600)
        assert await eng.worker.purge_now() == 1
        assert (await wf.list()).instances == []
        assert len(blob_files(root)) == 3  # every instance left its result's blob
        eng.payloads.blobs = working
        assert await eng.worker.sweep_blobs_now() == 0  # within the grace period
        assert await eng.worker.sweep_blobs_now(time.time() + 3601) == 3
        assert blob_files(root) == []


async def test_an_orphan_is_swept_after_its_grace_period(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    root = tmp_path / "blobs"
    async with engine(store_url, root, clock) as eng:
        await finished(eng, clock, ["kept"])
        # A crash between a blob and its row leaves it to the sweep.
        (root / "big" / "kept" / ("f" * 64)).write_bytes(b"orphan")
        assert await eng.worker.sweep_blobs_now() == 0
        assert await eng.worker.sweep_blobs_now(time.time() + 3601) == 1
        assert len(blobs_of(root, "kept")) == 1


async def test_referenced_blobs_survive_the_sweep(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    root = tmp_path / "blobs"
    async with engine(store_url, root, clock) as eng:
        instance = await eng.workflow("big").create("live", {"size": 100 * 1024, "pad": ""})
        await drain(eng)
        orphan = root / "big" / "live" / ("0" * 64)
        orphan.write_bytes(b"left by a crash")
        assert await eng.worker.sweep_blobs_now(time.time() + 3601) == 1
        assert not orphan.exists() and len(blob_files(root)) == 1
        clock.advance(61)
        await drain(eng)
        assert (await instance.status()).status == "complete"


async def test_an_unreachable_blob_store_fails_the_attempt_and_the_step_retries(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    root = tmp_path / "blobs"
    async with engine(store_url, root, clock) as eng:
        counting = eng.payloads.blobs
        assert isinstance(counting, CountingStore)
        counting.failing_puts = 1
        instance = await eng.workflow("big").create("flaky", {"size": 100 * 1024, "pad": ""})
        await drain(eng)
        (make,) = [s for s in await instance.steps() if s.name == "make"]
        assert make.status == "waiting"
        error = make.attempts[0].error
        assert error is not None and error["name"] == "BlobStoreError"
        assert f"blob store {root.as_uri()}: cannot write blob 'big/flaky/" in error["message"]
        clock.advance(3600)
        await drain(eng)
        clock.advance(61)
        await drain(eng)
        assert (await instance.status()).output == {"length": 100 * 1024, "params": 0}


async def test_a_200_mb_result_round_trips_with_a_row_under_2_kb(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    size = 200 * 1024 * 1024  # a str: typed bytes values are another package's
    async with engine(store_url, tmp_path / "blobs", clock) as eng:
        instance = await eng.workflow("big").create("huge", {"size": size, "pad": ""})
        await drain(eng)
        clock.advance(61)
        await drain(eng)
        assert (await instance.status()).output == {"length": size, "params": 0}
        raw = {s.name: s.output for s in await eng.store.get_steps("big", "huge")}
        assert row_sizes([raw["make"]])[0] < 2048
        steps = {s.name: s.output for s in await instance.steps()}
        assert len(steps["make"]) == size and steps["make"] == "x" * size


@workflow_decorator(name="large_output")
async def large_output(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("small", lambda: 1)
    return "o" * 100_000


async def test_an_output_the_blob_store_refuses_is_stored_on_a_later_try(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    root = tmp_path / "blobs"
    config = PayloadConfig(offload_over=64 * 1024, blobs=BlobsConfig(url=root.as_uri()))
    async with Engine(store_url, [large_output], worker=False, clock=clock, payloads=config) as eng:
        counting = CountingStore(root)
        eng.payloads.blobs = counting
        counting.failing_puts = 1
        instance = await eng.workflow("large_output").create("o")
        await drain(eng)
        assert (await instance.status()).status == "waiting"
        clock.advance(30)
        await drain(eng)
        assert (await instance.status()).output == "o" * 100_000
        assert [s.attempts[-1].number for s in await instance.steps()] == [1]


async def test_listings_that_do_not_show_values_fetch_no_blob(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    async with engine(store_url, tmp_path / "blobs", clock) as eng:
        counting = eng.payloads.blobs
        assert isinstance(counting, CountingStore)
        await eng.workflow("big").create("one", {"size": 10, "pad": "p" * 100_000})
        transport = httpx.ASGITransport(app=create_app(eng))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as http:
            listed = await http.get("/api/workflows/big/instances")
            assert [i["id"] for i in listed.json()["instances"]] == ["one"]
            cloudflare = await http.get("/client/v4/accounts/acc/workflows/big/instances")
            assert cloudflare.status_code == 200, cloudflare.text
        assert counting.gets == 0
        (record,) = (await eng.list_instances("big")).instances  # the Python API opens them
        assert record.params == {"size": 10, "pad": "p" * 100_000} and counting.gets == 1
