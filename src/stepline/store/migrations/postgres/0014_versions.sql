-- Versions (docs/versioning.md): the version of its workflow's code an instance started under,
-- which only workers serving that version claim; and the versions each worker serves, by
-- workflow name (JSON object), for `stepline workflows versions` and the liveness warning.
ALTER TABLE instances ADD COLUMN version text NOT NULL DEFAULT '1';
ALTER TABLE workers ADD COLUMN versions text;
