-- Lanes whose audience is their own (a private thread): nothing lived there, nor that he is
-- there, reaches another lane's self-context. Marked when a message from one is admitted.
CREATE TABLE private_lanes (
    lane      TEXT PRIMARY KEY,
    marked_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
