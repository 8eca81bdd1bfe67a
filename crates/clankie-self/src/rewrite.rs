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
/// The message's own entry is withdrawn, or its `<message>` block replaced with the context
/// after it kept; each line that quotes it (a history line, a context line, a thread's starter)
/// is dropped or says the new words, and a line that only points at it stays as it is.
pub fn changed(entry: &HeldWords, message_id: u64, change: &Change) -> Option<Rewritten> {
    let body: EntryBody = serde_json::from_value(entry.body.clone()).ok()?;
    let EntryBody::User { author, delivery_id, text, images, lines } = body else { return None };
    let new = if delivery_id == message_id.to_string() || is_correction_of(&delivery_id, message_id) {
        match change {
            Change::Delete => EntryBody::Withdrawn { delivery_id },
            Change::Edit { block, .. } => {
                // What follows the message's own block (its context) stays, with its `lines`.
                let rest = text.find("</message>").map_or("", |end| &text[end + "</message>".len()..]);
                EntryBody::User { author, delivery_id, text: format!("{block}{rest}"), images, lines }
            }
        }
    } else {
        let at: Vec<usize> = lines.iter().enumerate().filter(|(_, l)| **l == message_id).map(|(i, _)| i).collect();
        if at.is_empty() {
            return None;
        }
        let edit = match change {
            Change::Delete => LineEdit::Drop,
            Change::Edit { text, .. } => LineEdit::Say(text.clone()),
        };
        let pointers = blocks::pointer_lines(&text);
        let text = blocks::edit_lines(&text, |i, _| {
            if !at.contains(&i) || (pointers.contains(&i) && edit != LineEdit::Drop) { LineEdit::Keep } else { edit.clone() }
        });
        let lines = match change {
            Change::Delete => lines.into_iter().enumerate().filter(|(i, _)| !at.contains(i)).map(|(_, l)| l).collect(),
            Change::Edit { .. } => lines,
        };
        EntryBody::User { author, delivery_id, text, images, lines }
    };
    rewritten(entry, new)
}

/// Whether `delivery_id` is an edit of `message_id` (`edit:<id>:<ms>`): the correction a run
/// heard when the message was edited while the run held it.
pub fn is_correction_of(delivery_id: &str, message_id: u64) -> bool {
    delivery_id.strip_prefix("edit:").and_then(|rest| rest.split_once(':')).is_some_and(|(id, _)| id == message_id.to_string())
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
    let (kind, in_context) = (body.kind().to_owned(), body.in_context());
    Some(Rewritten { seq: entry.seq, tree: entry.tree.clone(), kind, body: serde_json::to_value(&body).ok()?, in_context })
}

/// His answer marked as having answered someone since forgotten; `None` when it is not an
/// answer or is marked already.
fn marked(entry: &HeldWords) -> Option<Rewritten> {
    match serde_json::from_value::<EntryBody>(entry.body.clone()).ok()? {
        EntryBody::Assistant { text, tool_calls, stop_reason, usage, provider_error, forgotten_asker: false } => {
            rewritten(entry, EntryBody::Assistant { text, tool_calls, stop_reason, usage, provider_error, forgotten_asker: true })
        }
        _ => None,
    }
}

