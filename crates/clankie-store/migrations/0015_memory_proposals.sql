-- A proposal remembers the message its turn answered: a retried run of that turn proposing the
-- same fact lands on the same row, and its owner's DM (outbox row `memory:<id>`) is queued once.
ALTER TABLE self_memory ADD COLUMN proposed_for TEXT;
CREATE UNIQUE INDEX self_memory_proposal ON self_memory (proposed_for, fact) WHERE proposed_for IS NOT NULL;
