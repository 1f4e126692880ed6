"""Queue triggers: messages per second turned into durable instances, per broker and store.

For each broker in :data:`BROKERS` (a server on this machine) and each store:

- the floor: the broker's own raw rate, receiving batches of ``BATCH`` and acknowledging them
  with the same broker class the consumer uses, nothing else (no JSON, no database);
- the consumer with one batch in flight (``run_once`` in a loop): decode, one ``create_batch``
  per batch (a durable transaction), acknowledge;
- the consumer with ``concurrency = 4`` batches in flight (``run()``).

Both read messages published beforehand to a fresh queue (the publish rate is reported too), so
the figures are consume rates, not publish rates. No worker runs: the instances stay queued.
The ratio is the time per message over the floor's.

Run: ``python -m benchmarks triggers``. Add a broker by adding its name to :data:`BROKERS` (its
URL is in :data:`URLS`, overridable with ``STEPLINE_BENCH_<NAME>_URL``).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence

import aio_pika
import nats
import redis.asyncio as aioredis

from stepline.triggers import QueueTrigger
from stepline.triggers.queues import Broker, Consumer, open_broker

from ._common import client
from ._config import BenchConfig, database, parse, work_directory
from ._report import Figure, Floor, Report, median
from ._run import execute
from ._workflows import Trivial

NAME = "triggers"
BATCH = 100
LANES = 4
BROKERS = ["redis", "rabbitmq", "nats"]
"""The brokers measured (each must be running); "rabbitmq" and "nats" once their modules are
merged (their URLs and clean-ups are below)."""
URLS = {
    "redis": "redis://127.0.0.1:6379/0",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672/",
    "nats": "nats://127.0.0.1:4222",
}


def _url(broker: str) -> str:
    return os.environ.get(f"STEPLINE_BENCH_{broker.upper()}_URL", URLS[broker])


async def _redis_cleanup(url: str, queue: str) -> None:
    # Redis streams keep acknowledged entries; the others' queues end empty.
    connection = aioredis.Redis.from_url(url)
    await connection.delete(queue, f"{queue}.dead")
    await connection.aclose()


async def _rabbitmq_cleanup(url: str, queue: str) -> None:
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel()
        await channel.queue_delete(queue)
        await channel.queue_delete(f"{queue}.dead")
        await channel.exchange_delete(f"{queue}.dead")
    finally:
        await connection.close()


async def _nats_cleanup(url: str, queue: str) -> None:
    # JetStream keeps acknowledged messages in the stream: delete the streams holding the
    # queue's subject and its dead letters.
    connection = await nats.connect(url)
    try:
        js = connection.jetstream()
        for info in await js.streams_info():
            name = info.config.name
            if name and set(info.config.subjects or ()) & {queue, f"{queue}.dead"}:
                await js.delete_stream(name)
    finally:
        await connection.close()


CLEANUP: dict[str, Callable[[str, str], Awaitable[None]]] = {
    "redis": _redis_cleanup,
    "rabbitmq": _rabbitmq_cleanup,
    "nats": _nats_cleanup,
}
"""How to remove a broker's benchmark queues afterwards, where they keep anything."""


async def _publish(url: str, queue: str, count: int) -> float:
    """Publish ``count`` messages (bodies the benchmark workflow takes); return seconds."""
    broker = open_broker(url, queue)
    await broker.connect()
    start = time.perf_counter()
    for n in range(count):
        await broker.publish(b'{"steps": 1, "n": %d}' % n, message_id=f"m-{n}")
    seconds = time.perf_counter() - start
    await broker.close()
    return seconds


async def _raw(url: str, queue: str, count: int) -> float:
    """The floor: receive and acknowledge ``count`` messages, nothing else; return seconds."""
    broker: Broker = open_broker(url, queue)
    await broker.connect()
    received = 0
    start = time.perf_counter()
    while received < count:
        messages = await broker.receive(BATCH, 1.0)
        await broker.ack(messages)
        received += len(messages)
    seconds = time.perf_counter() - start
    await broker.close()
    return seconds