/// What forgetting a person removed, as counts, and what the streams' erase must find.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// Lanes whose stored sessions held their words.
    pub lanes: u64,
    /// Their own messages withdrawn from sessions.
    pub messages: u64,
    /// Blocks of other messages (history, a voice room) their lines were dropped from.
    pub blocks: u64,
    /// His own entries (answers, tool calls and results) of turns that answered only them,
    /// withdrawn with their messages.
    pub answers: u64,
    /// His entries of turns that answered them and others too: kept, since they answered the
    /// others as well, his answers among them marked (`forgotten_asker`) so the model is told.
    pub answers_kept: u64,
    /// Compaction summaries that summarised their words, rewritten to [`SUMMARY_FORGOTTEN`].
    pub summaries: u64,
    /// The turns only they started whose answers were withdrawn, by the delivery id that
    /// began each, and the owner's DMs about facts drawn from them (`memory:<id>`): his
    /// replies to them, and those DMs, leave the egress stream too.
    pub answered: Vec<String>,
    /// The names they went by in the sessions: experiences recorded before ids were kept
    /// (none carry `participant_ids`) leave the self stream and the store by them.
    pub names: Vec<String>,
    pub ring_lines: u64,
    pub memories: u64,
    pub experiences: u64,
    /// His replies to turns only they started that were not yet posted: withdrawn unsent.
    pub unsent_replies: u64,
    /// Lanes still held by a live run when the wait ran out: run the command again.
    pub lanes_busy: u64,
}

impl Forgotten {
    /// What the streams' erase of `author_id`, forgotten at `forgotten_at_ms`, goes by, from
    /// what this forget found.
    pub fn erasure(&self, author_id: u64, forgotten_at_ms: i64) -> clankie_bus::Erasure<'_> {
        clankie_bus::Erasure { author_id, forgotten_at_ms, answered: &self.answered, names: &self.names }
    }
}

/// Erases `author_id` from the streams by what `forgotten` found, then lets the store drop what
/// it kept for that erase; after a failure it stays for the next forget of the same person.
pub async fn erase_from_streams(
    store: &Store,
    bus: &clankie_bus::Bus,
    author_id: u64,
    forgotten: &Forgotten,
) -> Result<clankie_bus::ErasedMessages, clankie_bus::BusError> {
    // When the store says: words written before it are the forget's, for every process.
    let at_ms = store.forgotten_at(author_id).await.ok().flatten().unwrap_or_else(clankie_bus::now_ms);
    let erased = bus.erase_author(forgotten.erasure(author_id, at_ms)).await?;
    if let Err(e) = store.erase_done(author_id).await {
        tracing::warn!(error = %e, "the streams' erase is done but the store still lists it as pending; the next forget erases again");
    }
    Ok(erased)
}

/// Why a person could not be forgotten.
#[derive(Debug, thiserror::Error)]
pub enum ForgetError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another forget of the same person is running (asked twice, or on another replica).
    #[error("a forget of this person is already running")]
    Running,
}

/// The lease a forget takes on each lane it rewrites.
const FORGET_LEASE_OWNER: &str = "forget-user";
const FORGET_LEASE_TTL: Duration = Duration::from_secs(30);
/// A forget marked running for longer than this is taken to have died with its process.
pub const FORGET_STALE_AFTER: Duration = Duration::from_secs(15 * 60);

/// The one forget of a person running now, begun with [`begin`]; [`ForgetRun::run`] carries it out.
#[derive(Debug)]
pub struct ForgetRun {
    author_id: u64,
}

/// Takes the single forget of `author_id`: `Err(Running)` while another one runs, whichever
/// replica or tool began it, so asking twenty times scans once.
pub async fn begin(store: &Store, author_id: u64) -> Result<ForgetRun, ForgetError> {
    if store.begin_forget(author_id, FORGET_STALE_AFTER).await? { Ok(ForgetRun { author_id }) } else { Err(ForgetError::Running) }
}

impl ForgetRun {
    /// Forgets the person and marks the forget over, however it ended.
    pub async fn run(self, store: &Store, wait: Duration, progress: impl FnMut(&str)) -> Result<Forgotten, ForgetError> {
        let result = forget_lanes(store, self.author_id, wait, progress).await;
        let ended = store.end_forget(self.author_id).await;
        let forgotten = result?;
        ended?;
        Ok(forgotten)
    }
}

