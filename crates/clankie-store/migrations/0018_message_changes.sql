-- An edit or a deletion is stored before its change is acked: a copy of the message admitted
-- later (on another replica, or redelivered after a crash) is read as edited, or withdrawn.
-- A deletion drops the edited words it replaces.
CREATE TABLE message_changes (
    delivery_id TEXT PRIMARY KEY,
    lane        TEXT NOT NULL,
    author_id   BIGINT NOT NULL,
    deleted     BOOLEAN NOT NULL DEFAULT FALSE,
    -- The edit's ingress event (protobuf), NULL once deleted.
    edit        BYTEA,
    changed_ms  BIGINT NOT NULL,
    changed_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX message_changes_at ON message_changes (changed_at);
CREATE INDEX message_changes_author ON message_changes (author_id);
