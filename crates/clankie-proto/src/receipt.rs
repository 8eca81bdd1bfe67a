//! Building receipts that cannot carry content.
//!
//! Keys and codes are `&'static str`, so only words written in our source can
//! name them. An id value must look like an id: id characters only, at most
//! 128 of them. Anything else is replaced by a digest (`#` and 16 hex digits),
//! so a sentence handed over as an id reaches the trail as neither its words
//! nor its letters run together, and equal values still join.

use crate::{ReceiptKind, v1};

const MAX_ID: usize = 128;

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '_' | '~' | '-' | '/')
}

/// The value itself when it is id-shaped, otherwise its digest.
///
/// `#` is not an id character, so a digest is never mistaken for an id.
pub fn id_value(value: &str) -> String {
    if value.len() <= MAX_ID && value.chars().all(is_id_char) {
        return value.to_owned();
    }
    // FNV-1a: stable across builds and releases, unlike the std hasher.
    let digest = value.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("#{digest:016x}")
}

impl v1::Receipt {
    /// A receipt of `kind` written by `service` about `delivery_id` (empty when there is none).
    pub fn new(kind: &ReceiptKind, service: &str, delivery_id: &str, at_ms: i64) -> v1::Receipt {
        v1::Receipt {
            kind: kind.as_str().to_owned(),
            delivery_id: id_value(delivery_id),
            service: id_value(service),
            at_ms,
            ..Default::default()
        }
    }

    /// Names the lane the receipt concerns.
    pub fn with_lane(mut self, lane: &crate::LaneKey) -> v1::Receipt {
        self.lane = lane.to_string();
        self
    }

    /// Adds an id; the value is reduced to id characters.
    pub fn with_id(mut self, key: &'static str, value: impl std::fmt::Display) -> v1::Receipt {
        self.ids.insert(key.to_owned(), id_value(&value.to_string()));
        self
    }

    /// Adds a count.
    pub fn with_count(mut self, key: &'static str, value: i64) -> v1::Receipt {
        self.counts.insert(key.to_owned(), value);
        self
    }

    /// Adds what a run's model calls spent, under the count names the bill reads
    /// (`clankie_store::Store::usage`): `input_tokens`, `output_tokens`, and of the input
    /// `cached_input_tokens` (read from the prompt cache) and `cache_write_input_tokens`
    /// (written to it).
    pub fn with_tokens(self, input: u64, output: u64, cached: u64, cache_write: u64) -> v1::Receipt {
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.with_count("input_tokens", count(input))
            .with_count("output_tokens", count(output))
            .with_count("cached_input_tokens", count(cached))
            .with_count("cache_write_input_tokens", count(cache_write))
    }

    /// Adds a flag.
    pub fn with_flag(mut self, key: &'static str, value: bool) -> v1::Receipt {
        self.flags.insert(key.to_owned(), value);
        self
    }

    /// Adds a machine code.
    pub fn with_code(mut self, code: &'static str) -> v1::Receipt {
        self.codes.push(code.to_owned());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_carry_sentences() {
        let kind = ReceiptKind::new("bus.rejected").unwrap();
        let r = v1::Receipt::new(&kind, "gateway", "123 hello there", 0).with_id("msg_id", "say something in vc clankie");
        let trail = format!("{r:?}").to_ascii_lowercase();
        for word in ["hello", "there", "something", "clankie"] {
            assert!(!trail.contains(word), "{word} reached the receipt: {trail}");
        }
        assert!(r.delivery_id.starts_with('#') && r.delivery_id.len() == 17, "{}", r.delivery_id);
        assert!(r.ids["msg_id"].starts_with('#'));
        // Equal values give equal digests, so a trail still joins on them.
        assert_eq!(id_value("123 hello there"), r.delivery_id);
        assert_ne!(id_value("123 hello there"), id_value("123 hello therf"));
        // Ids pass through untouched; an overlong run of id characters is not an id.
        for id in ["1234567890123", "media-inbound", "sha256:ab12", "room:1/2", "captain-a"] {
            assert_eq!(id_value(id), id);
        }
        assert!(id_value(&"9".repeat(500)).starts_with('#'));
        assert_eq!(id_value(&"9".repeat(128)), "9".repeat(128));
    }
}
