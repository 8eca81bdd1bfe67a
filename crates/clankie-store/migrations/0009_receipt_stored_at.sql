-- When each receipt reached the store, so the lag from an event to its evidence can be read
-- (the ingest bench's admission latency is publish to this). Rows from before stay NULL:
-- a volatile default given in the ADD COLUMN itself would rewrite the whole table.
ALTER TABLE receipts ADD COLUMN stored_at TIMESTAMPTZ;
ALTER TABLE receipts ALTER COLUMN stored_at SET DEFAULT clock_timestamp();
