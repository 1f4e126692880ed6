"""Deduplication under a race: 20 clients, each with its own store connection, create the same
ten dedup keys at once; exactly one instance per key exists, and every client got its id."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from stepline import Engine, Workflow, WorkflowEvent, WorkflowStep

CLIENTS = 20
KEYS = 10


class Order(Workflow):
    name = "order"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> None:
        return None


def _few_connections(url: str) -> str:
    """Twenty stores of up to 11 connections each would take all of a default PostgreSQL
    server's 100, and a test running beside this one would be refused."""
    if not url.startswith("postgres"):
        return url
    return f"{url}{'&' if '?' in url else '?'}max_connections=5"


async def test_twenty_concurrent_creators_make_one_instance_per_key(store_url: str) -> None:
    url = _few_connections(store_url)
    clients = [Engine(url, [Order], worker=False) for _ in range(CLIENTS)]
    for client in clients:
        await client.open()
    try:

        async def create_all(client: Engine) -> list[str]:
            binding = client.workflow(Order.name)
            made = [binding.create(dedup_key=f"order-{k}") for k in range(KEYS)]
            return [instance.id for instance in await asyncio.gather(*made)]

        got = await asyncio.gather(*(create_all(client) for client in clients))
        page = await clients[0].list_instances(Order.name, limit=1000)
    finally:
        for client in clients:
            await client.close()
    by_key: dict[str | None, list[str]] = defaultdict(list)
    for record in page.instances:
        by_key[record.dedup_key].append(record.id)
    assert sorted(by_key) == sorted(f"order-{k}" for k in range(KEYS))
    assert all(len(ids) == 1 for ids in by_key.values()), by_key
    for ids in got:  # every client was handed the one instance of each key
        assert ids == [by_key[f"order-{k}"][0] for k in range(KEYS)]
