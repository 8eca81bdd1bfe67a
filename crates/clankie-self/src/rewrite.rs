//! Changing words a lane already stored: a message edited or deleted after he read it, and a
//! person forgotten. The entries are rewritten in place under the lane's lease (the store
//! marks each tree it touched, so warm copies reopen), and the person's id is kept so their
//! old messages stay out of later history blocks.

use std::collections::BTreeSet;
use std::time::Duration;

use clankie_agent::EntryBody;
use clankie_proto::LaneKey;
use clankie_store::{HeldWords, Lease, Rewritten, Store, StoreError};

use crate::blocks::{self, LineEdit};

/// What becomes of a changed message wherever a lane holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Deleted: its entry is withdrawn, its history line dropped.
    Delete,
    /// Edited: its entry now holds `block` (the message rendered anew), its history line `text`.
    Edit { block: String, text: String },
}

/// What a stored entry becomes when message `message_id` changes; `None` when it does not hold it.
pub fn changed(entry: &HeldWords, message_id: u64, change: &Change) -> Option<Rewritten> {
    let body: EntryBody = serde_json::from_value(entry.body.clone()).ok()?;
    let EntryBody::User { author, delivery_id, text, images, lines } = body else { return None };
    let new = if delivery_id == message_id.to_string() {
        match change {
            Change::Delete => EntryBody::Withdrawn { delivery_id },
            Change::Edit { block, .. } => EntryBody::User { author, delivery_id, text: block.clone(), images, lines },
        }
    } else {
        let at = lines.iter().position(|l| *l == message_id)?;
        let edit = match change {
            Change::Delete => LineEdit::Drop,
            Change::Edit { text, .. } => LineEdit::Say(text.clone()),
        };
        let text = blocks::edit_lines(&text, |i, _| if i == at { edit.clone() } else { LineEdit::Keep });
        let lines = match change {
            Change::Delete => lines.into_iter().filter(|l| *l != message_id).collect(),
            Change::Edit { .. } => lines,
        };
        EntryBody::User { author, delivery_id, text, images, lines }
    };
    rewritten(entry, new)
}

/// What a stored entry becomes when `author_id` is forgotten: their own message withdrawn,
/// their lines dropped from a block of other messages; `None` when it holds nothing of theirs.
pub fn without_author(entry: &HeldWords, author_id: u64) -> Option<Rewritten> {
    let body: EntryBody = serde_json::from_value(entry.body.clone()).ok()?;
    let EntryBody::User { author, delivery_id, text, images, lines } = body else { return None };
    if blocks::message_author(&text) == Some(author_id) {
        return rewritten(entry, EntryBody::Withdrawn { delivery_id });
    }
    let mut dropped = Vec::new();
    let kept_text = blocks::edit_lines(&text, |i, by| {
        if by == Some(author_id) {
            dropped.push(i);
            LineEdit::Drop
        } else {
            LineEdit::Keep
        }
    });
    if dropped.is_empty() {
        return None;
    }
    let lines = lines.into_iter().enumerate().filter(|(i, _)| !dropped.contains(i)).map(|(_, l)| l).collect();
    rewritten(entry, EntryBody::User { author, delivery_id, text: kept_text, images, lines })
}

fn rewritten(entry: &HeldWords, body: EntryBody) -> Option<Rewritten> {
    let (kind, in_context) = match &body {
        EntryBody::Withdrawn { .. } => (clankie_agent::WITHDRAWN_KIND, false),
        _ => ("user", true),
    };
    Some(Rewritten { seq: entry.seq, tree: entry.tree.clone(), kind: kind.to_owned(), body: serde_json::to_value(&body).ok()?, in_context })
}

/// What forgetting a person removed, as counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// Lanes whose stored sessions held their words.
    pub lanes: u64,
    /// Their own messages withdrawn from sessions.
    pub messages: u64,
    /// Blocks of other messages (history, a voice room) their lines were dropped from.
    pub blocks: u64,
    /// His own entries (answers, tool calls, summaries) a quote of theirs was taken out of.
    pub quotes: u64,
    pub ring_lines: u64,
    pub memories: u64,
    pub experiences: u64,
    /// Lanes still held by a live run when the wait ran out: run the command again.
    pub lanes_busy: u64,
}

/// Why a person could not be forgotten.
#[derive(Debug, thiserror::Error)]
pub enum ForgetError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The lease a forget takes on each lane it rewrites.
const FORGET_LEASE_OWNER: &str = "forget-user";
const FORGET_LEASE_TTL: Duration = Duration::from_secs(30);

