-- Input tokens a turn wrote to the provider's prompt cache (Anthropic's
-- cache_creation_input_tokens, billed above the input price); 0 where the provider caches on
-- its own. Part of input_tokens, as cached_input_tokens is.
ALTER TABLE turns ADD COLUMN cache_write_input_tokens bigint NOT NULL DEFAULT 0;
