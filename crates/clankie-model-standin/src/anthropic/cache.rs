//! Anthropic's prompt cache, as Anthropic keeps its rules: a prefix served only up to a block the
//! request marks with `cache_control`, matched byte for byte, never below the minimum cacheable
//! length, for its TTL on a clock a test moves ([`PromptCache::advance`]).
//!
//! The prompt is rendered tools → system → messages, one block at a time. At each breakpoint
//! the cache looks back up to [`LOOKBACK_BLOCKS`] block edges for a prefix it holds; the
//! furthest found is read, what lies between it and the last breakpoint is written (when that
//! prefix is long enough to cache), and the rest is plain input. More than four breakpoints,
//! or a one-hour breakpoint after a five-minute one, is refused with Anthropic's 400.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// How many block edges back from a breakpoint the cache looks for a prefix it holds.
pub const LOOKBACK_BLOCKS: usize = 20;

/// The shortest prefix cached unless set: Sonnet-class models' 1,024 tokens.
pub const DEFAULT_MIN_CACHE_TOKENS: u64 = 1024;

/// The most breakpoints one request may carry.
const MAX_BREAKPOINTS: usize = 4;

/// The stand-in's prompt cache and its clock.
#[derive(Clone)]
pub struct PromptCache {
    inner: Arc<Mutex<Cache>>,
}

struct Cache {
    /// Prefix digest → when it expires on the stand-in's clock.
    entries: HashMap<u64, Duration>,
    min_tokens: u64,
    /// How far a test has moved the clock past real time.
    advanced: Duration,
    started: std::time::Instant,
}

impl Default for PromptCache {
    fn default() -> Self {
        PromptCache {
            inner: Arc::new(Mutex::new(Cache {
                entries: HashMap::new(),
                min_tokens: DEFAULT_MIN_CACHE_TOKENS,
                advanced: Duration::ZERO,
                started: std::time::Instant::now(),
            })),
        }
    }
}

impl PromptCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the cache's clock forward: entries past their TTL are gone.
    pub fn advance(&self, by: Duration) {
        let mut cache = self.lock();
        cache.advanced = cache.advanced.saturating_add(by);
    }

    /// Sets the shortest prefix, in tokens, that is cached.
    pub fn set_min_tokens(&self, tokens: u64) {
        self.lock().min_tokens = tokens;
    }
}

impl Cache {
    fn now(&self) -> Duration {
        self.started.elapsed().saturating_add(self.advanced)
    }
}

/// What one request did to the cache, in tokens, as Anthropic reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheUse {
    /// Input after the last breakpoint, or not cacheable.
    pub input_tokens: u64,
    /// Input written to the cache: the prefix up to the last breakpoint not read from it.
    pub cache_creation_input_tokens: u64,
    /// Input read from the cache: the furthest prefix it held within reach of a breakpoint.
    pub cache_read_input_tokens: u64,
}

/// One block of the rendered prompt.
struct Block {
    digest_part: String,
    tokens: u64,
    ttl: Option<Duration>,
}

/// The prompt as Anthropic renders it for caching, tools → system → messages; a block's
/// `cache_control` marks a breakpoint and is not part of what is matched.
fn blocks(body: &Value) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut push = |section: &str, block: &Value| -> Result<(), String> {
        let ttl = match block.get("cache_control") {
            None => None,
            Some(c) => match c["ttl"].as_str() {
                None | Some("5m") => Some(Duration::from_secs(300)),
                Some("1h") => Some(Duration::from_secs(3600)),
                Some(other) => return Err(format!("cache_control.ttl: Input should be '5m' or '1h', not '{other}'")),
            },
        };
        if block["type"] == "text" && block["text"].as_str().is_none_or(|t| t.trim().is_empty()) {
            return Err(format!("{section}: text content blocks must be non-empty"));
        }
        let mut bare = block.clone();
        if let Some(o) = bare.as_object_mut() {
            o.remove("cache_control");
        }
        let text = bare.to_string();
        let tokens = (text.chars().count() as u64).div_ceil(4).max(1);
        out.push(Block { digest_part: format!("{section}\u{1f}{text}"), tokens, ttl });
        Ok(())
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        push("tool", tool)?;
    }
    match &body["system"] {
        Value::String(text) => push("system", &json!({ "type": "text", "text": text }))?,
        Value::Array(parts) => {
            for part in parts {
                push("system", part)?;
            }
        }
        _ => {}
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        match &message["content"] {
            Value::String(text) => push(role, &json!({ "type": "text", "text": text }))?,
            Value::Array(parts) => {
                for part in parts {
                    push(role, part)?;
                }
            }
            _ => return Err("messages: each message needs content".into()),
        }
    }
    Ok(out)
}

