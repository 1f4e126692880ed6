-- Tags and bulk actions (docs/operations.md). An instance's tags are the JSON object in
-- instances.tags; instance_tags holds one row per tag, kept equal to it by the triggers below,
-- so that a filter on a tag reads an index. kind: 's' text, 'n' number, 'b' boolean (0/1).
ALTER TABLE instances ADD COLUMN tags TEXT;

CREATE TABLE instance_tags (
    instance_pk INTEGER NOT NULL,
    key         TEXT NOT NULL,
    kind        TEXT NOT NULL,
    text_value  TEXT,
    num_value   REAL,
    PRIMARY KEY (instance_pk, key)
) WITHOUT ROWID;
CREATE INDEX instance_tags_text ON instance_tags (key, text_value, instance_pk);
CREATE INDEX instance_tags_num ON instance_tags (key, num_value, instance_pk);

CREATE TRIGGER instances_tags_insert AFTER INSERT ON instances WHEN new.tags IS NOT NULL
BEGIN
    INSERT INTO instance_tags (instance_pk, key, kind, text_value, num_value)
    SELECT new.pk, j.key,
        CASE j.type WHEN 'text' THEN 's' WHEN 'true' THEN 'b' WHEN 'false' THEN 'b' ELSE 'n' END,
        CASE WHEN j.type = 'text' THEN j.atom END,
        CASE j.type WHEN 'true' THEN 1.0 WHEN 'false' THEN 0.0 WHEN 'text' THEN NULL
            ELSE j.atom END
    FROM json_each(new.tags) AS j;
END;

CREATE TRIGGER instances_tags_update AFTER UPDATE OF tags ON instances
BEGIN
    DELETE FROM instance_tags WHERE instance_pk = new.pk;
    INSERT INTO instance_tags (instance_pk, key, kind, text_value, num_value)
    SELECT new.pk, j.key,
        CASE j.type WHEN 'text' THEN 's' WHEN 'true' THEN 'b' WHEN 'false' THEN 'b' ELSE 'n' END,
        CASE WHEN j.type = 'text' THEN j.atom END,
        CASE j.type WHEN 'true' THEN 1.0 WHEN 'false' THEN 0.0 WHEN 'text' THEN NULL
            ELSE j.atom END
    FROM json_each(new.tags) AS j WHERE new.tags IS NOT NULL;
END;

CREATE TRIGGER instances_tags_delete AFTER DELETE ON instances WHEN old.tags IS NOT NULL
BEGIN
    DELETE FROM instance_tags WHERE instance_pk = old.pk;
END;

-- What filters on built-in columns read: a status newest first, a creation time range.
CREATE INDEX instances_status_pk ON instances (status, pk);
CREATE INDEX instances_created ON instances (created_at);

-- Bulk actions: one row per job, run in batches by the workers. ``cursor`` is the last
-- instance pk acted on (each batch's actions and its advance commit together); ``max_pk``
-- the newest instance when the job started (later ones are not in it).
CREATE TABLE bulk_jobs (
    pk          INTEGER PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    action      TEXT NOT NULL,
    filter      TEXT NOT NULL,
    from_step   TEXT,
    status      TEXT NOT NULL,
    max_pk      INTEGER NOT NULL,
    cursor      INTEGER NOT NULL DEFAULT 0,
    total       INTEGER NOT NULL,
    done        INTEGER NOT NULL DEFAULT 0,
    skipped     INTEGER NOT NULL DEFAULT 0,
    last_skip   TEXT,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    ended_at    REAL
);
CREATE INDEX bulk_jobs_running ON bulk_jobs (pk) WHERE status = 'running';
