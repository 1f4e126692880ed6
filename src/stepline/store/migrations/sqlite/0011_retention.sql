-- Retention per workflow and outcome (docs/reliability.md, "Retention"): a workflow's policy and
-- an instance's own, JSON {"complete": seconds, "errored": ..., "terminated": ...}.
ALTER TABLE workflows ADD COLUMN retention TEXT;
ALTER TABLE instances ADD COLUMN retention TEXT;
-- When the instance is to be deleted: set as it ends, from the outcome's retention (its own,
-- else its workflow's); NULL while unfinished or kept.
ALTER TABLE instances ADD COLUMN delete_at REAL;
CREATE INDEX instances_delete_at ON instances (delete_at) WHERE delete_at IS NOT NULL;
-- A trigger, so that every way an instance ends (a finish, a terminate, a bulk action) or
-- starts again (a restart clears ended_at) sets its deadline, with no write path to forget it.
CREATE TRIGGER instances_delete_at AFTER UPDATE OF ended_at ON instances
FOR EACH ROW WHEN NEW.ended_at IS NOT OLD.ended_at
BEGIN
    UPDATE instances SET delete_at = NEW.ended_at + COALESCE(
        json_extract(NEW.retention, '$.' || NEW.status),
        (SELECT json_extract(w.retention, '$.' || NEW.status) FROM workflows w
         WHERE w.name = NEW.workflow))
    WHERE pk = NEW.pk;
END;
