-- Numeric and boolean tags in a table of their own, which a filter's number test reads. In
-- instance_tags their values shared one column with the NULLs of every text tag, so that the
-- planner's histogram of it (and its estimate of a range such as n >= 500000) was diluted by
-- the text tags; here every row holds a value. instance_tags keeps every tag (a text test, a
-- tag's presence); the trigger now fills both tables.
CREATE TABLE instance_tag_numbers (
    instance_pk bigint NOT NULL,
    key         text NOT NULL,
    kind        text NOT NULL,
    num_value   double precision NOT NULL,
    PRIMARY KEY (instance_pk, key)
);
INSERT INTO instance_tag_numbers (instance_pk, key, kind, num_value)
SELECT instance_pk, key, kind, num_value FROM instance_tags WHERE kind <> 's';
CREATE INDEX instance_tag_numbers_value ON instance_tag_numbers (key, kind, num_value, instance_pk);
DROP INDEX instance_tags_num;

CREATE OR REPLACE FUNCTION instance_tags_sync() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM instance_tags WHERE instance_pk = OLD.pk;
        DELETE FROM instance_tag_numbers WHERE instance_pk = OLD.pk;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.tags IS NOT NULL THEN
        -- One read of the JSON for both tables: the create path pays for each tag once.
        WITH t AS (
            SELECT j.key,
                CASE jsonb_typeof(j.value) WHEN 'string' THEN 's' WHEN 'boolean' THEN 'b'
                    ELSE 'n' END AS kind,
                CASE WHEN jsonb_typeof(j.value) = 'string' THEN j.value #>> '{}' END AS text_value,
                CASE jsonb_typeof(j.value)
                    WHEN 'number' THEN (j.value #>> '{}')::double precision
                    WHEN 'boolean' THEN CASE WHEN j.value = 'true'::jsonb THEN 1.0 ELSE 0.0 END
                END AS num_value
            FROM jsonb_each(NEW.tags::jsonb) AS j
        ), texts AS (
            INSERT INTO instance_tags (instance_pk, key, kind, text_value, num_value)
            SELECT NEW.pk, key, kind, text_value, num_value FROM t
        )
        INSERT INTO instance_tag_numbers (instance_pk, key, kind, num_value)
        SELECT NEW.pk, key, kind, num_value FROM t WHERE kind <> 's';
    END IF;
    RETURN NULL;
END
$$;