/// Forgets `author_id` by provenance, never by the words they used: their messages and their
/// lines in other blocks leave every lane's stored session; his answers to turns whose input
/// was only theirs go with them (the whole turn, so no tool call is left without its result);
/// his answers to turns they shared with others stay, marked; their voice ring lines, the memory
/// proposed from their messages or lines, and experiences they took part in go. Every other
/// row stays as it was. Receipts, outcomes and counts stay (they hold no words).
///
/// Each lane is read and rewritten under its lease, so a live run is waited for (up to
/// `wait` a lane) and what it stored is forgotten too, and an edit or deletion made
/// meanwhile is not undone. `progress` hears of each lane done. `Err(Running)` while
/// another forget of the same person runs.
pub async fn forget_user(store: &Store, author_id: u64, wait: Duration, progress: impl FnMut(&str)) -> Result<Forgotten, ForgetError> {
    begin(store, author_id).await?.run(store, wait, progress).await
}

async fn forget_lanes(store: &Store, author_id: u64, wait: Duration, mut progress: impl FnMut(&str)) -> Result<Forgotten, ForgetError> {
    let mut names = BTreeSet::new();
    let mut deliveries = Vec::new();
    let mut forgotten = Forgotten::default();
    for lane in store.lanes_of_author(author_id).await? {
        let Ok(key) = lane.parse::<LaneKey>() else { continue };
        let Some(lease) = lease_within(store, &key, wait).await? else {
            forgotten.lanes_busy += 1;
            continue;
        };
        let result = forget_in_lane(store, &lease, author_id, &mut names, &mut deliveries, &mut forgotten).await;
        let _ = store.release_lease(&lease).await;
        if result? {
            forgotten.lanes += 1;
            progress(&lane);
        }
    }
    // With what an earlier forget found and the bus never erased: that forget withdrew the
    // entries this one would learn it from.
    let found: Vec<String> = names.into_iter().collect();
    let rows = store.forget_rows(author_id, &found, &deliveries, &forgotten.answered).await?;
    // The owner's DMs about the facts that went leave the egress stream as his replies do.
    forgotten.answered.extend(rows.memory_dms);
    (forgotten.answered, forgotten.names) = store.pending_erase(author_id, &forgotten.answered, &found).await?;
    forgotten.ring_lines = rows.ring_lines;
    forgotten.unsent_replies = rows.unsent_replies;
    forgotten.memories = rows.memories;
    forgotten.experiences = rows.experiences;
    Ok(forgotten)
}

/// Reads and rewrites one lane under `lease`; true when it held anything of theirs.
async fn forget_in_lane(
    store: &Store,
    lease: &Lease,
    author_id: u64,
    names: &mut BTreeSet<String>,
    deliveries: &mut Vec<String>,
    forgotten: &mut Forgotten,
) -> Result<bool, StoreError> {
    let entries = store.entries_attributed_to(&lease.lane.to_string(), author_id).await?;
    let mut rewrites = Vec::new();
    for e in &entries {
        collect_names(e, author_id, names);
        if let Ok(EntryBody::User { text, delivery_id, .. }) = serde_json::from_value::<EntryBody>(e.body.clone())
            && blocks::message_author(&text) == Some(author_id)
        {
            deliveries.push(delivery_id);
        }
        if let Some(r) = without_author(e, author_id) {
            if r.kind == clankie_agent::WITHDRAWN_KIND {
                forgotten.messages += 1;
            } else {
                forgotten.blocks += 1;
            }
            rewrites.push(r);
        }
    }
    // His entries, by whom each turn answered: a turn is the messages that start it and the
    // entries he wrote before the next message.
    let trees: BTreeSet<&str> = entries.iter().map(|e| e.tree.as_str()).collect();
    for tree in trees {
        let held = store.tree_entries(tree).await?;
        let (answers, kept, marks) = his_answers_to(&held, author_id, &mut forgotten.answered);
        forgotten.answers += answers.len() as u64;
        forgotten.answers_kept += kept;
        rewrites.extend(answers);
        rewrites.extend(marks);
        // A summary of what came before was written from their words too, once they were there.
        let first = entries.iter().filter(|e| e.tree == tree).map(|e| e.seq).min().unwrap_or(i64::MAX);
        let summaries = summaries_of(&held, first);
        forgotten.summaries += summaries.len() as u64;
        rewrites.extend(summaries);
    }
    if rewrites.is_empty() {
        return Ok(false);
    }
    store.rewrite_entries(lease, &rewrites).await?;
    Ok(true)
}

