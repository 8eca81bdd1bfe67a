//! Cuts an answer into sentences as it streams, so his first sentence is spoken while the rest
//! is still being written.

/// Streamed text, handed out a sentence at a time.
#[derive(Debug, Default)]
pub struct Sentences {
    buf: String,
}

impl Sentences {
    /// Adds a piece of the stream; returns the sentences it completed. A sentence ends at `.`,
    /// `!` or `?` followed by white space, or at a line break. Nothing after an unclosed `[[` is
    /// handed out: it may be the start of the silence token, which is never spoken.
    pub fn push(&mut self, piece: &str) -> Vec<String> {
        self.buf.push_str(piece);
        let mut out = Vec::new();
        loop {
            let held = self.buf.rfind("[[").filter(|open| !self.buf[*open..].contains("]]")).unwrap_or(self.buf.len());
            let chars: Vec<(usize, char)> = self.buf[..held].char_indices().collect();
            let end = chars.windows(2).find_map(|w| {
                let ((i, c), (_, next)) = (w[0], w[1]);
                ((matches!(c, '.' | '!' | '?') && next.is_whitespace()) || c == '\n').then_some(i + c.len_utf8())
            });
            let Some(end) = end else { break };
            let sentence = self.buf[..end].trim().to_owned();
            self.buf.drain(..end);
            if !sentence.is_empty() {
                out.push(sentence);
            }
        }
        out
    }

    /// What is left when the stream ends.
    pub fn rest(self) -> String {
        self.buf.trim().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_come_out_as_they_complete() {
        let mut s = Sentences::default();
        assert!(s.push("Paris is the cap").is_empty());
        assert_eq!(s.push("ital. It is lovely! Is it"), vec!["Paris is the capital.", "It is lovely!"]);
        assert_eq!(s.push("? Yes"), vec!["Is it?"]);
        assert_eq!(s.rest(), "Yes");
    }

    #[test]
    fn the_silence_token_is_never_cut_into_a_sentence() {
        let mut s = Sentences::default();
        assert!(s.push("[[stay-sil").is_empty());
        assert!(s.push("ent]]").is_empty());
        assert_eq!(s.rest(), "[[stay-silent]]");
        let mut s = Sentences::default();
        assert!(s.push("Well. [[stay").iter().all(|x| x == "Well."));
    }
}
