//! The ring's line, and the ids that tie one of his lines to the sentences the body played:
//! shared by the runs that write the sentences and the rooms that keep what was heard of them.

use clankie_proto::v1;

/// One line of a voice room's conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingLine {
    pub delivery_id: String,
    pub source: v1::RoomInputSource,
    pub author_id: u64,
    pub author_name: String,
    /// His own line, marked by the system (a name can never make a line his).
    pub is_him: bool,
    pub text: String,
    pub at_ms: i64,
    /// His line, stopped by someone speaking over him: `text` is what he got to say.
    pub cut_off: bool,
}

impl From<clankie_store::RingRow> for RingLine {
    fn from(r: clankie_store::RingRow) -> RingLine {
        RingLine {
            delivery_id: r.delivery_id,
            source: v1::RoomInputSource::try_from(r.source).unwrap_or(v1::RoomInputSource::Unspecified),
            author_id: r.author_id,
            author_name: r.author_name,
            is_him: r.is_him,
            text: r.text,
            at_ms: r.at_ms,
            cut_off: r.cut_off,
        }
    }
}

/// The answer one model call (`round`) of the run answering `run` writes: what a barge-in cuts.
pub fn answer_id(run: &str, round: usize) -> String {
    format!("{run}~{round}")
}

/// The id of sentence `n` (counted over the whole run) of `answer`, as the body reports its playback.
pub fn sentence_id(answer: &str, n: usize) -> String {
    format!("{answer}/{n}")
}

/// The run and the sentence an id from [`sentence_id`] names: how a playback report finds the
/// run whose line it cuts.
pub(crate) fn sentence_of(id: &str) -> Option<(&str, usize)> {
    let (answer, n) = id.rsplit_once('/')?;
    let (run, _round) = answer.rsplit_once('~')?;
    Some((run, n.parse().ok()?))
}

/// What the room heard of a run whose sentence `n` was cut after `played` of it: the sentences
/// before it whole, that one's first words by the played fraction, none after it of the same
/// answer; what a later model call of the run said (after the interruption was heard) stays.
pub fn heard_of(sentences: &[(usize, String)], n: usize, played: f64) -> String {
    let cut_round = sentences.get(n).map_or(usize::MAX, |(round, _)| *round);
    let mut before: Vec<&str> = sentences.iter().take(n).flat_map(|(_, s)| s.split_whitespace()).collect();
    if let Some((_, cut)) = sentences.get(n) {
        let all: Vec<&str> = cut.split_whitespace().collect();
        let kept = ((all.len() as f64) * played.clamp(0.0, 1.0)).floor() as usize;
        before.extend(&all[..kept.min(all.len())]);
    }
    let after: Vec<&str> = sentences.iter().skip(n + 1).filter(|(round, _)| *round > cut_round).map(|(_, s)| s.as_str()).collect();
    let mut heard = format!("{}…", before.join(" "));
    if !after.is_empty() {
        heard.push(' ');
        heard.push_str(&after.join(" "));
    }
    heard
}

#[cfg(test)]
mod ring_tests {
    use super::*;

    fn run(sentences: &[(usize, &str)]) -> Vec<(usize, String)> {
        sentences.iter().map(|(r, s)| (*r, (*s).to_owned())).collect()
    }

    #[test]
    fn ring_fidelity_a_cut_keeps_what_played_and_what_a_later_answer_said() {
        let said = run(&[(0, "one two three."), (0, "four five six seven."), (0, "eight nine."), (1, "Sorry, go on.")]);
        assert_eq!(heard_of(&said, 1, 0.5), "one two three. four five… Sorry, go on.");
        assert_eq!(heard_of(&said, 0, 0.0), "… Sorry, go on.");
        assert_eq!(heard_of(&said[..3], 2, 1.0), "one two three. four five six seven. eight nine.…");
        assert_eq!(sentence_of(&sentence_id(&answer_id("utt:1:2:3:4", 0), 7)), Some(("utt:1:2:3:4", 7)));
        assert_eq!(sentence_of("no sentence"), None);
    }
}
