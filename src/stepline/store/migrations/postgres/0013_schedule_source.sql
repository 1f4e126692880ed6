-- Schedules created at run time (engine.schedules().create, the CLI, the HTTP API) beside those
-- declared in code: 'code' rows are synced from code by schedulers, 'api' rows are kept until
-- deleted through the API.
ALTER TABLE schedules ADD COLUMN source text NOT NULL DEFAULT 'code';
