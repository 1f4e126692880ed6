-- Named limits on a step (docs/flow-control.md, "Limits on a step"): the slots that step
-- attempts hold, the starts they made (for the limits' rates), and the limit an instance
-- parked on while it waits for a slot (so that a release wakes the one parked longest).
ALTER TABLE instances ADD COLUMN parked_on TEXT;
CREATE INDEX instances_parked ON instances (parked_on, ready_at) WHERE parked_on IS NOT NULL;

-- A slot is live while its instance holds the lease it was taken under (lease_token, and a
-- lease that has not expired); a dead one is deleted by the next acquisition of its limit.
CREATE TABLE limit_slots (
    limit_name  TEXT NOT NULL,
    instance_pk INTEGER NOT NULL,
    step        TEXT NOT NULL,
    lease_token INTEGER NOT NULL,
    acquired_at REAL NOT NULL,
    PRIMARY KEY (limit_name, instance_pk, step)
) WITHOUT ROWID;

-- One row per slot taken, pruned past the limit's rate period.
CREATE TABLE limit_starts (
    limit_name TEXT NOT NULL,
    at         REAL NOT NULL
);
CREATE INDEX limit_starts_at ON limit_starts (limit_name, at);
