-- A forget finds the experiences a person took part in by their id, not by a display name a
-- stranger may share. Rows from before carry no ids and are still found by name.
ALTER TABLE self_experiences ADD COLUMN participant_ids BIGINT[] NOT NULL DEFAULT '{}';
CREATE INDEX self_experiences_participant_ids ON self_experiences USING GIN (participant_ids);
