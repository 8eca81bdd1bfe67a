-- The retention sweep deletes the entries of an abandoned epoch with its open turn (reading
-- leaves them out only while that turn is stored), and one-shot turn trees by age.
CREATE INDEX session_entries_lane_epoch ON session_entries (lane, epoch);
CREATE INDEX session_entries_one_shot ON session_entries (created_at) WHERE tree LIKE 'turns/%';
