-- The due instances of a workflow that started before (resuming after a sleep or an event, or
-- run again after a lost lease), by workflow, priority and ``ready_at``: a claim reads a
-- workflow whose rate is used up through this index, as only first starts count against a rate,
-- so that the first starts waiting for the rate are not walked by every claim
-- (docs/flow-control.md, "How it works").
CREATE INDEX instances_workflow_started ON instances (workflow, priority, ready_at, pk)
    WHERE started_at IS NOT NULL AND ready_at IS NOT NULL;
