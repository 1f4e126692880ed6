"""The PostgreSQL statements of filtered lists and counts: a filter's condition (``render``)
completed into a page or a count of one schema's instances.

A page of a filter with a tag equality (``split_driver``) is sought among that tag's instances
only, never by walking ``instances`` in pk order: the planner expects matches spread evenly
and walks until it has a page, so that when the tests are correlated (a tenant whose instances
are all complete, asked for its unfinished ones) it reads every instance. Instead the tag's
newest ``FIRST_CHUNK`` instances are tested one by one (a page when matches are common
stops there); only when they hold less than a page are all the matches found as a set (hash
or merge joins over the indexes, planned for the whole answer, not its first rows) and the
newest kept.
"""

from __future__ import annotations

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


class Statements:
    """The statements of one schema that a filter's condition completes."""

    def __init__(self, schema: str, *, first_chunk: int = FIRST_CHUNK) -> None:
        self.s = sql.Identifier(schema).as_string()
        self.tags = f"{self.s}.instance_tags"
        self.numbers = f"{self.s}.instance_tag_numbers"
        self.first_chunk = first_chunk

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
    ) -> tuple[str, list[Any]]:
        """A page of at most ``limit`` of ``where`` after the cursor's pk ``after`` if any."""
        window = _window(after, oldest_first)
        order = "ASC" if oldest_first else "DESC"
        page = (" AND i.pk > %s" if oldest_first else " AND i.pk < %s") if after is not None else ""
        paged = [after] if after is not None else []
        cond, params = self.condition(where, window)
        select = f"SELECT {INSTANCE_COLUMNS}, i.tags FROM {self.s}.instances i"
        split = split_driver(where)
        if split is None:
            return (
                f"{select} WHERE ({cond}){page} ORDER BY i.pk {order} LIMIT %s",
                [*params, *paged, limit],
            )
        driver = render_driver(
            split[0], "postgres", tags_table=self.tags, numbers_table=self.numbers, window=window
        )
        rest, rest_params = self.condition(split[1], window)
        chunk = f"{driver.sql} ORDER BY t.instance_pk {order} LIMIT {self.first_chunk}"
        edge = "max" if oldest_first else "min"
        beyond = ">" if oldest_first else "<"
        # a: the page among the chunk, probed in pk order (it stops at a page); b: every match,
        # as a set, kept beyond the chunk; e: the chunk's size and edge. b and e run (one-time
        # filters) only when a holds less than a page.
        statement = (
            f"WITH a AS MATERIALIZED (SELECT i.pk FROM ({chunk}) d"
            f" JOIN {self.s}.instances i ON i.pk = d.instance_pk WHERE ({rest}){page}"
            f" ORDER BY d.instance_pk {order} LIMIT %s),"
            f" b AS MATERIALIZED (SELECT i.pk FROM {self.s}.instances i WHERE ({cond}){page}),"
            f" e AS MATERIALIZED (SELECT count(*) AS n, {edge}(instance_pk) AS edge"
            f" FROM ({chunk}) d)"
            f" {select} WHERE i.pk IN ((SELECT pk FROM a) UNION ALL"
            f" (SELECT pk FROM b WHERE (SELECT count(*) FROM a) < %s"
            f" AND (SELECT n FROM e) = {self.first_chunk}"
            f" AND b.pk {beyond} (SELECT edge FROM e) ORDER BY pk {order} LIMIT %s)"
            f") ORDER BY i.pk {order} LIMIT %s"
        )
        return statement, [
            *driver.params, *rest_params, *paged, limit,
            *params, *paged, *driver.params, limit, limit, limit,
        ]  # fmt: skip

    def count(self, where: Filter, *, up_to: bool = False) -> tuple[str, list[Any]]:
        cond, params = self.condition(where)
        bound = "i.pk <= %s AND " if up_to else ""
        return f"SELECT count(*) FROM {self.s}.instances i WHERE {bound}({cond})", params