async def _consume(db_url: str, url: str, queue: str, count: int, lanes: int) -> float:
    """Consume ``count`` messages into instances; return seconds."""
    trigger = QueueTrigger(
        broker=url, queue=queue, workflow=Trivial.name, batch_size=BATCH, concurrency=lanes
    )
    async with client(db_url) as engine:
        consumer = Consumer(engine, trigger, receive_timeout=0.2)
        await consumer.check_workflow()
        start = time.perf_counter()
        if lanes == 1:
            while consumer.handled < count:
                await consumer.run_once(1.0)
        else:
            running = asyncio.create_task(consumer.run())
            # The consumer only counts: polling it every 5 ms is noise against a run of seconds.
            while consumer.handled < count and not running.done():  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        seconds = time.perf_counter() - start
        if lanes != 1:
            consumer.stop()
            await running
        await consumer.close()
        infos = await engine.list_workflows()
        created = sum(sum(i.counts.values()) for i in infos if i.name == Trivial.name)
        if created != count or consumer.dead_lettered:
            raise RuntimeError(f"{created} instances from {count} messages: a bug")
    return seconds


async def run(config: BenchConfig) -> list[Report]:
    """One report per broker and store."""
    return [await _run_one(config, broker, store) for broker in BROKERS for store in config.stores]


async def _run_one(config: BenchConfig, broker: str, store: str) -> Report:
    count = 2_000 if config.quick else 10_000
    runs = config.repetitions(heavy=False)
    url = _url(broker)
    series: dict[str, list[float]] = defaultdict(list)
    cleanup = CLEANUP.get(broker)
    with work_directory(config) as directory:
        for _ in range(runs):
            queues = [f"bench-{uuid.uuid4().hex[:10]}" for _ in range(3)]
            try:
                for queue in queues:
                    seconds = await _publish(url, queue, count)
                series["publish_rate"].append(count / seconds)
                seconds = await _raw(url, queues[0], count)
                series["floor_rate"].append(count / seconds)
                series["floor_us"].append(seconds / count * 1e6)
                for key, queue, lanes in (("one", queues[1], 1), ("lanes", queues[2], LANES)):
                    with database(config, store, directory) as db_url:
                        seconds = await _consume(db_url, url, queue, count, lanes)
                    series[f"{key}_rate"].append(count / seconds)
                    series[f"{key}_us"].append(seconds / count * 1e6)
            finally:
                if cleanup is not None:
                    for queue in queues:
                        await cleanup(url, queue)
    floor = Floor(
        f"{broker} receive + ack, batches of {BATCH}",
        median(series["floor_us"]),
        "µs",
        tuple(series["floor_us"]),
    )

    def fig(label: str, key: str, unit: str, with_floor: bool = False) -> Figure:
        return Figure(
            label, median(series[key]), unit, floor if with_floor else None, tuple(series[key])
        )

    report = Report(NAME, f"Queue trigger on {broker} into {store} (median of {runs} runs)")
    report.figures = [
        fig(f"consumer, 1 batch in flight: messages/s ({count:,})", "one_rate", "/s"),
        fig("consumer, 1 batch in flight: time per message", "one_us", "µs", True),
        fig(f"consumer, {LANES} batches in flight: messages/s", "lanes_rate", "/s"),
        fig(f"consumer, {LANES} batches in flight: time per message", "lanes_us", "µs", True),
        fig(f"floor: {broker} receive + ack only: messages/s", "floor_rate", "/s"),
        fig(f"{broker} publish, one at a time, confirmed: messages/s", "publish_rate", "/s"),
    ]
    report.details = {
        "broker": broker,
        "store": store,
        "messages": count,
        "batch": BATCH,
        "lanes": LANES,
        "runs": runs,
        "series": dict(series),
    }
    report.notes = [
        f"batches of {BATCH}; each batch is one durable create_batch, acknowledged after it",
        "ratio = time per message / the broker's own receive + ack time per message",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
