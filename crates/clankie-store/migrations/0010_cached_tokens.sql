-- What the provider said of a turn's tokens beyond the totals: the input it served from its
-- prompt cache and the output it spent reasoning. Zero for turns from before, and for a
-- provider that does not say.
ALTER TABLE turns ADD COLUMN cached_input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE turns ADD COLUMN reasoning_tokens BIGINT NOT NULL DEFAULT 0;
