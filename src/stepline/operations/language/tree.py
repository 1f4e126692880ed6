"""The filter's syntax tree: what ``parser`` builds and ``render`` turns into SQL.

Literal values are checked and converted when parsed (a time is seconds since the epoch, a
status one of the statuses), so rendering never fails and never sees text it must quote.
"""

from __future__ import annotations

from dataclasses import dataclass

Value = str | float | bool
"""A literal: text, a number (ints are kept as floats' equals) or a boolean."""


@dataclass(frozen=True)
class Column:
    """A column the filter reads: a built-in one (``columns.BUILTINS``) or a tag."""

    name: str
    tag: bool


@dataclass(frozen=True)
class Compare:
    """``column op value``; ``op`` is one of ``= != < <= > >=``."""

    column: Column
    op: str
    value: Value


@dataclass(frozen=True)
class In:
    """``column in (values)``, or ``not in`` when ``negated``."""

    column: Column
    values: tuple[Value, ...]
    negated: bool = False


@dataclass(frozen=True)
class Like:
    """``column like 'pattern'`` (``%`` any run, ``_`` one character, case-insensitive)."""

    column: Column
    pattern: str
    negated: bool = False


@dataclass(frozen=True)
class Present:
    """``exists column`` / ``column is not null``; ``column is null`` when ``negated``."""

    column: Column
    negated: bool = False


@dataclass(frozen=True)
class And:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Not:
    item: Expr


Expr = Compare | In | Like | Present | And | Or | Not


@dataclass(frozen=True)
class Filter:
    """A parsed filter: its tree and the text it came from (shown back, stored with a bulk
    job). Several filters combine with :meth:`all`."""

    expr: Expr | None
    text: str = ""

    @staticmethod
    def all(*filters: Filter | None) -> Filter:
        """Every given filter at once (None and empty ones left out)."""
        kept = [f for f in filters if f is not None and f.expr is not None]
        if not kept:
            return Filter(None, "")
        if len(kept) == 1:
            return kept[0]
        text = " and ".join(f"({f.text})" for f in kept)
        return Filter(And(tuple(f.expr for f in kept if f.expr is not None)), text)
