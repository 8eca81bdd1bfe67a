-- Edits, deletions and forgetting. A message its author deleted before he read it ends
-- `withdrawn`; rewriting a lane's stored entries finds them by lane; a forgotten person's
-- id (never their words) is kept so their old messages stay out of later history blocks.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_outcome_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_outcome_check
    CHECK (outcome IN ('replied', 'absorbed', 'silent', 'failed', 'withdrawn'));
CREATE INDEX session_entries_lane ON session_entries (lane, kind);
CREATE TABLE forgotten_users (
    author_id    BIGINT PRIMARY KEY,
    forgotten_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
