"""A parsed filter as a parameterised SQL condition over ``instances i``, per dialect.

Every value travels as a parameter; the SQL text is built only from the fixed column names of
``columns`` and the operators of the tree. A test of a tag is ``i.pk IN (SELECT ...)`` over the
tags table, whose indexes (key, value, instance) answer it: both databases then start from the
few instances a tag names (SQLite would run an ``EXISTS`` once per instance it scans).
The logic is two-valued: a test of a column that is NULL (or of a tag the instance lacks) is
false, so ``not`` and ``!=`` match it.

Numeric and boolean tags may live in a table of their own (``numbers_table``: PostgreSQL's,
whose statistics then describe numbers alone); SQLite keeps them in the tags table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .columns import BUILTINS, STATUSES
from .tree import And, Column, Compare, Expr, Filter, In, Like, Not, Or, Value

Dialect = Literal["sqlite", "postgres"]


@dataclass(frozen=True)
class PkWindow:
    """The instance pks a query reads (both bounds exclusive; None: unbounded): a page after a
    cursor, a bulk batch. Each tag test reads its index within them too, so that a later page
    or batch does not read again the tag rows of every earlier one."""

    above: int | None = None
    below: int | None = None


@dataclass(frozen=True)
class Rendered:
    """A condition on ``instances`` aliased ``i``, and its parameters in order."""

    sql: str
    params: list[Any] = field(default_factory=list)


def render(
    filter_: Filter | None,
    dialect: Dialect,
    *,
    tags_table: str,
    numbers_table: str | None = None,
    window: PkWindow | None = None,
) -> Rendered:
    """The condition for ``filter_`` (``1 = 1`` for none), with ``?`` (SQLite) or ``%s``
    (PostgreSQL) placeholders; ``tags_table`` is the tags table's (qualified) name,
    ``numbers_table`` the numeric tags' (default: the tags table). ``window``: the pks the
    query reads (the caller bounds ``i.pk`` itself), which bound the tag tests."""
    if filter_ is None or filter_.expr is None:
        return Rendered("1 = 1")
    out = _Renderer(dialect, tags_table, numbers_table, window or PkWindow())
    return Rendered(out.expr(filter_.expr), out.params)


def render_driver(
    driver: Compare,
    dialect: Dialect,
    *,
    tags_table: str,
    numbers_table: str | None = None,
    window: PkWindow | None = None,
) -> Rendered:
    """The pks of the instances whose tag equals a value (``driver``, from :func:`split_driver`)
    as a ``SELECT`` of one column, ``instance_pk``, read from the tag's index in pk order (the
    caller adds ORDER BY and LIMIT)."""
    out = _Renderer(dialect, tags_table, numbers_table, window or PkWindow())
    slot, bound = _slot(driver.value)
    sql = out.tag_rows(driver.column, _kind_of(driver.value), lambda: f"{slot} = {out.bind(bound)}")
    return Rendered(sql, out.params)


def split_driver(filter_: Filter | None) -> tuple[Compare, Filter] | None:
    """A tag equality every match must pass (the whole filter, or one of the tests its
    ``and`` requires, nested ones included), and the filter of the other tests; None when
    there is none. Its index yields the tag's instances in pk order, so a page can be sought
    among them alone."""
    if filter_ is None or filter_.expr is None:
        return None
    items = _conjuncts(filter_.expr)
    for n, item in enumerate(items):
        if isinstance(item, Compare) and item.column.tag and item.op == "=":
            rest = items[:n] + items[n + 1 :]
            expr = None if not rest else rest[0] if len(rest) == 1 else And(rest)
            return item, Filter(expr, filter_.text)
    return None


class _Renderer:
    def __init__(
        self, dialect: Dialect, tags_table: str, numbers_table: str | None, window: PkWindow
    ) -> None:
        self.mark = "?" if dialect == "sqlite" else "%s"
        self.dialect = dialect
        self.window = window
        self.like = "LIKE" if dialect == "sqlite" else "ILIKE"  # case-insensitive in both
        self.tags = tags_table
        self.numbers = numbers_table or tags_table
        self.params: list[Any] = []

    def bind(self, value: Any) -> str:
        self.params.append(value)
        return self.mark

    def expr(self, e: Expr) -> str:
        if isinstance(e, And):
            return "(" + " AND ".join(self.expr(item) for item in e.items) + ")"
        if isinstance(e, Or):
            return "(" + " OR ".join(self.expr(item) for item in e.items) + ")"
        if isinstance(e, Not):
            return f"(NOT {self.expr(e.item)})"
        if isinstance(e, Compare):
            if e.op == "!=" and self.complement(e.column):
                return self.member(e.column, _other_statuses((e.value,)))
            if e.op == "!=":
                return f"(NOT {self.compare(e.column, '=', e.value)})"
            return self.compare(e.column, e.op, e.value)
        if isinstance(e, In):
            if e.negated and self.complement(e.column):
                return self.member(e.column, _other_statuses(e.values))
            test = self.member(e.column, e.values)
            return f"(NOT {test})" if e.negated else test
        if isinstance(e, Like):
            test = self.pattern(e.column, e.pattern)
            return f"(NOT {test})" if e.negated else test
        test = self.present(e.column)
        return f"(NOT {test})" if e.negated else test

    def complement(self, column: Column) -> bool:
        """Whether a status test that excludes values is written as the others' ``IN``: then
        PostgreSQL reads the ``(status, pk)`` index for it rather than every instance's row.
        SQLite reads it best as it is."""
        return self.dialect == "postgres" and not column.tag and column.name == "status"

    # -- built-in columns and tags ---------------------------------------------------------------

    def compare(self, column: Column, op: str, value: Value) -> str:
        if column.tag:
            slot, bound = _slot(value)
            return self.tag_exists(
                column, _kind_of(value), lambda: f"{slot} {op} {self.bind(bound)}"
            )
        builtin = BUILTINS[column.name]
        test = f"i.{builtin.sql} {op} {self.bind(value)}"
        return f"(i.{builtin.sql} IS NOT NULL AND {test})" if builtin.nullable else test

    def member(self, column: Column, values: tuple[Value, ...]) -> str:
        if not column.tag:
            builtin = BUILTINS[column.name]
            marks = ", ".join(self.bind(v) for v in values)
            test = f"i.{builtin.sql} IN ({marks})"
            return f"(i.{builtin.sql} IS NOT NULL AND {test})" if builtin.nullable else test
        # One read per kind of value: each reads its own index.
        groups: dict[str, list[Value]] = {}
        for value in values:
            groups.setdefault(_kind_of(value), []).append(value)
        tests = [self.tag_in(column, kind, members) for kind, members in groups.items()]
        return tests[0] if len(tests) == 1 else "(" + " OR ".join(tests) + ")"

    def tag_in(self, column: Column, kind: str, members: list[Value]) -> str:
        slot = _slot(members[0])[0]

        def test() -> str:
            return f"{slot} IN ({', '.join(self.bind(_slot(v)[1]) for v in members)})"

        return self.tag_exists(column, kind, test)

    def pattern(self, column: Column, pattern: str) -> str:
        if column.tag:
            return self.tag_exists(
                column, "s", lambda: f"t.text_value {self.like} {self.bind(pattern)}"
            )
        builtin = BUILTINS[column.name]
        test = f"i.{builtin.sql} {self.like} {self.bind(pattern)}"
        return f"(i.{builtin.sql} IS NOT NULL AND {test})" if builtin.nullable else test

    def present(self, column: Column) -> str:
        if column.tag:
            key = self.bind(column.name)
            return (
                f"i.pk IN (SELECT t.instance_pk FROM {self.tags} t WHERE t.key = {key}"
                f"{self.bounds()})"
            )
        return f"i.{BUILTINS[column.name].sql} IS NOT NULL"

    def tag_exists(self, column: Column, kind: str, test: Callable[[], str]) -> str:
        """A test of the tag ``column`` holding a value of ``kind``; ``test`` renders the
        value's condition (after the key, so that the parameters stay in text order)."""
        return f"i.pk IN ({self.tag_rows(column, kind, test)})"

    def tag_rows(self, column: Column, kind: str, test: Callable[[], str]) -> str:
        """The pks of the instances whose tag ``column`` holds a value of ``kind`` passing
        ``test``.

        Only text tags have a ``text_value``, so a text test needs no ``kind``: it reads the
        index (key, text_value, instance_pk) alone, in pk order for an equality. Numbers and
        booleans share ``num_value``: their index is (key, kind, num_value, instance_pk)."""
        key = self.bind(column.name)
        kind_test = "" if kind == "s" else f" AND t.kind = '{kind}'"
        table = self.tags if kind == "s" else self.numbers
        return (
            f"SELECT t.instance_pk FROM {table} t WHERE t.key = {key}"
            f"{kind_test} AND {test()}{self.bounds()}"
        )

    def bounds(self) -> str:
        """The window's bounds on a tag test's rows (bound after the test's own values)."""
        out = ""
        if self.window.above is not None:
            out += f" AND t.instance_pk > {self.bind(self.window.above)}"
        if self.window.below is not None:
            out += f" AND t.instance_pk < {self.bind(self.window.below)}"
        return out


def _slot(value: Value) -> tuple[str, Any]:
    """The tags table's column that holds values like ``value``, and the parameter."""
    if isinstance(value, bool):
        return "t.num_value", 1.0 if value else 0.0
    if isinstance(value, float):
        return "t.num_value", value
    return "t.text_value", value


def _conjuncts(e: Expr) -> tuple[Expr, ...]:
    """The tests ``e`` requires all of, nested ``and`` flattened (a list's workflow and time
    ranges wrap the user's filter in one more)."""
    if not isinstance(e, And):
        return (e,)
    return tuple(item for nested in e.items for item in _conjuncts(nested))


def _other_statuses(values: tuple[Value, ...]) -> tuple[Value, ...]:
    """The statuses not among ``values`` (a status is never NULL: the same instances)."""
    return tuple(s for s in STATUSES if s not in values) or ("",)


def _kind_of(value: Value) -> str:
    """The tags table's ``kind``: ``s`` text, ``n`` number, ``b`` boolean."""
    if isinstance(value, bool):
        return "b"
    if isinstance(value, float):
        return "n"
    return "s"
