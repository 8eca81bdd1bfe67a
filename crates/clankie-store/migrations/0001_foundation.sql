-- Lanes: one row per room conversation. The lease decides which replica owns
-- the lane's live run; every lane-state write checks `epoch` under a share lock.
CREATE TABLE lanes (
    lane                TEXT PRIMARY KEY,
    epoch               BIGINT NOT NULL DEFAULT 0,
    lease_owner         TEXT,
    lease_expires_at    TIMESTAMPTZ,
    captured_actor_id   TEXT,
    captured_message_id TEXT,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The append-only session tree. `tree` is rooms/<lane> for durable text and
-- voice, turns/<lane>~<target> for a privileged one-shot turn.
CREATE TABLE session_entries (
    seq        BIGSERIAL PRIMARY KEY,
    tree       TEXT NOT NULL,
    lane       TEXT NOT NULL REFERENCES lanes (lane),
    id         TEXT NOT NULL,
    parent_id  TEXT,
    kind       TEXT NOT NULL,
    body       JSONB NOT NULL,
    in_context BOOLEAN NOT NULL DEFAULT TRUE,
    epoch      BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tree, id)
);
CREATE INDEX session_entries_tree ON session_entries (tree, seq);

CREATE TABLE turns (
    turn_id           TEXT PRIMARY KEY,
    lane              TEXT NOT NULL REFERENCES lanes (lane),
    epoch             BIGINT NOT NULL,
    mode              TEXT NOT NULL CHECK (mode IN ('durable', 'one_shot')),
    owner_delivery_id TEXT NOT NULL,
    started_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    ended_at          TIMESTAMPTZ,
    outcome           TEXT CHECK (outcome IN ('replied', 'silent', 'failed')),
    failure_code      TEXT,
    model_calls       INTEGER NOT NULL DEFAULT 0,
    input_tokens      BIGINT NOT NULL DEFAULT 0,
    output_tokens     BIGINT NOT NULL DEFAULT 0,
    steer_count       INTEGER NOT NULL DEFAULT 0,
    typing_lit        BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX turns_lane ON turns (lane, started_at);

-- Exactly one outcome per delivery: the primary key is the guarantee.
CREATE TABLE deliveries (
    delivery_id  TEXT PRIMARY KEY,
    lane         TEXT NOT NULL REFERENCES lanes (lane),
    turn_id      TEXT,
    outcome      TEXT NOT NULL CHECK (outcome IN ('replied', 'absorbed', 'silent', 'failed')),
    failure_code TEXT,
    recorded_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((outcome = 'failed') = (failure_code IS NOT NULL))
);
CREATE INDEX deliveries_lane ON deliveries (lane, recorded_at);

-- When the room last heard him settle a turn (replied or absorbed). Silence
-- does not touch it, so a room he declines ages out.
CREATE TABLE exchanges (
    lane             TEXT PRIMARY KEY REFERENCES lanes (lane),
    last_settled_at  TIMESTAMPTZ NOT NULL,
    last_delivery_id TEXT NOT NULL
);

-- Content-free evidence. No column can hold message text.
CREATE TABLE receipts (
    id          BIGSERIAL PRIMARY KEY,
    dedup_key   TEXT UNIQUE,
    kind        TEXT NOT NULL,
    delivery_id TEXT NOT NULL DEFAULT '',
    service     TEXT NOT NULL,
    lane        TEXT NOT NULL DEFAULT '',
    at          TIMESTAMPTZ NOT NULL,
    ids         JSONB NOT NULL DEFAULT '{}',
    counts      JSONB NOT NULL DEFAULT '{}',
    flags       JSONB NOT NULL DEFAULT '{}',
    codes       TEXT[] NOT NULL DEFAULT '{}'
);
CREATE INDEX receipts_delivery ON receipts (delivery_id, at) WHERE delivery_id <> '';
CREATE INDEX receipts_kind ON receipts (kind, at);
