-- Each workflow's timers in order: whether one of some workflows is due, and their earliest
-- timer, are a few index seeks, however large another workflow's backlog held back by a limit
-- (the ready index orders every workflow's instances together, so those reads walked it).
CREATE INDEX instances_workflow_ready ON instances (workflow, ready_at) WHERE ready_at IS NOT NULL;
