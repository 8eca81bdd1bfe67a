//! The floor: for every room input, wake, continue, attention, offer or ignore.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use clankie_proto::v1;

/// The floor's rules; all of them configuration.
#[derive(Debug, Clone)]
pub struct FloorRules {
    /// His name and aliases; any of them as a word addresses him.
    pub names: Vec<String>,
    /// After he spoke with someone, how long their next line continues the exchange.
    pub continuation: Duration,
    /// At most one unprompted offer per this interval.
    pub offer_interval: Duration,
}

/// What the floor remembers of one room between inputs.
#[derive(Debug, Default)]
pub struct FloorState {
    /// When he last answered each speaker.
    pub last_exchange: HashMap<u64, Instant>,
    /// When he last made an unprompted offer.
    pub last_offer: Option<Instant>,
}

pub use clankie_self::names_him;

/// Decides one input. The reason is a short code, never words.
pub fn decide(input: &v1::RoomInput, state: &FloorState, rules: &FloorRules, now: Instant) -> (v1::FloorVerdict, &'static str) {
    let text = input.text.trim();
    if text.is_empty() {
        return (v1::FloorVerdict::Ignore, "empty");
    }
    if input.mentions_him {
        return (v1::FloorVerdict::Wake, "mentioned");
    }
    if names_him(text, &rules.names) {
        return (v1::FloorVerdict::Wake, "named");
    }
    if state.last_exchange.get(&input.author_id).is_some_and(|at| now.duration_since(*at) < rules.continuation) {
        return (v1::FloorVerdict::Continue, "continuation_window");
    }
    let offer_allowed = state.last_offer.is_none_or(|at| now.duration_since(at) >= rules.offer_interval);
    if text.ends_with('?') && offer_allowed {
        return (v1::FloorVerdict::Offer, "open_question");
    }
    (v1::FloorVerdict::Attention, "heard")
}

/// Whether a verdict owes (or permits) a response.
pub fn responds(verdict: v1::FloorVerdict) -> bool {
    matches!(verdict, v1::FloorVerdict::Wake | v1::FloorVerdict::Continue | v1::FloorVerdict::Offer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> FloorRules {
        FloorRules {
            names: vec!["Clankie".into(), "clanky".into()],
            continuation: Duration::from_secs(60),
            offer_interval: Duration::from_secs(300),
        }
    }

    fn line(author: u64, text: &str) -> v1::RoomInput {
        v1::RoomInput { author_id: author, text: text.into(), ..Default::default() }
    }

    #[test]
    fn naming_him_wakes_him() {
        let s = FloorState::default();
        let now = Instant::now();
        assert_eq!(decide(&line(1, "say something in vc clankie"), &s, &rules(), now), (v1::FloorVerdict::Wake, "named"));
        assert_eq!(decide(&line(1, "Clanky, you there"), &s, &rules(), now).0, v1::FloorVerdict::Wake);
        assert_eq!(
            decide(&line(1, "clankiest thing ever"), &s, &rules(), now).0,
            v1::FloorVerdict::Attention,
            "a name inside a word is not his name"
        );
    }

    #[test]
    fn a_recent_exchange_continues_and_then_lapses() {
        let mut s = FloorState::default();
        let now = Instant::now();
        s.last_exchange.insert(1, now);
        assert_eq!(decide(&line(1, "and then?"), &s, &rules(), now + Duration::from_secs(5)).0, v1::FloorVerdict::Continue);
        assert_eq!(decide(&line(2, "unrelated"), &s, &rules(), now).0, v1::FloorVerdict::Attention, "continuation is per speaker");
        assert_eq!(decide(&line(1, "much later"), &s, &rules(), now + Duration::from_secs(61)).0, v1::FloorVerdict::Attention);
    }

    #[test]
    fn offers_are_rate_bounded() {
        let mut s = FloorState::default();
        let now = Instant::now();
        assert_eq!(decide(&line(1, "anyone know when it starts?"), &s, &rules(), now).0, v1::FloorVerdict::Offer);
        s.last_offer = Some(now);
        assert_eq!(
            decide(&line(1, "anyone know when it starts?"), &s, &rules(), now + Duration::from_secs(10)).0,
            v1::FloorVerdict::Attention
        );
        assert_eq!(decide(&line(1, "  "), &s, &rules(), now).0, v1::FloorVerdict::Ignore);
    }
}
