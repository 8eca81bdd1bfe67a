-- The flood guard counts an author's messages by when they were written, not by when a captain
-- got to them: a backlog admitted in a burst (a slow or restarted captain) is not a flood.
ALTER TABLE admissions ADD COLUMN written_at TIMESTAMPTZ;
CREATE INDEX admissions_author_written ON admissions (author_id, written_at) WHERE author_id IS NOT NULL;
