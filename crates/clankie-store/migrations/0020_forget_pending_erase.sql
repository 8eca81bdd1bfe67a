-- What a forget still has to erase from the streams, kept until the erase succeeds: the turns
-- only they started whose answers were withdrawn (his replies on the egress stream carry them)
-- and the names they went by (experiences on the self stream). A forget run again after the bus
-- failed finds these in the store, since the entries it would learn them from are withdrawn.
ALTER TABLE forgotten_users
    ADD COLUMN erase_answered TEXT[] NOT NULL DEFAULT '{}',
    ADD COLUMN erase_names    TEXT[] NOT NULL DEFAULT '{}';
