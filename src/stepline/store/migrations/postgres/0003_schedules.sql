-- Cron schedules: one row per declared schedule, synced from code when a scheduler starts; the
-- scheduler claims each tick by a compare-and-set on last_tick.
CREATE TABLE schedules (
    name           text PRIMARY KEY,
    workflow       text NOT NULL,
    cron           text NOT NULL,
    timezone       text NOT NULL,
    params         text,
    catch_up       text NOT NULL,
    catch_up_limit integer NOT NULL,
    overlap        text NOT NULL,
    paused         boolean NOT NULL DEFAULT false,
    last_tick      double precision,
    last_instance  text,
    buffered_tick  double precision,
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL
);

-- The schedule data of an instance a schedule created: JSON {"name", "cron", "tick"}.
ALTER TABLE instances ADD COLUMN schedule text;
