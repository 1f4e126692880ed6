-- Each workflow's timers in claim order: a claim some of whose workflows a limit holds back
-- whole reads the others' due instances a workflow at a time, a few index seeks however large
-- the held workflow's backlog (the ready index orders every workflow's instances together, so
-- that read walked it).
CREATE INDEX instances_workflow_ready ON instances (workflow, priority, ready_at, pk)
    WHERE ready_at IS NOT NULL;
