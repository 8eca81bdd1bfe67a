//! Building receipts that cannot carry content.
//!
//! Keys and codes are `&'static str`, so only words written in our source can
//! name them; id values are reduced to id characters and capped, so a hostile
//! value cannot smuggle text into the trail.

use crate::{ReceiptKind, v1};

const MAX_ID: usize = 128;

/// Reduces a value to the characters ids are made of, capped at 128.
pub fn id_value(value: &str) -> String {
    value.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '_' | '~' | '-' | '/')).take(MAX_ID).collect()
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
        assert_eq!(r.delivery_id, "123hellothere");
        assert_eq!(r.ids["msg_id"], "saysomethinginvcclankie");
        assert_eq!(id_value(&"9".repeat(500)).len(), 128);
    }
}
