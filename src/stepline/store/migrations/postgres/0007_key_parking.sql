-- Queued instances held back by a busy key (``key_concurrency``) are set aside: ``ready_at``
-- is cleared (the first in line of each key alone gets a recheck time) and ``held_ready_at``
-- keeps their place in line, so claims stop walking a busy key's backlog. An instance of the
-- key that stops running brings back the first in line (docs/flow-control.md, "Keys").
ALTER TABLE instances ADD COLUMN held_ready_at double precision;
CREATE INDEX instances_key_parked ON instances (workflow, key, priority, held_ready_at, pk)
    WHERE held_ready_at IS NOT NULL;
