-- Whose words a proposed fact was drawn from (author ids): a forget of any of them takes the
-- fact with it, and a forget of anyone else (the person whose turn it was, say) leaves it.
-- Empty on facts recorded before this was kept (those go by `proposed_for`) and on the owner's own.
ALTER TABLE self_memory ADD COLUMN drawn_from BIGINT[] NOT NULL DEFAULT '{}';
