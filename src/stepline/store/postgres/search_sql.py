"""The PostgreSQL statements of filtered lists and counts: a filter's condition (``render``)
completed into a page or a count of one schema's instances.

A page of a filter with a tag equality (``split_driver``) is sought among that tag's instances
only, never by walking ``instances`` in pk order: the planner expects matches spread evenly
and walks until it has a page, so that when the tests are correlated (a tenant whose instances
are all complete, asked for its unfinished ones) it reads every instance. Instead the first
statement probes the tag's newest ``FIRST_CHUNK`` instances one by one, in pk order (a page
when matches are common stops there); only when they hold less than a page does a second
find the matches past them as a set (hash or merge joins over the indexes, planned for the
whole answer, not its first rows) and keep the newest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from ...operations.language import Filter, PkWindow, render, render_driver, split_driver
from .sql import INSTANCE_COLUMNS

FIRST_CHUNK = 1000
"""The tag's instances a page is first sought among, probed one by one. A probe costs several
times what a hashed read does, so probing pays while a page lies among the first (a twentieth
of them match); past that the set is cheaper."""


def _window(after: int | None, oldest_first: bool) -> PkWindow | None:
    """The pks a page after the cursor's pk ``after`` reads."""
    if after is None:
        return None
    return PkWindow(above=after) if oldest_first else PkWindow(below=after)


@dataclass(frozen=True)
class PageQuery:
    """The first statement of a page. When ``driven``, each row ends with two more columns,
    whether the tag's first chunk was full and its last pk (the edge), and a row of NULLs
    stands for a chunk without matches; :meth:`Statements.beyond` reads past the edge."""

    sql: str
    params: list[Any]
    driven: bool


class Statements:
    """The statements of one schema that a filter's condition completes."""

    def __init__(self, schema: str) -> None:
        self.s = sql.Identifier(schema).as_string()
        self.tags = f"{self.s}.instance_tags"
        self.numbers = f"{self.s}.instance_tag_numbers"
        self.first_chunk = FIRST_CHUNK
        self.select = f"SELECT {INSTANCE_COLUMNS}, i.tags FROM {self.s}.instances i"

    def condition(
        self, where: Filter | None, window: PkWindow | None = None
    ) -> tuple[str, list[Any]]:
        """``where`` on ``instances i`` and its parameters."""
        cond = render(
            where, "postgres", tags_table=self.tags, numbers_table=self.numbers, window=window
        )
        return cond.sql, cond.params

    def search(
        self, where: Filter, limit: int, *, after: int | None, oldest_first: bool
    ) -> PageQuery:
        """A page of at most ``limit`` of ``where`` after the cursor's pk ``after`` if any."""
        window = _window(after, oldest_first)
        order = "ASC" if oldest_first else "DESC"
        page = (" AND i.pk > %s" if oldest_first else " AND i.pk < %s") if after is not None else ""
        paged = [after] if after is not None else []
        split = split_driver(where)
        if split is None:
            cond, params = self.condition(where, window)
            return PageQuery(
                f"{self.select} WHERE ({cond}){page} ORDER BY i.pk {order} LIMIT %s",
                [*params, *paged, limit],
                driven=False,
            )
        driver = render_driver(
            split[0], "postgres", tags_table=self.tags, numbers_table=self.numbers, window=window
        )
        rest, rest_params = self.condition(split[1], window)
        chunk = f"{driver.sql} ORDER BY t.instance_pk {order} LIMIT {self.first_chunk}"
        edge = "max" if oldest_first else "min"
        # e: one row, the chunk's fullness and edge, whatever matched; p: the page among the
        # chunk, probed in the chunk's order (it stops at a page).
        statement = (
            f"SELECT p.*, e.chunk_full, e.chunk_edge FROM (SELECT"
            f" count(*) = {self.first_chunk} AS chunk_full, {edge}(instance_pk) AS chunk_edge"
            f" FROM ({chunk}) d) e LEFT JOIN ("
            f"SELECT {INSTANCE_COLUMNS}, i.tags FROM ({chunk}) d"
            f" JOIN {self.s}.instances i ON i.pk = d.instance_pk WHERE ({rest}){page}"
            f" ORDER BY d.instance_pk {order} LIMIT %s) p ON true ORDER BY p.pk {order}"
        )
        params = [*driver.params, *driver.params, *rest_params, *paged, limit]
        return PageQuery(statement, params, driven=True)

    def beyond(
        self, where: Filter, limit: int, *, edge: int, oldest_first: bool
    ) -> tuple[str, list[Any]]:
        """The first ``limit`` matches of ``where`` past the pk ``edge`` (newer with
        ``oldest_first``, else older), found as a set: a materialized CTE is planned for all
        its rows, so the planner never walks ``instances`` hoping for a page early."""
        window = PkWindow(above=edge) if oldest_first else PkWindow(below=edge)
        cond, params = self.condition(where, window)
        order = "ASC" if oldest_first else "DESC"
        past = ">" if oldest_first else "<"
        return (
            f"WITH b AS MATERIALIZED (SELECT i.pk FROM {self.s}.instances i"
            f" WHERE ({cond}) AND i.pk {past} %s)"
            f" {self.select} WHERE i.pk IN (SELECT pk FROM b ORDER BY pk {order} LIMIT %s)"
            f" ORDER BY i.pk {order}",
            [*params, edge, limit],
        )

    def count(self, where: Filter, *, up_to: bool = False) -> tuple[str, list[Any]]:
        cond, params = self.condition(where)
        bound = "i.pk <= %s AND " if up_to else ""
        return f"SELECT count(*) FROM {self.s}.instances i WHERE {bound}({cond})", params
