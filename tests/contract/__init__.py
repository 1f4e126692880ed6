"""The store contract: every operation of :class:`stepline.store.base.Store` against its
docstring, on every store (SQLite and PostgreSQL), driven directly with a manual clock."""