/// Forgets `author_id`: their words leave every lane's stored session, the voice ring,
/// memory that quotes them and experiences they took part in; receipts, outcomes and counts
/// stay (they hold no words). A lane a live run holds is waited for up to `wait`;
/// `progress` hears of each lane done.
pub async fn forget_user(store: &Store, author_id: u64, wait: Duration, mut progress: impl FnMut(&str)) -> Result<Forgotten, ForgetError> {
    let entries = store.entries_attributed_to(author_id).await?;
    let mut words = BTreeSet::new();
    let mut names = BTreeSet::new();
    for e in &entries {
        collect(e, author_id, &mut words, &mut names);
    }
    for (name, text) in store.ring_texts_of(author_id).await? {
        names.insert(name);
        words.extend(long_words(&text));
    }
    // Words of theirs nobody else in those entries used: what a quote of them looks like.
    for e in &entries {
        for word in others_words(e, author_id) {
            words.remove(&word);
        }
    }
    let quoted: Vec<String> = words.iter().cloned().collect();
    let mut forgotten = Forgotten::default();
    let mut by_lane: std::collections::BTreeMap<String, Vec<Rewritten>> = std::collections::BTreeMap::new();
    for e in &entries {
        if let Some(r) = without_author(e, author_id) {
            if r.kind == clankie_agent::WITHDRAWN_KIND {
                forgotten.messages += 1;
            } else {
                forgotten.blocks += 1;
            }
            by_lane.entry(e.lane.clone()).or_default().push(r);
        }
    }
    // His own entries that quote them (an answer, a tool call's arguments, a summary) lose the quoted words.
    let lanes: Vec<String> = by_lane.keys().cloned().collect();
    for lane in lanes {
        for e in store.his_entries_quoting(&lane, &quoted).await? {
            let mut body = e.body.clone();
            redact(&mut body, &words);
            forgotten.quotes += 1;
            by_lane.entry(lane.clone()).or_default().push(Rewritten {
                seq: e.seq,
                tree: e.tree,
                kind: e.kind,
                body,
                in_context: e.in_context,
            });
        }
    }
    for (lane, rewrites) in by_lane {
        let lane = lane.as_str();
        let Ok(key) = lane.parse::<LaneKey>() else { continue };
        match lease_within(store, &key, wait).await? {
            Some(lease) => {
                let result = store.rewrite_entries(&lease, &rewrites).await;
                let _ = store.release_lease(&lease).await;
                result?;
                forgotten.lanes += 1;
                progress(lane);
            }
            None => forgotten.lanes_busy += 1,
        }
    }
    let names: Vec<String> = names.into_iter().collect();
    let quotes = |fact: &str| {
        let id = author_id.to_string();
        fact.contains(&id) || long_words(fact).any(|w| words.contains(&w)) || names.iter().any(|n| mentions(fact, n))
    };
    let rows = store.forget_rows(author_id, &names, quotes).await?;
    forgotten.ring_lines = rows.ring_lines;
    forgotten.memories = rows.memories;
    forgotten.experiences = rows.experiences;
    Ok(forgotten)
}

