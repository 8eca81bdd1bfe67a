-- The day bench (`clankie-bench day`) printed where each message's bytes go: receipts and their
-- indexes were half of them, and several indexes were written for every row but read by nothing
-- or by a rare sweep. What the trail reads stays indexed; the rest is made small or dropped.

-- A receipt's key is now its row id: the time in nanoseconds the receipts stream stored it,
-- which a redelivery repeats and a stream made again does not. Rows keyed before keep their
-- text key, indexed only where one is set.
ALTER TABLE receipts DROP CONSTRAINT receipts_dedup_key_key;
CREATE UNIQUE INDEX receipts_dedup_key ON receipts (dedup_key) WHERE dedup_key IS NOT NULL;

-- Only the lane view (its last run per lane) and the bill (runs that are no turn) ask by kind.
DROP INDEX receipts_kind;
CREATE INDEX receipts_run_lane ON receipts (lane, at) WHERE kind = 'captain.run';
CREATE INDEX receipts_billed ON receipts (at) WHERE kind IN ('voice.response', 'captain.handoff', 'console.chat');

-- The trail asks for one delivery's receipts by equality only: a hash index keeps a four-byte
-- code a row where the ordered one kept the id and the time, in half-split pages.
DROP INDEX receipts_delivery;
CREATE INDEX receipts_delivery ON receipts USING hash (delivery_id) WHERE delivery_id <> '';

-- Ages that only the sweeps and the bill ask for a range of: rows are written in time order,
-- so a block range index finds them at a few bytes per thousand rows.
DROP INDEX receipts_at;
CREATE INDEX receipts_at ON receipts USING brin (at);
DROP INDEX outbox_created;
CREATE INDEX outbox_created ON outbox USING brin (created_at);
DROP INDEX deliveries_recorded;
CREATE INDEX deliveries_recorded ON deliveries USING brin (recorded_at);
DROP INDEX admissions_admitted;
CREATE INDEX admissions_admitted ON admissions USING brin (admitted_at);
DROP INDEX turns_started;
CREATE INDEX turns_started ON turns USING brin (started_at);
DROP INDEX session_entries_created;
CREATE INDEX session_entries_created ON session_entries USING brin (created_at);

-- Read by nothing: the flood guard and forget ask admissions_author_written, and a lane's
-- entries by kind are few enough to filter from session_entries_lane_epoch.
DROP INDEX admissions_author_recent;
DROP INDEX deliveries_lane;
DROP INDEX session_entries_lane;

-- Quoted lines are on few entries: index only those.
DROP INDEX session_entries_lines;
CREATE INDEX session_entries_lines ON session_entries USING GIN ((body->'lines')) WHERE body ? 'lines';
