-- Which voice-floor replica keeps each live voice room. The same lease-with-epoch shape as lanes,
-- in a table of its own: the voice lane (`voice:<guild>:<channel>`) is the captain's, for the
-- room's ask_clankie handoffs, and the room's keeper must not contend with it.
CREATE TABLE voice_rooms (
    room TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    owner TEXT,
    expires_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