async fn lease_within(store: &Store, lane: &LaneKey, wait: Duration) -> Result<Option<Lease>, StoreError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if let Some(lease) = store.acquire_lease(lane, FORGET_LEASE_OWNER, FORGET_LEASE_TTL).await? {
            return Ok(Some(lease));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The words and names of `author_id` an entry holds, for finding quotes of them elsewhere.
fn collect(entry: &HeldWords, author_id: u64, words: &mut BTreeSet<String>, names: &mut BTreeSet<String>) {
    let Ok(EntryBody::User { text, .. }) = serde_json::from_value::<EntryBody>(entry.body.clone()) else { return };
    for p in blocks::parse(&text).unwrap_or_default() {
        if p.attr("author_id").and_then(|a| a.parse::<u64>().ok()) == Some(author_id) {
            if let Some(name) = p.attr("from") {
                names.insert(name.to_owned());
            }
            words.extend(long_words(&p.content));
        }
    }
}

/// The long words other people's blocks in an entry hold.
fn others_words(entry: &HeldWords, author_id: u64) -> Vec<String> {
    let Ok(EntryBody::User { text, .. }) = serde_json::from_value::<EntryBody>(entry.body.clone()) else { return Vec::new() };
    blocks::parse(&text)
        .unwrap_or_default()
        .iter()
        .filter(|p| p.attr("author_id").and_then(|a| a.parse::<u64>().ok()).is_some_and(|a| a != author_id))
        .flat_map(|p| long_words(&p.content).collect::<Vec<_>>())
        .collect()
}

/// Takes `words` out of every string in `value`, whole words only, whatever their case.
fn redact(value: &mut serde_json::Value, words: &BTreeSet<String>) {
    match value {
        serde_json::Value::String(s) => {
            let mut out = String::with_capacity(s.len());
            let mut word = String::new();
            let flush = |word: &mut String, out: &mut String| {
                if words.contains(&word.to_lowercase()) {
                    out.push_str("[forgotten]");
                } else {
                    out.push_str(word);
                }
                word.clear();
            };
            for c in s.chars() {
                if c.is_alphanumeric() {
                    word.push(c);
                } else {
                    flush(&mut word, &mut out);
                    out.push(c);
                }
            }
            flush(&mut word, &mut out);
            *s = out;
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| redact(v, words)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| redact(v, words)),
        _ => {}
    }
}

/// A fact quotes a person when it shares a word of theirs this long: short words are everyone's.
const QUOTED_WORD_CHARS: usize = 6;

fn long_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.chars().count() >= QUOTED_WORD_CHARS).map(str::to_lowercase)
}

/// Whether `text` names `name` as a word of its own.
fn mentions(text: &str, name: &str) -> bool {
    let name = name.trim().to_lowercase();
    !name.is_empty() && text.to_lowercase().split(|c: char| !c.is_alphanumeric()).any(|w| w == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: EntryBody) -> HeldWords {
        let body = serde_json::to_value(body).unwrap();
        HeldWords { seq: 1, lane: "room:1:2".into(), tree: "rooms/room:1:2".into(), kind: "user".into(), body, in_context: true }
    }

    fn said(name: &str, id: u64, text: &str) -> blocks::Line<'static> {
        let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
        blocks::Line { said: blocks::Said { author_name: leak(name), author_id: id, text: leak(text) }, is_him: false, how: "" }
    }

    #[test]
    fn erase_withdraws_their_messages_and_drops_only_their_history_lines() {
        let own = entry(EntryBody::User {
            author: "ada".into(),
            delivery_id: "50".into(),
            text: blocks::message(&blocks::Said { author_name: "ada", author_id: 7, text: "zorblax" }, &[]),
            images: vec![],
            lines: vec![],
        });
        let r = without_author(&own, 7).unwrap();
        assert_eq!(r.kind, "withdrawn");
        assert!(!r.in_context);
        assert!(!r.body.to_string().contains("zorblax"));
        assert!(without_author(&own, 8).is_none());

        let h = blocks::history(&[said("ada", 7, "zorblax one"), said("bob", 8, "kept")], 0).unwrap();
        let history = entry(EntryBody::User {
            author: "channel history".into(),
            delivery_id: String::new(),
            text: h,
            images: vec![],
            lines: vec![10, 11],
        });
        let r = without_author(&history, 7).unwrap();
        let EntryBody::User { text, lines, .. } = serde_json::from_value(r.body).unwrap() else { panic!() };
        assert!(!text.contains("zorblax") && text.contains("kept"));
        assert_eq!(lines, [11]);
    }

    #[test]
    fn message_delete_and_edit_find_the_message_and_its_history_line() {
        let h = blocks::history(&[said("ada", 7, "old words"), said("bob", 8, "kept")], 0).unwrap();
        let history = entry(EntryBody::User {
            author: "channel history".into(),
            delivery_id: String::new(),
            text: h,
            images: vec![],
            lines: vec![10, 11],
        });
        let edit = Change::Edit { block: String::new(), text: "new words".into() };
        let EntryBody::User { text, lines, .. } = serde_json::from_value(changed(&history, 10, &edit).unwrap().body).unwrap() else {
            panic!()
        };
        assert!(text.contains("new words") && !text.contains("old words") && text.contains("kept"));
        assert_eq!(lines, [10, 11]);
        let EntryBody::User { text, lines, .. } = serde_json::from_value(changed(&history, 11, &Change::Delete).unwrap().body).unwrap()
        else {
            panic!()
        };
        assert!(!text.contains("kept") && text.contains("old words"));
        assert_eq!(lines, [10]);
        assert!(changed(&history, 12, &Change::Delete).is_none());
    }
}
