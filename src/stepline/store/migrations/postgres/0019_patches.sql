-- Patch routing (docs/versioning.md, "Patches in a rolling deploy"): the ids of the patches an
-- instance took (its `patch:<id>` markers), a sorted JSON array, NULL for none. A worker claims
-- an instance only if its code has every one of them. Filled here from the markers recorded.
ALTER TABLE instances ADD COLUMN patches text;
UPDATE instances i SET patches = (
    SELECT json_agg(substr(name, 7) ORDER BY substr(name, 7))::text FROM steps
    WHERE instance_pk = i.pk AND kind = 'patch'
)
WHERE EXISTS (SELECT 1 FROM steps WHERE instance_pk = i.pk AND kind = 'patch');
-- The ids each worker's code has, by workflow name then version (JSON object), for the
-- liveness warning of an instance whose patches no live worker has.
ALTER TABLE workers ADD COLUMN patches text;
