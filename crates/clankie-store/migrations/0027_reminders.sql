-- Reminders people asked for. The schedule itself lives in the CLANKIE_SCHEDULES stream, where
-- nats-server fires it; this row is what the captain counts, lists, cancels and forgets by.
CREATE TABLE reminders (
    reminder_id   BIGINT PRIMARY KEY,
    lane          TEXT NOT NULL,
    guild_id      BIGINT,
    channel_id    BIGINT NOT NULL,
    asker_id      BIGINT NOT NULL,
    text          TEXT NOT NULL,
    -- A one-off's due time (ms since the epoch); 0 for a repeating check-in.
    due_at_ms     BIGINT NOT NULL,
    cron          TEXT NOT NULL DEFAULT '',
    time_zone     TEXT NOT NULL DEFAULT '',
    direct        BOOLEAN NOT NULL DEFAULT false,
    created_at_ms BIGINT NOT NULL,
    delivery_id   TEXT NOT NULL DEFAULT '',
    fired         INTEGER NOT NULL DEFAULT 0,
    fired_at_ms   BIGINT,
    -- Set when it will not fire again: `fired` (a one-off), `cancelled`.
    ended         TEXT,
    ended_at      TIMESTAMPTZ
);
CREATE INDEX reminders_pending_by_asker ON reminders (asker_id) WHERE ended IS NULL;
CREATE INDEX reminders_pending_by_lane ON reminders (lane) WHERE ended IS NULL;
CREATE INDEX reminders_ended_at ON reminders (ended_at) WHERE ended IS NOT NULL;

-- A person's time zone, which their reminders are read in (an IANA name).
CREATE TABLE time_zones (
    user_id BIGINT PRIMARY KEY,
    zone    TEXT NOT NULL,
    set_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
