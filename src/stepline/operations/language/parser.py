"""The filter language's parser: a tokenizer and a recursive descent over this grammar
(keywords in any case)::

    filter     := or
    or         := and ("or" and)*
    and        := unary ("and" unary)*
    unary      := "not" unary | "(" or ")" | "exists" column | test
    test       := column ("=" | "!=" | "<>" | "<" | "<=" | ">" | ">=") value
                | column ["not"] "in" "(" value ("," value)* ")"
                | column ["not"] "like" string
                | column "is" ["not"] "null"
    column     := name | "tag." name
    value      := 'text' | "text" | number | true | false

Each value is checked against its column as it is read (``columns``), so every mistake is
reported with the offset where it starts, and nothing that parses can fail later.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from .columns import BUILTINS, STATUSES, TAG_PREFIX, Kind, misspelt
from .errors import FilterError
from .tags import KEY_PATTERN, MAX_KEY
from .tree import And, Column, Compare, Expr, Filter, In, Like, Not, Or, Present, Value

MAX_FILTER = 4000
"""The longest filter text accepted."""
MAX_DEPTH = 50
"""How deeply parentheses and ``not`` may nest."""
MAX_IN = 1000
"""The most values in one ``in (...)`` list."""

KEYWORDS = frozenset({"and", "or", "not", "in", "like", "is", "null", "exists", "true", "false"})
_OPERATORS = ("<=", ">=", "!=", "<>", "=", "<", ">", "(", ")", ",")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z_][A-Za-z0-9_\-]*)?")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Token:
    kind: str
    """``name``, ``keyword``, ``string``, ``number``, ``op`` or ``end``."""
    text: str
    position: int
    value: Value | None = None


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token; a ``FilterError`` at the first
    character that starts none."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch in "'\"":
            end, value = _string(text, i)
            tokens.append(Token("string", value, i, value))
            i = end
            continue
        number = _NUMBER.match(text, i)
        if number and (ch.isdigit() or ch in "+-."):
            literal = number.group()
            amount = float(literal)
            if not math.isfinite(amount):
                raise FilterError(text, i, f"number {literal} is out of range")
            tokens.append(Token("number", literal, i, amount))
            i = number.end()
            continue
        name = _NAME.match(text, i)
        if name:
            word = name.group()
            kind = "keyword" if word.lower() in KEYWORDS else "name"
            tokens.append(Token(kind, word.lower() if kind == "keyword" else word, i))
            i = name.end()
            continue
        op = next((o for o in _OPERATORS if text.startswith(o, i)), None)
        if op is None:
            raise FilterError(text, i, f"unexpected character {ch!r}")
        tokens.append(Token("op", op, i))
        i += len(op)
    tokens.append(Token("end", "", n))
    return tokens


def _string(text: str, start: int) -> tuple[int, str]:
    """A quoted string from ``start``: the offset after it and its value. A quote is doubled
    to stand for itself, as in SQL (``'it''s'``)."""
    quote = text[start]
    parts: list[str] = []
    i = start + 1
    while True:
        end = text.find(quote, i)
        if end < 0:
            raise FilterError(text, start, "string is not closed")
        parts.append(text[i:end])
        if text.startswith(quote, end + 1):
            parts.append(quote)
            i = end + 2
            continue
        return end + 1, "".join(parts)


def parse(text: str) -> Filter:
    """Parse a filter; an empty (or blank) one matches everything. ``FilterError`` otherwise."""
    if not isinstance(text, str):
        raise FilterError(str(text), 0, f"a filter is text, not {type(text).__name__}")
    if len(text) > MAX_FILTER:
        raise FilterError(text[:80], MAX_FILTER, f"filter is longer than {MAX_FILTER} characters")
    for position, char in enumerate(text):
        # Neither database stores a NUL, nor a lone surrogate (it is not UTF-8).
        if char == "\x00" or "\ud800" <= char <= "\udfff":
            raise FilterError(text, position, f"character {char!r} is not allowed")
    tokens = tokenize(text)
    if tokens[0].kind == "end":
        return Filter(None, "")
    parser = _Parser(text, tokens)
    expr = parser.disjunction(0)
    parser.expect_end()
    return Filter(expr, text.strip())


class _Parser:
    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.at = 0

    # -- tokens ----------------------------------------------------------------------------------

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def accept(self, kind: str, text: str) -> bool:
        if self.token.kind == kind and self.token.text == text:
            self.at += 1
            return True
        return False

    def fail(self, token: Token, problem: str) -> FilterError:
        return FilterError(self.text, token.position, problem)

    def expected(self, what: str) -> FilterError:
        token = self.token
        found = "the end of the filter" if token.kind == "end" else repr(token.text)
        return self.fail(token, f"expected {what}, found {found}")

    def expect_end(self) -> None:
        if self.token.kind != "end":
            raise self.expected("'and', 'or' or the end of the filter")

    # -- grammar ---------------------------------------------------------------------------------

    def disjunction(self, depth: int) -> Expr:
        items = [self.conjunction(depth)]
        while self.accept("keyword", "or"):
            items.append(self.conjunction(depth))
        return items[0] if len(items) == 1 else Or(tuple(items))

    def conjunction(self, depth: int) -> Expr:
        items = [self.unary(depth)]
        while self.accept("keyword", "and"):
            items.append(self.unary(depth))
        return items[0] if len(items) == 1 else And(tuple(items))

    def unary(self, depth: int) -> Expr:
        if depth > MAX_DEPTH:
            raise self.fail(self.token, f"filter nests deeper than {MAX_DEPTH} levels")
        if self.accept("keyword", "not"):
            return Not(self.unary(depth + 1))
        if self.accept("op", "("):
            inner = self.disjunction(depth + 1)
            if not self.accept("op", ")"):
                raise self.expected("')'")
            return inner
        if self.accept("keyword", "exists"):
            return Present(self.column())
        return self.test()

    def test(self) -> Expr:
        start = self.token
        column = self.column()
        token = self.token
        if token.kind == "op" and token.text in ("=", "!=", "<>", "<", "<=", ">", ">="):
            self.take()
            op = "!=" if token.text == "<>" else token.text
            value = self.value(column, start, op)
            return Compare(column, op, value)
        negated = self.accept("keyword", "not")
        if self.accept("keyword", "in"):
            return In(column, self.values(column, start), negated)
        if self.accept("keyword", "like"):
            pattern = self.token
            if pattern.kind != "string":
                raise self.expected("a quoted pattern after 'like'")
            self.take()
            kind = _kind(column)
            if kind not in ("text", "tag"):
                raise self.fail(start, f"'like' compares text; column {column.name!r} is {kind}")
            return Like(column, str(pattern.value), negated)
        if negated:
            raise self.expected("'in' or 'like' after 'not'")
        if self.accept("keyword", "is"):
            negated = self.accept("keyword", "not")
            if not self.accept("keyword", "null"):
                raise self.expected("'null'")
            return Present(column, negated=not negated)
        raise self.expected("a comparison (=, !=, <, <=, >, >=, in, like, is null)")

    def column(self) -> Column:
        token = self.token
        if token.kind == "keyword":
            raise self.fail(token, f"expected a column name, found the keyword {token.text!r}")
        if token.kind != "name":
            raise self.expected("a column name")
        self.take()
        name = token.text
        if name.startswith(TAG_PREFIX):
            key = name[len(TAG_PREFIX) :]
            return Column(self.tag_key(token, key), tag=True)
        if "." in name:
            raise self.fail(
                token, f"unknown column {name!r}: a tag is written tag.<key>, as in tag.customer"
            )
        if name in BUILTINS:
            return Column(name, tag=False)
        guess = misspelt(name)
        if guess is not None:
            raise self.fail(
                token,
                f"unknown column {name!r} (did you mean {guess!r}? a tag of that name is "
                f"written tag.{name})",
            )
        return Column(self.tag_key(token, name), tag=True)

    def tag_key(self, token: Token, key: str) -> str:
        if len(key) > MAX_KEY or not KEY_PATTERN.fullmatch(key):
            raise self.fail(token, f"invalid tag key {key!r}")
        return key

    def values(self, column: Column, start: Token) -> tuple[Value, ...]:
        if not self.accept("op", "("):
            raise self.expected("'(' after 'in'")
        values = [self.value(column, start, "=")]
        while self.accept("op", ","):
            if len(values) >= MAX_IN:
                raise self.fail(self.token, f"'in' takes at most {MAX_IN} values")
            values.append(self.value(column, start, "="))
        if not self.accept("op", ")"):
            raise self.expected("',' or ')'")
        return tuple(values)

    def value(self, column: Column, start: Token, op: str) -> Value:
        """The literal at the current token, checked against ``column`` and converted."""
        token = self.token
        if token.kind in ("string", "number"):
            literal = token.value
        elif token.kind == "keyword" and token.text in ("true", "false"):
            literal = token.text == "true"
        elif token.kind == "keyword" and token.text == "null":
            raise self.fail(token, "compare with null as 'is null' or 'is not null'")
        else:
            raise self.expected("a value ('text', a number, true or false)")
        self.take()
        assert literal is not None
        return self.fit(column, token, literal, op)

    def fit(self, column: Column, token: Token, literal: Value, op: str) -> Value:
        kind = _kind(column)
        shown = _shown(token, literal)
        if kind == "tag":
            if isinstance(literal, bool) and op not in ("=", "!="):
                raise self.fail(token, f"{op!r} does not order booleans (tag {column.name!r})")
            return literal
        if kind == "time":
            return self.time(column, token, literal)
        if kind == "number":
            if isinstance(literal, bool) or not isinstance(literal, float):
                raise self.fail(token, f"column {column.name!r} is a number, not {shown}")
            return literal
        if not isinstance(literal, str):
            raise self.fail(token, f"column {column.name!r} is text, not {shown}")
        if kind == "status":
            if literal not in STATUSES:
                raise self.fail(token, f"unknown status {literal!r}: one of {', '.join(STATUSES)}")
            if op not in ("=", "!="):
                raise self.fail(token, f"{op!r} does not order statuses; use = or in (...)")
        return literal

    def time(self, column: Column, token: Token, literal: Value) -> float:
        if isinstance(literal, float):
            return literal
        if isinstance(literal, str):
            try:
                when = datetime.fromisoformat(literal)
            except ValueError:
                pass
            else:
                if when.tzinfo is None:
                    when = when.replace(tzinfo=UTC)
                return when.timestamp()
        raise self.fail(
            token,
            f"column {column.name!r} is a time: an ISO 8601 time such as "
            f"'2026-12-01T09:00Z' or seconds since the epoch, not {_shown(token, literal)}",
        )


def _kind(column: Column) -> Kind | str:
    return "tag" if column.tag else BUILTINS[column.name].kind


def _shown(token: Token, literal: Value) -> str:
    if isinstance(literal, bool):
        return "a boolean"
    if isinstance(literal, float):
        return f"the number {token.text}"
    return f"the text {literal[:60]!r}"
