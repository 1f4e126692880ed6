"""Offload to an S3-compatible bucket, against a real S3 server started here (moto's server
mode, over HTTP: boto3 talks to it as to any S3 endpoint), on both stores."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from stepline import ManualClock
from stepline.engine import Engine
from stepline.payloads import BlobsConfig, PayloadConfig, S3BlobStore

from ..conftest import drain
from .test_offload import big


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The endpoint URL of a fresh S3 server with the bucket ``blobs``."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="blobs")
        yield endpoint
    finally:
        server.stop()


def keys_in(endpoint: str) -> list[str]:
    answer: Any = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket="blobs")
    return sorted(item["Key"] for item in answer.get("Contents", ()))


def payloads(endpoint: str) -> PayloadConfig:
    blobs = BlobsConfig(url="s3://blobs/stepline", endpoint_url=endpoint, region="us-east-1")
    return PayloadConfig(offload_over=64 * 1024, blobs=blobs)


async def test_values_offload_to_a_bucket_and_go_with_their_instance(
    store_url: str, s3: str, clock: ManualClock
) -> None:
    async with Engine(store_url, [big], worker=False, clock=clock, payloads=payloads(s3)) as engine:
        assert isinstance(engine.payloads.blobs, S3BlobStore)
        instance = await engine.workflow("big").create("one", {"size": 300_000, "pad": ""})
        await drain(engine)
        clock.advance(61)
        await drain(engine)
        assert (await instance.status()).output == {"length": 300_000, "params": 0}
        (key,) = keys_in(s3)
        assert key.startswith("stepline/big/one/")
        steps = {s.name: s.output for s in await instance.steps()}
        assert steps["make"] == "x" * 300_000
        # An orphan in the bucket is swept; the instance's blobs are deleted with it.
        s3_client: Any = boto3.client("s3", endpoint_url=s3)
        s3_client.put_object(Bucket="blobs", Key="stepline/big/gone/" + "0" * 64, Body=b"x")
        assert await engine.worker.sweep_blobs_now(time.time() + 3601) == 1
        await instance.delete()
        assert keys_in(s3) == []


async def test_purge_and_retention_delete_their_instances_objects_at_once(
    store_url: str, s3: str, clock: ManualClock
) -> None:
    async with Engine(store_url, [big], worker=False, clock=clock, payloads=payloads(s3)) as engine:
        wf = engine.workflow("big")
        await wf.create("purged", {"size": 300_000, "pad": ""})
        await drain(engine)
        clock.advance(61)
        await drain(engine)
        clock.advance(3600)
        await wf.create("expired", {"size": 300_000, "pad": ""}, retention={"complete": "1 hour"})
        await drain(engine)
        clock.advance(61)
        await drain(engine)
        assert [k.split("/")[2] for k in keys_in(s3)] == ["expired", "purged"]
        assert await wf.purge(older_than="30 minutes") == 1
        assert [k.split("/")[2] for k in keys_in(s3)] == ["expired"]
        clock.advance(3600)
        assert await engine.worker.purge_now() == 1
        assert keys_in(s3) == []


async def test_an_unreachable_bucket_fails_the_attempt_naming_the_store(
    store_url: str, s3: str, clock: ManualClock
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with Engine(
        store_url, [big], worker=False, clock=clock, payloads=payloads(dead)
    ) as engine:
        instance = await engine.workflow("big").create("lost", {"size": 100_000, "pad": ""})
        await drain(engine)
        (make,) = await instance.steps()
        assert make.status == "waiting"  # to be retried
        error = make.attempts[0].error
        assert error is not None and error["name"] == "BlobStoreError"
        assert f"blob store s3://blobs/stepline/ at {dead}: cannot write blob" in error["message"]
    # The same instance, once the store is reachable, goes on and completes.
    async with Engine(store_url, [big], worker=False, clock=clock, payloads=payloads(s3)) as engine:
        clock.advance(3600)
        await drain(engine)
        clock.advance(61)
        await drain(engine)
        status = await (await engine.workflow("big").get("lost")).status()
        assert status.output == {"length": 100_000, "params": 0}
