-- What the self file last applied, field by field, so a field is written again only when the
-- file changes it: an edit made since (the console, `clankie self`) stands until then. Digests,
-- not values: the persona and memory live in their own tables.
CREATE TABLE self_file_applied (
    field      TEXT PRIMARY KEY,
    digest     TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
