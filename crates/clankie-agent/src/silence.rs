//! The silence gate: decides, as text streams in, the moment a reply can no
//! longer become `[[stay-silent]]`.

/// The exact answer with which the model declines to speak.
pub const SILENT_TOKEN: &str = "[[stay-silent]]";

/// What the gate has concluded about one model call's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Everything so far could still be the token (or is the token, with whitespace).
    Undecided,
    /// The text is words; it can no longer be the token.
    Words,
}

/// Holds text back while it could still be the silence token.
#[derive(Debug, Default, Clone)]
pub struct SilenceGate {
    seen: String,
    words: bool,
}

impl SilenceGate {
    /// A gate for a new model call.
    pub fn new() -> SilenceGate {
        SilenceGate::default()
    }

    /// Feeds streamed text. Returns `true` exactly once: on the delta that
    /// makes the reply words.
    pub fn push(&mut self, delta: &str) -> bool {
        if self.words {
            return false;
        }
        self.seen.push_str(delta);
        if could_be_silent(&self.seen) {
            false
        } else {
            self.words = true;
            true
        }
    }

    /// The gate's current conclusion.
    pub fn state(&self) -> Gate {
        if self.words { Gate::Words } else { Gate::Undecided }
    }
}

/// Whether `text` is a prefix of, or exactly, the token with whitespace around it.
fn could_be_silent(text: &str) -> bool {
    let t = text.trim_start();
    if SILENT_TOKEN.starts_with(t) {
        return true;
    }
    t.strip_prefix(SILENT_TOKEN).is_some_and(|rest| rest.trim().is_empty())
}

/// Whether a finished reply is a decline: exactly the token, whitespace around it allowed.
pub fn is_silent(reply: &str) -> bool {
    reply.trim() == SILENT_TOKEN
}

/// Removes whole tokens from text that is going out as words, so no copy of
/// the token ever reaches a room.
pub fn strip_token(reply: &str) -> String {
    let mut text = reply.to_owned();
    // Removing one copy can join the halves of another ("[[stay-[[stay-silent]]silent]]"): repeat until none is left.
    while text.contains(SILENT_TOKEN) {
        text = text.replace(SILENT_TOKEN, "");
    }
    text.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(pieces: &[&str]) -> (SilenceGate, usize) {
        let mut gate = SilenceGate::new();
        let flips = pieces.iter().filter(|p| gate.push(p)).count();
        (gate, flips)
    }

    #[test]
    fn the_token_in_small_pieces_never_becomes_words() {
        let (gate, flips) = feed(&["  ", "[", "[st", "ay", "-sil", "ent", "]", "]", "\n "]);
        assert_eq!((gate.state(), flips), (Gate::Undecided, 0));
        for size in 1..=4 {
            let chars: Vec<char> = SILENT_TOKEN.chars().collect();
            let pieces: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            assert_eq!(feed(&refs).1, 0, "size {size}");
        }
    }

    #[test]
    fn a_near_miss_becomes_words_on_the_diverging_piece() {
        let mut gate = SilenceGate::new();
        assert!(!gate.push("[[stay"));
        assert!(gate.push(" with me"));
        assert!(!gate.push(", friend"), "the flip is reported once");
        assert_eq!(gate.state(), Gate::Words);
    }

    #[test]
    fn ordinary_text_is_words_at_once_and_the_token_with_more_is_words() {
        assert_eq!(feed(&["Hello"]).1, 1);
        assert_eq!(feed(&["[[stay-silent]]", " but hi"]).1, 1);
        assert_eq!(feed(&[""]).1, 0);
    }

    #[test]
    fn only_the_exact_token_is_a_decline() {
        assert!(is_silent(" [[stay-silent]]\n"));
        assert!(!is_silent("[[stay-silent]] ok"));
        assert!(!is_silent("[[stay"));
        assert_eq!(strip_token("ok [[stay-silent]]"), "ok");
    }

    #[test]
    fn a_token_nested_in_a_token_is_stripped_whole() {
        assert_eq!(strip_token("[[stay-[[stay-silent]]silent]] hi"), "hi");
    }
}
