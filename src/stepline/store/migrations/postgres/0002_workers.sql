-- Worker liveness: one row per running worker, rewritten by its heartbeat every few seconds,
-- deleted when it shuts down gracefully or, once it has stopped beating, by another worker's.
-- workflows: a JSON array of names (text, as every payload here).
CREATE TABLE workers (
    id          text PRIMARY KEY,
    host        text NOT NULL,
    pid         bigint NOT NULL,
    started_at  double precision NOT NULL,
    last_seen   double precision NOT NULL,
    heartbeat   double precision NOT NULL,
    workflows   text NOT NULL,
    concurrency integer NOT NULL,
    running     integer NOT NULL
);
