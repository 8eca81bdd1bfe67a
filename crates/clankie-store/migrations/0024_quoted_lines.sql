-- A message quoted in another lane's context (a reply's chain, a link, a thread's starter) is
-- found by its id when it is edited or deleted, through the entries' `lines`, in every lane.
CREATE INDEX session_entries_lines ON session_entries USING GIN ((body->'lines'));
