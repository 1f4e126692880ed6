-- Cron schedules: one row per declared schedule, synced from code when a scheduler starts; the
-- scheduler claims each tick by a compare-and-set on last_tick. Times are REAL epoch seconds.
CREATE TABLE schedules (
    name           TEXT PRIMARY KEY,
    workflow       TEXT NOT NULL,
    cron           TEXT NOT NULL,
    timezone       TEXT NOT NULL,
    params         TEXT,
    catch_up       TEXT NOT NULL,
    catch_up_limit INTEGER NOT NULL,
    overlap        TEXT NOT NULL,
    paused         INTEGER NOT NULL DEFAULT 0,
    last_tick      REAL,
    last_instance  TEXT,
    buffered_tick  REAL,
    created_at     REAL NOT NULL,
    updated_at     REAL NOT NULL
) WITHOUT ROWID;

-- The schedule data of an instance a schedule created: JSON {"name", "cron", "tick"}.
ALTER TABLE instances ADD COLUMN schedule TEXT;
