-- Who each admitted delivery came from, so the flood guard can count one
-- author's admissions across every lane in a sliding minute.
ALTER TABLE admissions ADD COLUMN author_id BIGINT;
CREATE INDEX admissions_author_recent ON admissions (author_id, admitted_at) WHERE author_id IS NOT NULL;
