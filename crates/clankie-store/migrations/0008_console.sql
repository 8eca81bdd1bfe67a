-- Guild rooms the owner trusts: there (as in trusted DMs) a privileged request runs in the
-- room's durable system lane instead of a one-shot turn.
ALTER TABLE self_settings ADD COLUMN trusted_rooms BIGINT[] NOT NULL DEFAULT '{}';

-- Every version of the persona and the owner settings, written in the same statement as the
-- edit, so the console can show what the last change was.
CREATE TABLE self_versions (
    what       TEXT NOT NULL CHECK (what IN ('persona', 'settings')),
    version    BIGINT NOT NULL,
    body       JSONB NOT NULL,
    edited_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (what, version)
);
