"""PostgreSQL's filtered lists: a page of a filter with a tag equality is sought among that
tag's instances (its first chunk probed, then the rest as a set), never by walking every
instance; the numeric tags' own table, kept by the trigger and filled by its migration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from stepline import Engine
from stepline.store.migrations import load_migrations
from stepline.store.postgres import search_sql, split_url

from .._pg import connect, pg_admin_url
from ..conftest import STORES
from .test_postgres import fresh, migrate_by_hand, schemas, url_for
from .test_postgres_reads import Explained, explained

__all__ = ["explained", "schemas"]  # the fixtures, used by name

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif("postgres" not in STORES, reason="STEPLINE_TEST_STORES leaves out postgres"),
]


def _status(pk: int) -> str:
    """Four in five complete, then errored, waiting or queued."""
    if pk % 10 < 8:
        return "complete"
    return "errored" if pk % 10 == 8 else "waiting" if pk % 20 == 9 else "queued"


SEED = """
INSERT INTO instances (workflow, id, status, trigger, created_at, updated_at)
SELECT 'wf', 'i' || n, CASE WHEN n % 10 < 8 THEN 'complete' WHEN n % 10 = 8 THEN 'errored'
        WHEN n % 20 = 9 THEN 'waiting' ELSE 'queued' END, 'api', n, n
FROM generate_series(1, {count}) AS s(n);
INSERT INTO instance_tags (instance_pk, key, kind, text_value)
SELECT pk, 'g', 's', 'g-' || (pk % {groups}) FROM instances;
INSERT INTO instance_tag_numbers (instance_pk, key, kind, num_value)
SELECT pk, 'n', 'n', pk FROM instances;
"""
"""Instances whose status and tags follow their pk (a group ``g`` of pk modulo the groups, a
number ``n`` equal to the pk), written in SQL: their pks are 1 to ``count``."""


def _seed(url: str, count: int, groups: int) -> None:
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(SEED.format(count=count, groups=groups).encode())
        conn.execute("ANALYZE")


async def _opened(schemas: list[str]) -> str:
    url = url_for(fresh(schemas))
    async with Engine(url, worker=False):
        pass
    return url


CHUNKED: list[tuple[str, Callable[[int], bool]]] = [
    ("g = 'g-1'", lambda pk: pk % 3 == 1),  # a page in the first chunk
    ("g = 'g-1' and status = 'errored'", lambda pk: pk % 3 == 1 and _status(pk) == "errored"),
    ("g = 'g-2' and n >= 50 and n < 90", lambda pk: pk % 3 == 2 and 50 <= pk < 90),  # none early
    ("g = 'g-0' and status != 'complete'", lambda pk: pk % 3 == 0 and _status(pk) != "complete"),
    ("status = 'waiting' and g = 'g-1'", lambda pk: pk % 3 == 1 and _status(pk) == "waiting"),
    ("g = 'g-9'", lambda pk: False),
]


@pytest.mark.parametrize(("text", "matches"), CHUNKED, ids=[t for t, _ in CHUNKED])
async def test_pages_sought_in_the_tag_s_first_chunk_then_among_the_rest(
    schemas: list[str], monkeypatch: pytest.MonkeyPatch, text: str, matches: Callable[[int], bool]
) -> None:
    """With a first chunk of 4 of the tag's instances, pages of every size either way are the
    whole answer in order: whether the page lies in the chunk, partly, or past it."""
    monkeypatch.setattr(search_sql, "FIRST_CHUNK", 4)
    url = await _opened(schemas)
    _seed(url, 120, 3)
    expected = [f"i{pk}" for pk in range(1, 121) if matches(pk)]
    async with Engine(url, worker=False) as engine:
        for limit in (1, 3, 5, 50):
            for oldest_first in (False, True):
                found: list[str] = []
                cursor = None
                while True:
                    page = await engine.list_instances(
                        limit=limit, cursor=cursor, oldest_first=oldest_first, where=text
                    )
                    assert len(page.instances) <= limit
                    found += [record.id for record in page.instances]
                    if (cursor := page.cursor) is None:
                        break
                assert found == (expected if oldest_first else expected[::-1]), limit


async def test_a_broad_list_reads_the_tag_s_instances_not_every_instance(
    schemas: list[str], explained: Explained
) -> None:
    """A tag and a status both follow the pk: the tenant's instances are all complete, so its
    unfinished ones are none. The planner, expecting them spread evenly, would walk the
    instances newest first until it had a page; the list reads the tenant's 2,000 instances
    and the unfinished ones' index instead."""
    url = await _opened(schemas)
    count = 60_000
    _seed(url, count, 30)  # 2,000 instances in each group: more than a first chunk
    async with Engine(url, worker=False) as engine:
        explained.url = url.split("?")[0]
        where = "g = 'g-7' and n >= 30000 and status != 'complete'"
        page = await engine.list_instances(where=where)
        assert page.instances == []
        # with a workflow and a time range the filter nests: the tag equality still leads
        page = await engine.list_instances("wf", where=where, created_after=1)
        assert page.instances == []
    reads = explained.reads("ORDER BY")
    assert reads and all(rows <= count // 4 for _, rows in reads), reads


async def test_numeric_tags_move_to_their_own_table_and_stay_in_step(schemas: list[str]) -> None:
    """A schema of the release before (migrations up to the numeric tags' table) with tagged
    instances: the migration copies their numbers and booleans, and later writes of tags keep
    both tables right."""
    name = fresh(schemas)
    migrations = load_migrations("postgres")
    before = [m for m in migrations if m.name != "tag_numbers"]
    assert len(before) == len(migrations) - 1
    with connect(pg_admin_url()) as conn:
        migrate_by_hand(conn, name, before)
        conn.execute(
            "INSERT INTO instances (workflow, id, status, trigger, created_at, updated_at, tags)"
            " VALUES ('wf', 'a', 'queued', 'api', 1, 1, %s),"
            " ('wf', 'b', 'queued', 'api', 2, 2, %s)",
            ('{"n": 5, "vip": true, "who": "x"}', '{"n": 7}'),
        )
    url = url_for(name)

    def numbers() -> list[tuple[str, str, str, float]]:
        return [
            tuple(row)
            for row in query_in(
                name,
                "SELECT i.id, t.key, t.kind, t.num_value FROM instance_tag_numbers t"
                " JOIN instances i ON i.pk = t.instance_pk ORDER BY 1, 2",
            )
        ]

    async with Engine(url, worker=False) as engine:
        assert numbers() == [("a", "n", "n", 5.0), ("a", "vip", "b", 1.0), ("b", "n", "n", 7.0)]
        assert [r.id for r in (await engine.list_instances(where="n >= 6")).instances] == ["b"]
        assert [r.id for r in (await engine.list_instances(where="vip = true")).instances] == ["a"]
        query_in(name, 'UPDATE instances SET tags = \'{"n": 9, "who": "y"}\' WHERE id = \'a\'')
        assert numbers() == [("a", "n", "n", 9.0), ("b", "n", "n", 7.0)]
        assert [r.id for r in (await engine.list_instances(where="n >= 6")).instances] == ["b", "a"]
        await engine.store.retention.delete_instances("wf", ["b"])
        assert numbers() == [("a", "n", "n", 9.0)]


def query_in(schema: str, text: str) -> list[Any]:
    with connect(pg_admin_url()) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        cur = conn.execute(text.encode())
        return cur.fetchall() if cur.description else []
