"""Numbered SQL migrations, one folder per database dialect (``0001_initial.sql``, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from ...errors import StoreError


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(dialect: str) -> list[Migration]:
    """The migrations of ``dialect`` ("sqlite" or "postgres") in version order."""
    folder = resources.files(__package__).joinpath(dialect)
    found: list[Migration] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        number, _, rest = entry.name.partition("_")
        found.append(Migration(int(number), rest.removesuffix(".sql"), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{dialect} migrations are not numbered 1..n: {versions}")
    return found


def check_current(where: str, applied: set[int], migrations: list[Migration]) -> tuple[int, int]:
    """For a store opened read-only, which migrates nothing: its schema versions (before and
    after, the same), or ``StoreError`` if the database lacks migrations this code needs."""
    latest = max((m.version for m in migrations), default=0)
    have = max(applied, default=0)
    if have < latest:
        raise StoreError(
            f"the database at {where} has schema version {have}, this stepline needs {latest}: "
            "it opens read-only here and migrates nothing; upgrade it first (start a worker or "
            "run `stepline db init`)"
        )
    return have, have