/// Applies one request to the cache: reads the furthest prefix it holds within reach of a
/// breakpoint, writes up to the last breakpoint, and says what was read, written and left.
pub fn use_cache(cache: &PromptCache, body: &Value) -> Result<CacheUse, String> {
    let (used, writes) = plan(cache, body)?;
    cache.commit(writes);
    Ok(used)
}

/// The prefixes a served request leaves in the cache, each with when it expires.
pub struct Writes(Vec<(u64, Duration)>);

impl PromptCache {
    /// Stores what a request served wrote and refreshed; a refused one leaves the cache as it was.
    pub fn commit(&self, writes: Writes) {
        self.lock().entries.extend(writes.0);
    }
}

/// What `body` would read and write, without touching the cache.
pub(crate) fn plan(cache: &PromptCache, body: &Value) -> Result<(CacheUse, Writes), String> {
    let blocks = blocks(body)?;
    let breakpoints: Vec<usize> = blocks.iter().enumerate().filter(|(_, b)| b.ttl.is_some()).map(|(i, _)| i).collect();
    if breakpoints.len() > MAX_BREAKPOINTS {
        return Err(format!("A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.", breakpoints.len()));
    }
    let ttls: Vec<Duration> = blocks.iter().filter_map(|b| b.ttl).collect();
    if ttls.windows(2).any(|w| w[1] > w[0]) {
        return Err("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block".into());
    }
    let mut digests = Vec::with_capacity(blocks.len());
    let mut tokens_to = Vec::with_capacity(blocks.len());
    let (mut hasher, mut tokens) = (std::collections::hash_map::DefaultHasher::new(), 0u64);
    for b in &blocks {
        b.digest_part.hash(&mut hasher);
        digests.push(hasher.finish());
        tokens += b.tokens;
        tokens_to.push(tokens);
    }
    let total = tokens;
    let mut cache = cache.lock();
    let now = cache.now();
    let mut writes = Vec::new();
    cache.entries.retain(|_, expires| *expires > now);
    let read_at = breakpoints
        .iter()
        .flat_map(|&b| (b.saturating_sub(LOOKBACK_BLOCKS - 1)..=b).rev().find(|&k| cache.entries.contains_key(&digests[k])))
        .max();
    let read = read_at.map_or(0, |k| tokens_to[k]);
    let mut written = 0;
    if let Some(&last) = breakpoints.last()
        && tokens_to[last] >= cache.min_tokens
    {
        written = tokens_to[last].saturating_sub(read);
        let min = cache.min_tokens;
        for &b in breakpoints.iter().filter(|&&b| tokens_to[b] >= min) {
            let ttl = blocks[b].ttl.unwrap_or(Duration::from_secs(300));
            writes.push((digests[b], now.saturating_add(ttl)));
        }
    }
    if let Some(k) = read_at {
        // A read refreshes the prefix it read.
        let ttl = breakpoints.iter().find(|&&b| b >= k).and_then(|&b| blocks[b].ttl).unwrap_or(Duration::from_secs(300));
        writes.push((digests[k], now.saturating_add(ttl)));
    }
    let used = CacheUse { input_tokens: total - read - written, cache_creation_input_tokens: written, cache_read_input_tokens: read };
    Ok((used, Writes(writes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request of a long system prompt (about 1,500 tokens) and `turns`, the last marked.
    fn request(system: &str, turns: &[&str]) -> Value {
        let mut messages: Vec<Value> = turns
            .iter()
            .enumerate()
            .map(|(i, t)| json!({ "role": if i % 2 == 0 { "user" } else { "assistant" }, "content": [{ "type": "text", "text": t }] }))
            .collect();
        if let Some(last) = messages.last_mut() {
            last["content"][0]["cache_control"] = json!({ "type": "ephemeral" });
        }
        json!({
            "model": "claude-standin", "max_tokens": 1024,
            "system": [{ "type": "text", "text": system, "cache_control": { "type": "ephemeral" } }],
            "messages": messages,
        })
    }

    fn persona() -> String {
        "He is Clankie, a friendly robot who remembers the room. ".repeat(100)
    }

    #[test]
    fn anthropic_the_stand_ins_cache_serves_a_prefix_only_when_it_matches_byte_for_byte_up_to_a_breakpoint() {
        let cache = PromptCache::default();
        let first = use_cache(&cache, &request(&persona(), &["hello there"])).unwrap();
        assert_eq!((first.cache_read_input_tokens, first.input_tokens), (0, 0), "{first:?}");
        assert!(first.cache_creation_input_tokens > 1024, "{first:?}");
        // The same conversation, grown: everything before the new turns is read.
        let second = use_cache(&cache, &request(&persona(), &["hello there", "hi!", "how are you?"])).unwrap();
        assert_eq!(second.cache_read_input_tokens, first.cache_creation_input_tokens, "{second:?}");
        assert!(second.cache_creation_input_tokens > 0 && second.cache_creation_input_tokens < 20, "{second:?}");
        // One byte changed before the system breakpoint: nothing is read.
        let mut changed = persona();
        changed.replace_range(10..11, "X");
        let third = use_cache(&cache, &request(&changed, &["hello there", "hi!", "how are you?"])).unwrap();
        assert_eq!(third.cache_read_input_tokens, 0, "{third:?}");
        // One byte changed in a message after the system breakpoint: the system prompt is still read.
        let fourth = use_cache(&cache, &request(&persona(), &["hello therE", "hi!", "how are you?"])).unwrap();
        let system_tokens = use_cache(&PromptCache::default(), &request(&persona(), &[])).unwrap().cache_creation_input_tokens;
        assert!(system_tokens > 1024);
        assert_eq!(fourth.cache_read_input_tokens, system_tokens, "{fourth:?}");
        assert!(fourth.cache_read_input_tokens < second.cache_read_input_tokens, "{fourth:?}");
    }

    #[test]
    fn anthropic_the_stand_ins_cache_writes_again_after_the_ttl_and_caches_nothing_under_the_minimum() {
        let cache = PromptCache::default();
        let body = request(&persona(), &["hello"]);
        let written = use_cache(&cache, &body).unwrap().cache_creation_input_tokens;
        cache.advance(Duration::from_secs(299));
        assert_eq!(use_cache(&cache, &body).unwrap().cache_read_input_tokens, written, "read within the TTL");
        // The read refreshed it: 299 s later it is still there; 301 s after that it is gone.
        cache.advance(Duration::from_secs(299));
        assert_eq!(use_cache(&cache, &body).unwrap().cache_read_input_tokens, written);
        cache.advance(Duration::from_secs(301));
        let again = use_cache(&cache, &body).unwrap();
        assert_eq!((again.cache_read_input_tokens, again.cache_creation_input_tokens), (0, written), "past the TTL it is a write again");
        let short = request("A short persona.", &["hello"]);
        let used = use_cache(&cache, &short).unwrap();
        assert_eq!((used.cache_read_input_tokens, used.cache_creation_input_tokens), (0, 0), "{used:?}");
        assert_eq!(use_cache(&cache, &short).unwrap().cache_read_input_tokens, 0, "a prefix under 1,024 tokens is never cached");
    }

    #[test]
    fn anthropic_the_stand_in_refuses_five_breakpoints_and_a_long_ttl_after_a_short_one() {
        let cache = PromptCache::default();
        let mut body = request(&persona(), &["a", "b", "c", "d"]);
        for m in body["messages"].as_array_mut().unwrap() {
            m["content"][0]["cache_control"] = json!({ "type": "ephemeral" });
        }
        let refused = use_cache(&cache, &body).unwrap_err();
        assert_eq!(refused, "A maximum of 4 blocks with cache_control may be provided. Found 5.");
        let mut body = request(&persona(), &["a"]);
        body["messages"][0]["content"][0]["cache_control"] = json!({ "type": "ephemeral", "ttl": "1h" });
        assert!(use_cache(&cache, &body).unwrap_err().contains("must not come after"));
    }
}
