-- Who started a bulk job (the API token's name, or what the caller says), shown beside its
-- progress; NULL when nobody was named.
ALTER TABLE bulk_jobs ADD COLUMN started_by text;
