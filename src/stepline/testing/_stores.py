"""Where an environment keeps its instances: a temporary SQLite file, SQLite in memory, a fresh
schema on a PostgreSQL server, or a database URL the test owns; and its clean-up."""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import uuid

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
"""The server ``store="postgres"`` uses unless ``STEPLINE_TEST_DATABASE_URL`` names one."""

STORES = ("sqlite", "memory", "postgres")


class Database:
    """The database of one environment (see :class:`~stepline.testing.WorkflowTestEnv`)."""

    __slots__ = ("_directory", "_schema", "url")

    def __init__(self, store: str) -> None:
        self._directory: str | None = None
        self._schema: tuple[str, str] | None = None
        if store == "sqlite":
            self._directory = tempfile.mkdtemp(prefix="stepline-test-")
            self.url = f"sqlite:///{self._directory}/stepline.db"
        elif store == "memory":
            self.url = "sqlite://:memory:"
        elif store == "postgres":
            server = os.environ.get("STEPLINE_TEST_DATABASE_URL") or DEFAULT_POSTGRES
            schema = f"stepline_test_{uuid.uuid4().hex[:12]}"
            self._schema = (server, schema)
            self.url = f"{server}{'&' if '?' in server else '?'}schema={schema}"
        elif store.startswith(("sqlite:", "postgresql:", "postgres:")):
            self.url = store  # the test's own: left as it is at the end
        else:
            raise ValueError(
                f"unknown store {store!r}: use one of {', '.join(STORES)} or a database URL "
                "(sqlite:///path.db, postgresql://user@host/db)"
            )

    async def remove(self) -> None:
        """Delete what this environment created: the temporary file, the schema."""
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
        if self._schema is not None:
            server, schema = self._schema
            self._schema = None
            # Imported only for a PostgreSQL environment: psycopg is slow to import, and every
            # pytest run of a project with stepline installed imports this package's plugin.
            postgres = importlib.import_module("._pgschema", __package__)
            await postgres.drop_schema(server, schema)
