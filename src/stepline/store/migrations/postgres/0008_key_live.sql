-- The live instances of each key, not set aside: queued, running or pausing. Setting a busy
-- key's queue aside and finding a key left idle read one key's rows here, not every row of
-- the workflow in that status once per key (docs/flow-control.md, "How it works").
CREATE INDEX instances_key_live ON instances (workflow, key)
    WHERE key IS NOT NULL AND ready_at IS NOT NULL
        AND status IN ('queued', 'running', 'waitingForPause');
