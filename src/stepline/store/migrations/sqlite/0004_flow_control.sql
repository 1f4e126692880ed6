-- Flow control: an instance's priority, key and dedup key; a workflow's limits (JSON of
-- WorkflowLimits.to_json(), NULL when none); named limits that several workflows share.
ALTER TABLE instances ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN key TEXT;
ALTER TABLE instances ADD COLUMN dedup_key TEXT;
ALTER TABLE workflows ADD COLUMN limits TEXT;

CREATE TABLE limits (
    name        TEXT PRIMARY KEY,
    concurrency INTEGER,
    rate_count  INTEGER,
    rate_period REAL,
    updated_at  REAL NOT NULL
) WITHOUT ROWID;

-- The claim's order: priority, then ready_at (then pk, the rowid every index ends with). It
-- replaces the ready_at index: the timer reads walk it one priority at a time (a loose scan
-- over the few distinct priorities), so every write of ready_at still updates one index.
DROP INDEX instances_ready;
CREATE INDEX instances_ready ON instances (priority, ready_at) WHERE ready_at IS NOT NULL;

-- No two unfinished instances of a workflow share a dedup key; a finished one leaves it.
CREATE UNIQUE INDEX instances_dedup ON instances (workflow, dedup_key)
    WHERE dedup_key IS NOT NULL AND status NOT IN ('complete', 'errored', 'terminated');

-- Rate limits: the starts of a workflow since a time.
CREATE INDEX instances_started ON instances (workflow, started_at) WHERE started_at IS NOT NULL;
