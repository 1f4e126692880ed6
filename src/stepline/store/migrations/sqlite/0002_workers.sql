-- Worker liveness: one row per running worker, rewritten by its heartbeat every few seconds,
-- deleted when it shuts down gracefully or, once it has stopped beating, by another worker's.
CREATE TABLE workers (
    id          TEXT PRIMARY KEY,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    started_at  REAL NOT NULL,
    last_seen   REAL NOT NULL,
    heartbeat   REAL NOT NULL,
    workflows   TEXT NOT NULL,
    concurrency INTEGER NOT NULL,
    running     INTEGER NOT NULL
) WITHOUT ROWID;
