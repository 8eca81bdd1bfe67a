//! A reply cut into Discord messages: split at natural boundaries under the 2000-character
//! limit, bounded in count with a note, and given a stable nonce per piece so a repeat posts once.

/// Discord's limit on one message.
pub const MAX_MESSAGE: usize = 2000;

/// Splits text into pieces of at most `max` characters, preferring line
/// breaks, then sentence ends, then spaces.
pub fn split(text: &str, max: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut rest = text.trim();
    while rest.chars().count() > max {
        let cut_byte = rest.char_indices().nth(max).map_or(rest.len(), |(i, _)| i);
        let window = &rest[..cut_byte];
        let at = window
            .rfind('\n')
            .or_else(|| window.rfind(". ").map(|i| i + 1))
            .or_else(|| window.rfind(['!', '?']).map(|i| i + 1))
            .or_else(|| window.rfind(' '))
            .filter(|&i| i > 0)
            .unwrap_or(cut_byte);
        pieces.push(rest[..at].trim_end().to_owned());
        rest = rest[at..].trim_start();
    }
    if !rest.is_empty() {
        pieces.push(rest.to_owned());
    }
    pieces
}

/// What closes a reply cut at its piece bound.
const CUT_NOTE: &str = "\n(I cut this short: it ran longer than I may post at once.)";

/// Keeps at most `max` pieces; a reply cut there ends with [`CUT_NOTE`], its last kept piece
/// shortened to leave room for it. Returns the pieces and how many were left out.
pub fn bound_pieces(mut pieces: Vec<String>, max: usize) -> (Vec<String>, usize) {
    let max = max.max(1);
    if pieces.len() <= max {
        return (pieces, 0);
    }
    let cut = pieces.len() - max;
    pieces.truncate(max);
    if let Some(last) = pieces.last_mut() {
        let room = MAX_MESSAGE - CUT_NOTE.chars().count();
        if last.chars().count() > room {
            *last = last.chars().take(room).collect::<String>().trim_end().to_owned();
        }
        last.push_str(CUT_NOTE);
    }
    (pieces, cut)
}

/// Discord's nonce for one piece of an outbound message: a stable number from its idempotency key.
pub fn nonce(key: &str, piece: usize) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(piece.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Discord nonces are at most 25 characters.
    (h >> 1).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_splits_at_natural_boundaries_under_the_limit() {
        let sentence = "This is one sentence about the bracket. ";
        let text = sentence.repeat(120);
        let pieces = split(&text, MAX_MESSAGE);
        assert!(pieces.len() >= 3);
        assert!(pieces.iter().all(|p| p.chars().count() <= MAX_MESSAGE));
        assert!(pieces.iter().all(|p| p.ends_with('.')), "{:?}", pieces.iter().map(|p| &p[p.len() - 5..]).collect::<Vec<_>>());
        assert_eq!(pieces.join(" ").split_whitespace().count(), text.split_whitespace().count());
    }

    #[test]
    fn text_without_boundaries_still_splits() {
        let pieces = split(&"x".repeat(4500), MAX_MESSAGE);
        assert_eq!(pieces.iter().map(|p| p.chars().count()).collect::<Vec<_>>(), [2000, 2000, 500]);
        assert_eq!(split("short", MAX_MESSAGE), ["short"]);
        let multibyte = "é".repeat(2001);
        assert!(split(&multibyte, MAX_MESSAGE).iter().all(|p| p.chars().count() <= MAX_MESSAGE));
    }

    #[test]
    fn reply_pieces_past_the_bound_are_cut_with_a_note_inside_the_limit() {
        let pieces = split(&"word ".repeat(2_000 * 3), MAX_MESSAGE);
        let whole = pieces.len();
        let (kept, cut) = bound_pieces(pieces.clone(), 3);
        assert_eq!((kept.len(), cut), (3, whole - 3));
        assert!(kept[2].ends_with(CUT_NOTE));
        assert!(kept.iter().all(|p| p.chars().count() <= MAX_MESSAGE), "{:?}", kept.iter().map(|p| p.chars().count()).collect::<Vec<_>>());
        assert_eq!(kept[..2], pieces[..2]);
        assert_eq!(bound_pieces(pieces.clone(), whole), (pieces, 0));
    }

    #[test]
    fn nonces_are_stable_distinct_and_short() {
        assert_eq!(nonce("reply:1", 0), nonce("reply:1", 0));
        assert_ne!(nonce("reply:1", 0), nonce("reply:1", 1));
        assert_ne!(nonce("reply:1", 0), nonce("reply:2", 0));
        assert!(nonce("reply:1", 0).len() <= 25);
    }
}
