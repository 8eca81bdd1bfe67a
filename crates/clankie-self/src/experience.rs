//! Experiences: what a thread tells the shared self it lived.
//!
//! Each is built here from ids and display names only: a short first-person
//! summary with its thread, time and participants. No builder takes message
//! text, so no transcript line can become an experience.

use clankie_bus::{Bus, BusError, MsgId};
use clankie_proto::{LaneKey, Place, Subject, v1};

/// The longest summary kept; longer ones are cut.
pub const SUMMARY_MAX_CHARS: usize = 200;
/// Names listed in one experience at most.
const PARTICIPANTS_MAX: usize = 5;

/// What kind of thing happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    VoiceJoined,
    VoiceLeft,
    Talked,
    AskedToAct,
}

impl Kind {
    /// The code carried in the event and the store.
    pub fn code(self) -> &'static str {
        match self {
            Kind::VoiceJoined => "voice_joined",
            Kind::VoiceLeft => "voice_left",
            Kind::Talked => "talked",
            Kind::AskedToAct => "asked_to_act",
        }
    }
}

/// A display name made safe to quote: no markup, bounded.
pub(crate) fn name(raw: &str) -> String {
    let clean: String = raw.chars().filter(|c| !matches!(c, '<' | '>' | '\n' | '\r' | '`')).take(40).collect();
    if clean.trim().is_empty() { NOBODY.to_owned() } else { clean.trim().to_owned() }
}

/// The participant a name with nothing quotable left stands as: nobody's in particular.
pub(crate) const NOBODY: &str = "someone";

/// Someone an experience involves: their id (what a forget goes by) and the display name the
/// summary quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Participant<'a> {
    pub id: u64,
    pub name: &'a str,
}

/// The names to quote (distinct, at most [`PARTICIPANTS_MAX`]) and every distinct id.
fn who(participants: &[Participant<'_>]) -> (Vec<String>, Vec<u64>) {
    let (mut names, mut ids): (Vec<String>, Vec<u64>) = (Vec::new(), Vec::new());
    for p in participants {
        if !ids.contains(&p.id) {
            ids.push(p.id);
        }
        let n = name(p.name);
        if !names.contains(&n) && names.len() < PARTICIPANTS_MAX {
            names.push(n);
        }
    }
    (names, ids)
}

fn place(thread: &LaneKey) -> String {
    match thread {
        LaneKey::Room { channel, .. } => format!("the text channel {channel}"),
        LaneKey::Voice { channel, .. } => format!("the voice channel {channel}"),
        LaneKey::Dm { .. } => "a DM".to_owned(),
        LaneKey::Console { .. } => "the operator console".to_owned(),
    }
}

fn build(
    kind: Kind,
    thread: &LaneKey,
    summary: String,
    (participants, participant_ids): (Vec<String>, Vec<u64>),
    delivery_id: &str,
    at_ms: i64,
) -> v1::Experience {
    let key = if delivery_id.is_empty() { at_ms.to_string() } else { delivery_id.to_owned() };
    v1::Experience {
        experience_id: format!("{}:{thread}:{key}", kind.code()),
        kind: kind.code().to_owned(),
        thread: thread.to_string(),
        guild_id: thread.guild(),
        summary: summary.chars().take(SUMMARY_MAX_CHARS).collect(),
        participants,
        at_ms,
        delivery_id: delivery_id.to_owned(),
        participant_ids,
    }
}

/// He joined a voice room.
pub fn voice_joined(guild: u64, channel: u64, at_ms: i64) -> v1::Experience {
    let thread = LaneKey::Voice { guild, channel };
    build(Kind::VoiceJoined, &thread, format!("I joined {}.", place(&thread)), Default::default(), "", at_ms)
}

/// He left a voice room.
pub fn voice_left(guild: u64, channel: u64, at_ms: i64) -> v1::Experience {
    let thread = LaneKey::Voice { guild, channel };
    build(Kind::VoiceLeft, &thread, format!("I left {}.", place(&thread)), Default::default(), "", at_ms)
}

/// He talked with people in a thread (a reply posted, or words said aloud).
pub fn talked(thread: &LaneKey, participants: &[Participant<'_>], delivery_id: &str, at_ms: i64) -> v1::Experience {
    let (names, ids) = who(participants);
    let with = if names.is_empty() { String::new() } else { format!(" with {}", names.join(", ")) };
    build(Kind::Talked, thread, format!("I was talking in {}{with}.", place(thread)), (names, ids), delivery_id, at_ms)
}

/// Someone in a thread asked him to do something, and he took it on.
pub fn asked_to_act(thread: &LaneKey, asker: Participant<'_>, delivery_id: &str, at_ms: i64) -> v1::Experience {
    let who = name(asker.name);
    let summary = format!("{who} asked me in {} to do something for them, and I took it on.", place(thread));
    build(Kind::AskedToAct, thread, summary, (vec![who], vec![asker.id]), delivery_id, at_ms)
}

/// Publishes an experience on its thread's subject, once per experience id.
pub async fn publish(bus: &Bus, experience: &v1::Experience) -> Result<(), BusError> {
    let place = experience.guild_id.map_or(Place::Dm, Place::Guild);
    let id = MsgId::new(format!("experience:{}", experience.experience_id));
    bus.publish(&Subject::SelfExperience { place }, experience, Some(&id)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_carry_names_not_words_and_stay_bounded() {
        let thread = LaneKey::Voice { guild: 1, channel: 2 };
        let long = "x".repeat(300);
        let p = |id, name| Participant { id, name };
        let e = talked(&thread, &[p(1, "ada"), p(2, "<b>ob"), p(1, "ada"), p(3, &long), p(4, "ada")], "d1", 5);
        assert_eq!(e.summary, format!("I was talking in the voice channel 2 with ada, bob, {}.", "x".repeat(40)));
        assert_eq!(e.participants.len(), 3);
        assert_eq!(e.participant_ids, [1, 2, 3, 4], "a namesake is still someone else");
        assert_eq!(e.guild_id, Some(1));
        assert_eq!(e.thread, "voice:1:2");
        assert_eq!(e.experience_id, "talked:voice:1:2:d1");
        let dm = talked(&LaneKey::Dm { channel: 9 }, &[p(1, "ada")], "d2", 5);
        assert_eq!(dm.guild_id, None);
        assert_eq!(dm.summary, "I was talking in a DM with ada.");
        let asked = asked_to_act(&thread, p(6, ""), "d3", 1);
        assert!(asked.summary.starts_with("someone asked me"));
        assert_eq!(asked.participant_ids, [6]);
        let many: Vec<Participant<'_>> = (0..20).map(|i| p(i, &long[..40])).collect();
        assert!(talked(&thread, &many, "d", 0).summary.chars().count() <= SUMMARY_MAX_CHARS);
    }
}
