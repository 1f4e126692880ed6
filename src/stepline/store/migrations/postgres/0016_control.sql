-- Deadlines, children's parent-close policy (docs/operations.md, "Deadlines", "Children and
-- their parent"). deadline_at: past it the instance errors with WorkflowTimeoutError; the
-- index holds only unfinished instances with one, which is what the deadline sweep reads.
ALTER TABLE instances ADD COLUMN deadline_at double precision;
ALTER TABLE instances ADD COLUMN parent_pk bigint;
ALTER TABLE instances ADD COLUMN on_parent_close text;
CREATE INDEX instances_deadline ON instances (deadline_at)
    WHERE deadline_at IS NOT NULL AND status NOT IN ('complete', 'errored', 'terminated');
CREATE INDEX instances_parent_pk ON instances (parent_pk)
    WHERE parent_pk IS NOT NULL AND status NOT IN ('complete', 'errored', 'terminated');
-- Debounce and replace_queued find a key's instances that have not started yet; a debounced
-- one says so ('debounce'), for later creates in its burst to join it.
ALTER TABLE instances ADD COLUMN conflict text;
CREATE INDEX instances_key_unstarted ON instances (workflow, key)
    WHERE key IS NOT NULL AND status = 'queued' AND started_at IS NULL;
