-- What the sweepers delete by age, and the hot paths that must stay fast as the tables age.
CREATE INDEX receipts_at ON receipts (at);
CREATE INDEX outbox_created ON outbox (created_at);
CREATE INDEX deliveries_recorded ON deliveries (recorded_at);
CREATE INDEX admissions_admitted ON admissions (admitted_at);
CREATE INDEX turns_started ON turns (started_at);
-- A lane opening asks for its open turns of older epochs: only open turns are indexed.
CREATE INDEX turns_open ON turns (lane) WHERE ended_at IS NULL;
CREATE INDEX session_entries_compactions ON session_entries (tree, seq) WHERE kind = 'compaction';
CREATE INDEX session_entries_created ON session_entries (created_at);
CREATE INDEX voice_ring_at ON voice_ring (at_ms);
