"""Both stores execute the rules of ``stepline.flow`` alike, though each reads and writes its own
way (SQLite row by row in its write lock, PostgreSQL in pipelined round trips under advisory
locks): random workflows, limits, instances and claims, run on both stores side by side with
one manual clock, must take the same instances in the same order at every claim, and steps'
slots of named limits and finishes must come out alike."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from stepline import ManualClock
from stepline.limits import Limit, Rate, WorkflowLimits
from stepline.store.base import Claim, Finish, NewInstance, StepWrite, Store, WorkflowMeta
from stepline.store.postgres import PostgresStore
from stepline.store.sqlite import SqliteStore

from ..conftest import STORES
from .test_postgres import fresh, schemas, url_for

__all__ = ["schemas"]  # the fixture, used by name

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]

WORKFLOWS = ("a", "b", "c")
NAMED = ("n1", "n2")
LEASE = 600.0
"""Longer than any scenario: an expired lease frees a key that SQLite has set aside only at its
next recheck (docs/flow-control.md, "How it works"), where PostgreSQL reads it at once."""


def _limits(rng: random.Random) -> WorkflowLimits:
    return WorkflowLimits(
        concurrency=rng.choice([None, None, 1, 2, 4]),
        rate=rng.choice([None, None, Rate(rng.randint(1, 4), 60.0)]),
        key_concurrency=rng.choice([None, 1, 2]),
        limits=tuple(name for name in NAMED if rng.random() < 0.3),
    )


def _named(rng: random.Random, name: str) -> Limit:
    concurrency = rng.choice([None, 2, 3])
    rate = rng.choice([None, "3/minute"]) if concurrency is not None else "4/minute"
    return Limit(name, concurrency=concurrency, rate=rate)


def _instances(rng: random.Random, first: int) -> dict[str, list[NewInstance]]:
    made: dict[str, list[NewInstance]] = {}
    for n in range(first, first + rng.randint(1, 8)):
        item = NewInstance(
            f"i{n}",
            None,
            key=rng.choice([None, "k0", "k1", "k2"]),
            priority=rng.choice([0, 0, 0, 1, -1]),
        )
        made.setdefault(rng.choice(WORKFLOWS), []).append(item)
    return made


def _patches(
    rng: random.Random, workflows: Sequence[str]
) -> dict[tuple[str, str], list[str]] | None:
    """The patches a claim's code has: every one (None), or some of ``p0`` and ``p1``."""
    if rng.random() < 0.5:
        return None
    return {(w, "1"): [p for p in ("p0", "p1") if rng.random() < 0.6] for w in workflows}


async def _both(
    stores: Sequence[Store], clock: ManualClock, seed: int
) -> list[tuple[str, list[str]]]:
    """Run scenario ``seed`` on each store; each claim's ids, as the first store took them."""
    rng = random.Random(seed)
    metas = [WorkflowMeta(w, f"tests:{w}", None, _limits(rng)) for w in WORKFLOWS]
    named = [_named(rng, name) for name in NAMED]
    for store in stores:
        await store.register_workflows(metas, named)
    held: list[list[Claim]] = [[] for _ in stores]
    made = 0
    log: list[tuple[str, list[str]]] = []
    for step in range(40):
        clock.advance(rng.choice([0.0, 0.5, 1.0, 7.0, 31.0]))
        roll = rng.random()
        if roll < 0.25:
            batch = _instances(rng, made)
            made += sum(len(items) for items in batch.values())
            for store in stores:
                for workflow, items in batch.items():
                    await store.create_instances(
                        workflow, items, trigger="api", skip_existing=False
                    )
        elif roll < 0.7:
            workflows = [w for w in WORKFLOWS if rng.random() < 0.7] or ["a"]
            limit = rng.randint(1, 6)
            caps = {w: rng.randint(1, 3) for w in workflows if rng.random() < 0.2}
            patches = _patches(rng, workflows)
            taken = []
            for store, leases in zip(stores, held, strict=True):
                claims = (
                    await store.claim(
                        "me",
                        workflows,
                        limit,
                        LEASE,
                        store.now(),
                        caps=caps or None,
                        patches=patches,
                    )
                ).claims
                leases.extend(claims)
                taken.append([c.instance.id for c in claims])
            what = f"step {step}: claim {workflows} limit {limit} caps {caps} patches {patches}"
            assert taken[1:] == taken[:1] * (len(stores) - 1), (what, taken)
            log.append((what, taken[0]))
        elif roll < 0.8 and held[0]:  # a step takes a slot of a named limit
            index = rng.randrange(len(held[0]))
            name = rng.choice(NAMED)
            got = [
                await store.flow.acquire_limit(leases[index].lease, name, f"s{step}-1", now)
                for store, leases in zip(stores, held, strict=True)
                for now in [store.now()]
            ]
            assert got[1:] == got[:1] * (len(stores) - 1), (f"step {step}: acquire {name}", got)
        elif held[0]:
            index = rng.randrange(len(held[0]))
            status = rng.choice(["complete", "complete", "waiting"])
            marked = tuple(
                StepWrite(f"patch:p{n}", 1, 90 + n, "patch", "complete")
                for n in range(2)
                if rng.random() < 0.2
            )
            ended = []
            for store, leases in zip(stores, held, strict=True):
                done = leases.pop(index)
                if status == "complete":
                    finish = Finish("complete", output="null")
                else:  # some take a patch before they suspend: claims route on it
                    finish = Finish("waiting", wake_at=store.now() + 5.0, steps=marked)
                ended.append(await store.finish(done.lease, finish, store.now()))
            assert ended[1:] == ended[:1] * (len(stores) - 1), (f"step {step}: finish", ended)
    return log


@pytest.mark.parametrize("seed", range(30))
async def test_random_claims_take_what_the_sqlite_store_takes(
    schemas: list[str], tmp_path: Path, seed: int
) -> None:
    clock = ManualClock(1000.0)
    stores: list[Store] = [
        SqliteStore(f"sqlite:///{tmp_path / 'flow.db'}", clock),
        PostgresStore(url_for(fresh(schemas)), clock, pool_size=2),
    ]
    for store in stores:
        await store.open()
    try:
        log = await _both(stores, clock, seed)
    finally:
        for store in stores:
            await store.close()
    assert any(taken for _what, taken in log)  # the scenario claimed something
