-- Flow control (docs/architecture.md, "Flow control"): an instance's key, priority and dedup key;
-- each workflow's registered limits (JSON of WorkflowLimits.to_json(), NULL for none) and the
-- named limits that several workflows share.
ALTER TABLE instances ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN key text;
ALTER TABLE instances ADD COLUMN dedup_key text;

-- The claim's order (priority, then ready_at, then pk) replaces the ready_at index: every state
-- change writes an entry in each index on ready_at, so one of them is all it can afford.
DROP INDEX instances_ready;
CREATE INDEX instances_ready ON instances (priority, ready_at, pk) WHERE ready_at IS NOT NULL;
-- No two unfinished instances of a workflow share a dedup key.
CREATE UNIQUE INDEX instances_dedup ON instances (workflow, dedup_key)
    WHERE dedup_key IS NOT NULL AND status NOT IN ('complete', 'errored', 'terminated');
-- A rate's starts of a workflow within its period; what runs (per workflow and key) is counted
-- through instances_status (workflow, status).
CREATE INDEX instances_started ON instances (workflow, started_at) WHERE started_at IS NOT NULL;

ALTER TABLE workflows ADD COLUMN limits text;

CREATE TABLE limits (
    name        text PRIMARY KEY,
    concurrency integer,
    rate_count  integer,
    rate_period double precision,
    updated_at  double precision NOT NULL
);
