-- Forgetting a person finds their words by author id, through an index, not by scanning
-- every entry's text: a user entry's authors are the ids its `<message>` and `<line>` tags
-- carry (a person's text cannot open a tag: `<` is escaped in it).
CREATE FUNCTION entry_authors(kind TEXT, body JSONB) RETURNS BIGINT[]
    LANGUAGE SQL IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN kind = 'user' THEN
        (SELECT coalesce(array_agg(DISTINCT m[1]::BIGINT), '{}')
           FROM regexp_matches(body->>'text', '<(?:message|line) from="[^"]*" author_id="([0-9]+)"', 'g') AS m)
    END
$$;
ALTER TABLE session_entries ADD COLUMN authors BIGINT[] GENERATED ALWAYS AS (entry_authors(kind, body)) STORED;
CREATE INDEX session_entries_authors ON session_entries USING GIN (authors);
-- One forget per person at a time, whichever replica is asked: a forget running since
-- `running_since` holds it; one older than the bound is taken to have died.
ALTER TABLE forgotten_users ADD COLUMN running_since TIMESTAMPTZ;
