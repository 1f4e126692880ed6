-- stepline schema, version 1 (SQLite). Times are REAL seconds since the epoch; payloads JSON text.
CREATE TABLE workflows (
    name        TEXT PRIMARY KEY,
    class_name  TEXT NOT NULL,
    definition  TEXT,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);

CREATE TABLE instances (
    pk               INTEGER PRIMARY KEY,
    workflow         TEXT NOT NULL,
    id               TEXT NOT NULL,
    status           TEXT NOT NULL,
    params           TEXT,
    output           TEXT,
    error            TEXT,
    rollback         TEXT,
    trigger          TEXT NOT NULL,
    parent           TEXT,
    control          TEXT,
    ready_at         REAL,
    lease_owner      TEXT,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at REAL,
    event_seq        INTEGER NOT NULL DEFAULT 0,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    started_at       REAL,
    ended_at         REAL,
    UNIQUE (workflow, id)
);
CREATE INDEX instances_ready ON instances (ready_at) WHERE ready_at IS NOT NULL;
CREATE INDEX instances_status ON instances (workflow, status);
CREATE INDEX instances_ended ON instances (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE steps (
    instance_pk INTEGER NOT NULL,
    name        TEXT NOT NULL,
    count       INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    status      TEXT NOT NULL,
    output      TEXT,
    error       TEXT,
    attempts    TEXT,
    wake_at     REAL,
    started_at  REAL,
    ended_at    REAL,
    info        TEXT,
    PRIMARY KEY (instance_pk, name, count)
) WITHOUT ROWID;

CREATE TABLE events (
    pk          INTEGER PRIMARY KEY,
    instance_pk INTEGER NOT NULL,
    type        TEXT NOT NULL,
    payload     TEXT,
    created_at  REAL NOT NULL,
    consumed_by TEXT
);
CREATE INDEX events_pending ON events (instance_pk, pk) WHERE consumed_by IS NULL;