/// What a compaction summary that was written from a forgotten person's words says instead.
pub const SUMMARY_FORGOTTEN: &str = "(The summary of what came before is withdrawn: someone in that conversation asked to be forgotten.)";

/// The compaction summaries of one tree that summarised entry `first` or later (their first
/// kept entry comes after it), each rewritten to [`SUMMARY_FORGOTTEN`]. A summary is the
/// model's own words about everything before it, so which came from whom cannot be told; its
/// words go whole. It stays a compaction with the same first kept entry, so the session opens
/// where it did (the entries it stood for may be swept by age already).
fn summaries_of(tree: &[HeldWords], first: i64) -> Vec<Rewritten> {
    let seq_of = |id: &str| tree.iter().find(|e| e.id == id).map(|e| e.seq);
    tree.iter()
        .filter(|e| e.kind == clankie_agent::COMPACTION_KIND && e.seq > first)
        .filter_map(|e| {
            let Ok(EntryBody::Compaction { summary, first_kept_id }) = serde_json::from_value::<EntryBody>(e.body.clone()) else {
                return None;
            };
            // A first kept entry swept by age: the summary stood for everything up to itself.
            if summary == SUMMARY_FORGOTTEN || seq_of(&first_kept_id).unwrap_or(e.seq) <= first {
                return None;
            }
            let body = serde_json::to_value(EntryBody::Compaction { summary: SUMMARY_FORGOTTEN.into(), first_kept_id }).ok()?;
            Some(Rewritten { seq: e.seq, tree: e.tree.clone(), kind: e.kind.clone(), body, in_context: e.in_context })
        })
        .collect()
}

/// His entries in one tree (in order) that answered only `author_id`'s messages, each
/// rewritten as withdrawn; how many of his entries answered them with others; and his answers
/// among those, marked. A turn runs from the messages that start it to his answer without a
/// tool call; a message steered in meanwhile joins it, and the whole turn is judged by
/// everyone it answered.
fn his_answers_to(tree: &[HeldWords], author_id: u64, answered: &mut Vec<String>) -> (Vec<Rewritten>, u64, Vec<Rewritten>) {
    struct Turn<'a> {
        asked_by: BTreeSet<u64>,
        answered: String,
        /// Every delivery that started the turn or joined it.
        deliveries: Vec<String>,
        his: Vec<&'a HeldWords>,
        done: bool,
    }
    let (mut answers, mut kept, mut marks) = (Vec::new(), 0u64, Vec::new());
    let mut settle = |turn: &Turn<'_>| {
        if !turn.asked_by.contains(&author_id) {
            return;
        }
        if turn.asked_by.len() > 1 {
            kept += turn.his.len() as u64;
            marks.extend(turn.his.iter().filter_map(|e| marked(e)));
            return;
        }
        answers.extend(turn.his.iter().filter_map(|e| rewritten(e, EntryBody::Withdrawn { delivery_id: turn.answered.clone() })));
        // His replies carry one of the turn's deliveries: the owner's, or the newest for an
        // update; a turn only they asked is theirs whole.
        if !turn.his.is_empty() {
            answered.extend(turn.deliveries.iter().cloned());
        }
    };
    let mut turn = Turn { asked_by: BTreeSet::new(), answered: String::new(), deliveries: Vec::new(), his: Vec::new(), done: false };
    for e in tree {
        let Ok(body) = serde_json::from_value::<EntryBody>(e.body.clone()) else { continue };
        let (author, delivery_id) = match body {
            EntryBody::User { text, delivery_id, .. } => (blocks::message_author(&text), delivery_id),
            // A message withdrawn before (deleted, or its author forgotten once already) still
            // started its turn; whose it was is no longer known.
            EntryBody::Withdrawn { delivery_id } => (None, delivery_id),
            EntryBody::Assistant { tool_calls, .. } => {
                turn.his.push(e);
                turn.done = tool_calls.is_empty();
                continue;
            }
            EntryBody::ToolResult { .. } => {
                turn.his.push(e);
                continue;
            }
            _ => continue,
        };
        if turn.done {
            settle(&turn);
            turn = Turn { asked_by: BTreeSet::new(), answered: String::new(), deliveries: Vec::new(), his: Vec::new(), done: false };
        }
        if let Some(author) = author {
            turn.asked_by.insert(author);
        }
        if !delivery_id.is_empty() {
            if turn.answered.is_empty() {
                turn.answered = delivery_id.clone();
            }
            turn.deliveries.push(delivery_id);
        }
    }
    settle(&turn);
    (answers, kept, marks)
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

