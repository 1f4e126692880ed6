"""PostgreSQL store: one database shared by any number of workers and clients on many machines.

URL: ``postgresql://user:password@host:5432/dbname?schema=NAME`` (or ``postgres://``). Every table
lives in schema ``NAME`` (default ``stepline``; created if missing), so stepline can share an
application's database. ``max_connections=N`` (default 11, at least 5) caps the server
connections one store opens. These two parameters are removed before connecting; other parameters
(``sslmode``, ``host=/socket/dir``, ...) go to libpq unchanged. How the store claims, fences,
groups writes, notifies, commits and retries: docs/architecture.md, "The PostgreSQL store".
"""

from .store import PostgresStore
from .url import PostgresUrl, parse_url, split_url

__all__ = ["PostgresStore", "PostgresUrl", "parse_url", "split_url"]
