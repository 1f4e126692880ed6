-- Retention per workflow and outcome (docs/reliability.md, "Retention"): a workflow's policy and
-- an instance's own, JSON {"complete": seconds, "errored": ..., "terminated": ...}.
ALTER TABLE workflows ADD COLUMN retention text;
ALTER TABLE instances ADD COLUMN retention text;
-- When the instance is to be deleted: set as it ends, from the outcome's retention (its own,
-- else its workflow's); NULL while unfinished or kept.
ALTER TABLE instances ADD COLUMN delete_at double precision;
CREATE INDEX instances_delete_at ON instances (delete_at) WHERE delete_at IS NOT NULL;
-- A trigger, so that every way an instance ends (a finish, a terminate, a bulk action) or
-- starts again (a restart clears ended_at) sets its deadline, with no write path to forget it.
-- search_path FROM CURRENT: the function finds this schema's workflows table whoever calls it.
CREATE FUNCTION instances_delete_at() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    NEW.delete_at := NEW.ended_at + COALESCE(
        (NEW.retention::json ->> NEW.status)::float8,
        (SELECT (w.retention::json ->> NEW.status)::float8 FROM workflows w
         WHERE w.name = NEW.workflow));
    RETURN NEW;
END
$$;
CREATE TRIGGER instances_delete_at BEFORE UPDATE OF ended_at ON instances
FOR EACH ROW WHEN (NEW.ended_at IS DISTINCT FROM OLD.ended_at)
EXECUTE FUNCTION instances_delete_at();