/// The names `author_id` went by in an entry's blocks, for the experiences they took part in.
fn collect_names(entry: &HeldWords, author_id: u64, names: &mut BTreeSet<String>) {
    let Ok(EntryBody::User { text, .. }) = serde_json::from_value::<EntryBody>(entry.body.clone()) else { return };
    for p in blocks::parse(&text).unwrap_or_default() {
        if p.attr("author_id").and_then(|a| a.parse::<u64>().ok()) == Some(author_id)
            && let Some(name) = p.attr("from")
        {
            // As an experience names its participants, where these names are looked for.
            let name = crate::experience::name(name);
            if name != crate::experience::NOBODY {
                names.insert(name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: EntryBody) -> HeldWords {
        let body = serde_json::to_value(body).unwrap();
        HeldWords {
            seq: 1,
            id: "e1".into(),
            lane: "room:1:2".into(),
            tree: "rooms/room:1:2".into(),
            kind: "user".into(),
            body,
            in_context: true,
        }
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

    /// A message's context: a quoted message edited or deleted changes each line that quotes
    /// it (twice quoted, both), never a line that only points at it; an edit of the message
    /// itself rewrites its own block and keeps the context with its ids.
    #[test]
    fn message_edit_and_delete_reach_every_context_line_that_quotes_it_and_keep_pointers_empty() {
        let q = |id: u64, text: &'static str, held: bool| blocks::Quote {
            said: blocks::Said { author_name: "bob", author_id: id, text },
            is_him: false,
            what: "replied_to",
            label: "",
            at: "",
            held,
        };
        let own = blocks::message(&blocks::Said { author_name: "ada", author_id: 7, text: "is this true?" }, &[]);
        let text = format!("{own}\n{}", blocks::context(&[q(8, "old fact", false), q(8, "old fact", false), q(9, "", true)]).unwrap());
        let e = entry(EntryBody::User { author: "ada".into(), delivery_id: "50".into(), text, images: vec![], lines: vec![40, 40, 41] });
        let body = |r: Option<Rewritten>| -> (String, Vec<u64>) {
            let EntryBody::User { text, lines, .. } = serde_json::from_value(r.expect("rewritten").body).unwrap() else { panic!() };
            (text, lines)
        };
        let (edited, lines) = body(changed(&e, 40, &Change::Edit { block: String::new(), text: "new fact".into() }));
        assert_eq!(edited.matches("new fact").count(), 2, "{edited}");
        assert_eq!(lines, [40, 40, 41]);
        let (pointed, _) = body(changed(&e, 41, &Change::Edit { block: String::new(), text: "said later".into() }));
        assert!(!pointed.contains("said later"), "a pointer line was filled with words");
        let (deleted, lines) = body(changed(&e, 40, &Change::Delete));
        assert!(!deleted.contains("old fact") && deleted.contains("earlier_in_this_conversation"));
        assert_eq!(lines, [41]);
        let new_own = blocks::message(&blocks::Said { author_name: "ada", author_id: 7, text: "is this REALLY true?" }, &[]);
        let (rewritten, lines) = body(changed(&e, 50, &Change::Edit { block: new_own, text: String::new() }));
        assert!(rewritten.starts_with("<message ") && rewritten.contains("REALLY") && rewritten.contains("old fact"));
        assert_eq!(lines, [40, 40, 41]);
    }

    /// The correction a run heard (an entry under the edit's delivery id, its block first) is
    /// found by the message it edits and by its author, like the message itself.
    #[test]
    fn message_edit_correction_is_found_by_a_later_delete_and_by_a_forget() {
        let block = blocks::message(&blocks::Said { author_name: "ada", author_id: 7, text: "at 9pm" }, &[("edited", "true")]);
        let correction = entry(EntryBody::User {
            author: "ada".into(),
            delivery_id: "edit:42:1796148300000".into(),
            text: format!("{block}\n(A correction: its author edited an earlier message, which now reads as above.)"),
            images: vec![],
            lines: vec![],
        });
        let gone = serde_json::from_value::<EntryBody>(changed(&correction, 42, &Change::Delete).unwrap().body).unwrap();
        assert_eq!(gone, EntryBody::Withdrawn { delivery_id: "edit:42:1796148300000".into() });
        assert!(changed(&correction, 4, &Change::Delete).is_none(), "an id that only starts the same is another message");
        let forgotten = serde_json::from_value::<EntryBody>(without_author(&correction, 7).unwrap().body).unwrap();
        assert!(matches!(forgotten, EntryBody::Withdrawn { .. }));
        assert!(without_author(&correction, 8).is_none());
        assert!(is_correction_of("edit:42:1", 42) && !is_correction_of("edit:421:1", 42) && !is_correction_of("42", 42));
    }

    fn his(text: &str, calls: usize) -> EntryBody {
        let tool_calls = (0..calls)
            .map(|n| clankie_agent::provider::ToolCall {
                id: format!("c{n}"),
                name: "read_page".into(),
                arguments: format!("{{\"q\":\"{text}\"}}"),
            })
            .collect();
        EntryBody::Assistant {
            text: text.into(),
            tool_calls,
            stop_reason: "stop".into(),
            usage: Default::default(),
            provider_error: None,
            forgotten_asker: false,
        }
    }

    fn message(name: &'static str, id: u64, delivery: &str, text: &'static str) -> EntryBody {
        EntryBody::User {
            author: name.into(),
            delivery_id: delivery.into(),
            text: blocks::message(&blocks::Said { author_name: name, author_id: id, text }, &[]),
            images: vec![],
            lines: vec![],
        }
    }

    #[test]
    fn erase_rewrites_only_the_summaries_that_stood_for_their_words() {
        let summary = |kept: &str| EntryBody::Compaction { summary: "ada asked about heron-33".into(), first_kept_id: kept.into() };
        let tree: Vec<HeldWords> = [
            ("m0", message("bob", 7, "10", "hello")),
            ("h1", his("hi", 0)),
            ("m2", message("ada", 8, "12", "the code is heron-33")),
            ("h3", his("noted", 0)),
            // Keeps her message on: it summarised only what came before her.
            ("c4", summary("m2")),
            ("m5", message("bob", 7, "15", "and now?")),
            // Stands for everything before bob's second message, hers included.
            ("c6", summary("m5")),
            // Its first kept entry swept by age: it stood for everything up to itself.
            ("c7", summary("gone")),
        ]
        .into_iter()
        .enumerate()
        .map(|(n, (id, b))| {
            let kind = if matches!(b, EntryBody::Compaction { .. }) { clankie_agent::COMPACTION_KIND } else { "user" };
            HeldWords { seq: n as i64, id: id.into(), kind: kind.into(), ..entry(b) }
        })
        .collect();
        let rewritten = summaries_of(&tree, 2);
        assert_eq!(rewritten.iter().map(|r| r.seq).collect::<Vec<_>>(), [6, 7]);
        for r in &rewritten {
            let body: EntryBody = serde_json::from_value(r.body.clone()).unwrap();
            let kept = if r.seq == 6 { "m5" } else { "gone" };
            assert_eq!(body, EntryBody::Compaction { summary: SUMMARY_FORGOTTEN.into(), first_kept_id: kept.into() });
            assert_eq!(r.kind, clankie_agent::COMPACTION_KIND, "still a compaction, so the session opens where it did");
        }
        assert!(summaries_of(&tree, 7).is_empty(), "nothing of hers before any summary");
    }

    #[test]
    fn erase_withdraws_his_answers_to_turns_only_they_started_and_marks_shared_ones() {
        let tree: Vec<HeldWords> = [
            // bob alone, with a tool call: the whole turn goes.
            message("bob", 8, "1", "the meeting tomorrow?"),
            his("looking", 1),
            EntryBody::ToolResult { call_id: "c0".into(), name: "read_page".into(), content: "page".into(), is_error: false },
            his("The meeting tomorrow is at noon.", 0),
            // ada alone, in the same words: kept.
            message("ada", 7, "2", "the meeting tomorrow?"),
            his("Yes, the meeting tomorrow.", 0),
            // ada, with bob steered in mid-turn: shared, kept.
            message("ada", 7, "3", "and lunch?"),
            his("checking", 1),
            EntryBody::ToolResult { call_id: "c0".into(), name: "read_page".into(), content: "menu".into(), is_error: false },
            message("bob", 8, "4", "me too"),
            his("Lunch for you both.", 0),
        ]
        .into_iter()
        .enumerate()
        .map(|(n, b)| HeldWords { seq: n as i64, ..entry(b) })
        .collect();
        let mut answered = Vec::new();
        let (answers, kept, marks) = his_answers_to(&tree, 8, &mut answered);
        assert_eq!(answers.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3], "bob's own turn, tool call and result together");
        assert!(answers.iter().all(|r| r.kind == "withdrawn" && !r.in_context && !r.body.to_string().contains("meeting")));
        assert_eq!(kept, 3, "the turn he shared with ada stays");
        assert_eq!(answered, ["1"], "the turn whose replies leave the egress stream: bob's alone");
        // His words in the shared turn stay word for word; only the mark is new.
        assert_eq!(marks.iter().map(|r| r.seq).collect::<Vec<_>>(), [7, 10], "his answers in the shared turn, marked");
        for m in &marks {
            let body: EntryBody = serde_json::from_value(m.body.clone()).unwrap();
            let EntryBody::Assistant { forgotten_asker: true, .. } = &body else { panic!("not marked: {body:?}") };
            let unmarked = serde_json::to_value(match body {
                EntryBody::Assistant { forgotten_asker: _, text, tool_calls, stop_reason, usage, provider_error } => {
                    EntryBody::Assistant { text, tool_calls, stop_reason, usage, provider_error, forgotten_asker: false }
                }
                other => other,
            })
            .unwrap();
            assert_eq!((unmarked, m.kind.as_str(), m.in_context), (tree[m.seq as usize].body.clone(), "assistant", true));
        }
        let mut answered = Vec::new();
        let (answers, kept, marks) = his_answers_to(&tree, 7, &mut answered);
        assert_eq!((answers.iter().map(|r| r.seq).collect::<Vec<_>>(), kept, answered), (vec![5], 3, vec!["2".to_owned()]));
        assert_eq!(marks.len(), 2);
        // Marked once: a second forget of someone else in that turn finds it marked already.
        let marked_tree: Vec<HeldWords> = tree
            .iter()
            .map(|e| marks.iter().find(|m| m.seq == e.seq).map_or(e.clone(), |m| HeldWords { body: m.body.clone(), ..e.clone() }))
            .collect();
        assert!(his_answers_to(&marked_tree, 8, &mut Vec::new()).2.is_empty());
    }
}
