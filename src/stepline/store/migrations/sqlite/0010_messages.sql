-- Messages (docs/messaging.md). An update travels to its instance as an event of type '@update'
-- (event_pk); its row keeps the reply once the handler's record ends, for callers that retry.
CREATE TABLE updates (
    pk          INTEGER PRIMARY KEY,
    instance_pk INTEGER NOT NULL,
    update_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    event_pk    INTEGER NOT NULL,
    status      TEXT NOT NULL,
    reply       TEXT,
    error       TEXT,
    created_at  REAL NOT NULL,
    ended_at    REAL,
    UNIQUE (instance_pk, update_id)
);

-- A stream's last number (items are numbered 1, 2, ... and numbers are never reused).
CREATE TABLE streams (
    instance_pk INTEGER NOT NULL,
    stream      TEXT NOT NULL,
    last_seq    INTEGER NOT NULL,
    PRIMARY KEY (instance_pk, stream)
) WITHOUT ROWID;

-- Items published to streams; origin (who published it) is unique per stream, so a retried
-- step publishing again appends nothing new.
CREATE TABLE stream_items (
    instance_pk INTEGER NOT NULL,
    stream      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    origin      TEXT NOT NULL,
    value       TEXT,
    created_at  REAL NOT NULL,
    PRIMARY KEY (instance_pk, stream, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX stream_items_origin ON stream_items (instance_pk, stream, origin);

-- Queries that a client without a workflow's code leaves for a worker that has it (numbers
-- never reused: a caller holding one that expired must not read another's answer).
CREATE TABLE query_requests (
    pk          INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow    TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    args        TEXT NOT NULL,
    answered    INTEGER NOT NULL DEFAULT 0,
    answer      TEXT,
    error       TEXT,
    taken_by    TEXT,
    taken_until REAL,
    created_at  REAL NOT NULL
);
CREATE INDEX query_requests_open ON query_requests (workflow, pk) WHERE answered = 0;
CREATE INDEX query_requests_created ON query_requests (created_at);
