-- The relay claims the rows it publishes, so one captain publishes a row, not every captain;
-- a row that fails waits out a growing claim instead of being first in line again; and a row
-- the relay gives up on (too old to be worth posting, or never publishable) says why.
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE outbox ADD COLUMN claimed_until TIMESTAMPTZ;
ALTER TABLE outbox ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN gave_up_at TIMESTAMPTZ;
ALTER TABLE outbox ADD COLUMN gave_up_code TEXT;
DROP INDEX outbox_unsent;
CREATE INDEX outbox_unsent ON outbox (created_at) WHERE sent_at IS NULL AND gave_up_at IS NULL;
