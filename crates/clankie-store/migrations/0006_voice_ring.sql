-- A voice room's conversation (the durable context of its persona): one row per line heard or
-- said, written only by the replica holding the room's lease, so a new owner goes on with it.
CREATE TABLE voice_ring (
    room TEXT NOT NULL,
    seq BIGSERIAL,
    delivery_id TEXT NOT NULL,
    source INTEGER NOT NULL,
    author_id TEXT NOT NULL,
    author_name TEXT NOT NULL,
    is_him BOOLEAN NOT NULL,
    text TEXT NOT NULL,
    cut_off BOOLEAN NOT NULL DEFAULT false,
    at_ms BIGINT NOT NULL,
    PRIMARY KEY (room, seq)
);
