-- The shared self: what every thread of him has in common. Conversation never
-- lives here; it stays in each lane's session tree.

-- Who he is. One row; `version` counts edits so a reader can tell a change.
CREATE TABLE self_persona (
    id              SMALLINT PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    name            TEXT NOT NULL DEFAULT '',
    aliases         TEXT[] NOT NULL DEFAULT '{}',
    character_sheet TEXT NOT NULL DEFAULT '',
    speaking_style  TEXT NOT NULL DEFAULT '',
    version         BIGINT NOT NULL DEFAULT 0,
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO self_persona (id) VALUES (1);

-- What the owner decided: people, grants, where he is admitted, and how far
-- experiences may travel ('guild' is the loosest; 'none' keeps every thread to itself).
CREATE TABLE self_settings (
    id          SMALLINT PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    owner_id    BIGINT,
    operators   BIGINT[] NOT NULL DEFAULT '{}',
    grants      BIGINT[] NOT NULL DEFAULT '{}',
    guilds      BIGINT[] NOT NULL DEFAULT '{}',
    channels    BIGINT[] NOT NULL DEFAULT '{}',
    trusted_dms BIGINT[] NOT NULL DEFAULT '{}',
    sharing     TEXT NOT NULL DEFAULT 'guild' CHECK (sharing IN ('guild', 'none')),
    version     BIGINT NOT NULL DEFAULT 0,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO self_settings (id) VALUES (1);

-- Memory: a fact enters prompts only once a person approved it.
CREATE TABLE self_memory (
    id          BIGSERIAL PRIMARY KEY,
    fact        TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('proposed', 'approved', 'rejected')),
    proposed_in TEXT NOT NULL,
    proposed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    decided_at  TIMESTAMPTZ
);
CREATE INDEX self_memory_status ON self_memory (status, id);

-- Bounded first-person events one thread lived, for the others to know of.
CREATE TABLE self_experiences (
    experience_id TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    thread        TEXT NOT NULL,
    guild_id      BIGINT,
    summary       TEXT NOT NULL,
    participants  TEXT[] NOT NULL DEFAULT '{}',
    delivery_id   TEXT NOT NULL DEFAULT '',
    at            TIMESTAMPTZ NOT NULL,
    expires_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX self_experiences_guild ON self_experiences (guild_id, at);
CREATE INDEX self_experiences_expiry ON self_experiences (expires_at);
