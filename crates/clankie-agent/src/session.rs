//! A session: the append-only tree of a lane's conversation, persisted through
//! the store and rebuilt into exactly the same model context on reload.

use std::sync::atomic::{AtomicU64, Ordering};

use clankie_store::{Lease, NewEntry, Store};
use serde::{Deserialize, Serialize};

use crate::AgentError;
use crate::provider::{ChatMessage, ToolCall, Usage};

/// A message from someone in the room, as the caller formatted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserMessage {
    /// Who wrote it, for attribution.
    pub author: String,
    /// The delivery it came from; empty for context the caller adds itself.
    pub delivery_id: String,
    /// The text the model sees.
    pub text: String,
    /// Pictures the model perceives with it, as `data:` URLs.
    pub images: Vec<String>,
    /// For a block of other messages (a history block): the Discord id of each of its lines,
    /// in order, so an edit or a deletion can find its line later. Never shown to the model.
    pub lines: Vec<u64>,
}

impl UserMessage {
    /// A message of text alone.
    pub fn new(author: impl Into<String>, delivery_id: impl Into<String>, text: impl Into<String>) -> UserMessage {
        UserMessage { author: author.into(), delivery_id: delivery_id.into(), text: text.into(), images: Vec::new(), lines: Vec::new() }
    }
}

/// One entry of a session tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EntryBody {
    User {
        author: String,
        delivery_id: String,
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<String>,
        /// The message id of each line of a history block, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        lines: Vec<u64>,
    },
    /// A message its author deleted, or a person forgotten: its words are gone from the store;
    /// its id stays, so the session still knows how far into the room it has heard.
    Withdrawn {
        delivery_id: String,
    },
    Assistant {
        text: String,
        /// Left out of the stored body when empty, as most answers call no tool.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        stop_reason: String,
        usage: Usage,
        /// The provider's own message when the call failed; kept here, never in a receipt or log.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_error: Option<String>,
        /// Someone this answered has since been forgotten. It stays, since it answered others
        /// too, and the model is told their words are gone, so it does not repeat them.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        forgotten_asker: bool,
    },
    ToolResult {
        call_id: String,
        name: String,
        content: String,
        is_error: bool,
    },
    /// Everything before `first_kept_id` is replaced in context by `summary`.
    Compaction {
        summary: String,
        first_kept_id: String,
    },
    /// A record kept out of model context.
    Note {
        text: String,
    },
}

/// How a compaction entry is stored (`session_entries.kind`).
pub const COMPACTION_KIND: &str = "compaction";
/// How a withdrawn message is stored.
pub const WITHDRAWN_KIND: &str = "withdrawn";

impl EntryBody {
    /// How it is stored (`session_entries.kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            EntryBody::User { .. } => "user",
            EntryBody::Assistant { .. } => "assistant",
            EntryBody::ToolResult { .. } => "tool_result",
            EntryBody::Compaction { .. } => COMPACTION_KIND,
            EntryBody::Note { .. } => "note",
            EntryBody::Withdrawn { .. } => WITHDRAWN_KIND,
        }
    }

    /// Whether the model sees it.
    pub fn in_context(&self) -> bool {
        match self {
            EntryBody::Assistant { provider_error, .. } => provider_error.is_none(),
            EntryBody::Note { .. } | EntryBody::Compaction { .. } | EntryBody::Withdrawn { .. } => false,
            EntryBody::User { .. } | EntryBody::ToolResult { .. } => true,
        }
    }
}

/// A stored entry with its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEntry {
    pub id: String,
    pub parent_id: Option<String>,
    pub body: EntryBody,
}

/// The prefix every summary is shown to the model with.
pub const SUMMARY_PREFIX: &str = "Summary of the conversation before this point:\n";

/// What the model is told after an answer of his to someone since forgotten.
pub const FORGOTTEN_ASKER_NOTE: &str =
    "(Someone the answer above also answered has since asked to be forgotten: their messages are withdrawn. Do not repeat what they said.)";

/// A tool result longer than this, from before the session's latest compaction, is shown as a stub.
pub const SETTLED_RESULT_MAX_CHARS: usize = 600;

/// What a later run sees instead of `n` pictures an earlier turn was shown.
fn picture_stub(n: usize) -> String {
    format!("({n} picture(s) shown in an earlier turn; no longer attached)")
}

/// Appends a user entry to a context, joining it to a user message just before: providers bill
/// and some require one user message between answers, and the wrappers of many cost more than
/// their words. Pictures keep the order of the entries they came with.
fn push_user(out: &mut Vec<ChatMessage>, text: String, images: &[String]) {
    match out.last_mut() {
        Some(ChatMessage::User { text: joined, images: shown }) => {
            joined.push('\n');
            joined.push_str(&text);
            shown.extend_from_slice(images);
        }
        _ => out.push(ChatMessage::User { text, images: images.to_vec() }),
    }
}

/// Stored entries as session entries, leaving out those of abandoned epochs.
fn readable(tree: &str, stored: Vec<clankie_store::Entry>, abandoned: &[i64]) -> Result<Vec<SessionEntry>, AgentError> {
    stored
        .into_iter()
        .filter(|e| !abandoned.contains(&e.epoch))
        .map(|e| {
            let body: EntryBody = serde_json::from_value(e.body)
                .map_err(|err| AgentError::Session(format!("entry {} of {tree} is unreadable: {err}", e.id)))?;
            Ok(SessionEntry { id: e.id, parent_id: e.parent_id, body })
        })
        .collect()
}

/// What the model is told a tool call with no recorded result did.
const INTERRUPTED: &str = "(no result: the turn was interrupted before this tool finished)";

/// A lane's session, writing through the store under a lease.
pub struct Session {
    store: Store,
    lease: Lease,
    tree: String,
    entries: Vec<SessionEntry>,
    /// The store's sequence number of the newest entry it holds: a copy kept from an earlier
    /// epoch reads only what came after it.
    seq: i64,
}

fn new_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("e{nanos:x}-{:x}", N.fetch_add(1, Ordering::Relaxed))
}

impl Session {
    /// Opens the tree from its newest compaction on (what the summary replaced is never read),
    /// leaving out what runs that never settled wrote:
    /// a run that died or lost its lane posted nothing, so its input and its unsent answer are
    /// not part of the conversation, and the run that takes its deliveries writes them afresh.
    pub async fn open(store: Store, lease: Lease, tree: impl Into<String>) -> Result<Session, AgentError> {
        let tree = tree.into();
        let abandoned = store.abandoned_epochs(&lease.lane).await?;
        let stored = store.entries_since_compaction(&tree).await?;
        let seq = stored.last().map_or(0, |e| e.seq);
        let entries = readable(&tree, stored, &abandoned)?;
        Ok(Session { store, lease, tree, entries, seq })
    }

    /// Brings a copy kept from an earlier epoch up to date under `lease`: reads only the entries
    /// other replicas appended since (none of an abandoned run), so the context equals what
    /// [`Session::open`] would build. A copy that would miss a compaction is opened afresh.
    /// Returns how many entries it read.
    pub async fn refresh(&mut self, lease: Lease) -> Result<usize, AgentError> {
        let newer = self.store.entries_after(&self.tree, self.seq).await?;
        // A compaction, or words rewritten in place (an edit, a deletion, a person forgotten),
        // changes entries this copy already holds: only a fresh read has them as they are now.
        if newer.iter().any(|e| e.kind == COMPACTION_KIND || e.kind == clankie_store::REWRITE_KIND) {
            let fresh = Session::open(self.store.clone(), lease, self.tree.clone()).await?;
            let read = fresh.entries.len();
            *self = fresh;
            return Ok(read);
        }
        self.lease = lease;
        let Some(last) = newer.last() else { return Ok(0) };
        self.seq = last.seq;
        let abandoned = self.store.abandoned_epochs(&self.lease.lane).await?;
        let read = newer.len();
        let mut newer = readable(&self.tree, newer, &abandoned)?;
        self.entries.append(&mut newer);
        Ok(read)
    }

    /// The tree this session writes (`rooms/<lane>` or `turns/<lane>~<target>`).
    pub fn tree(&self) -> &str {
        &self.tree
    }

    /// The lease writes are fenced by.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Replaces the lease after a renewal.
    pub fn set_lease(&mut self, lease: Lease) {
        self.lease = lease;
    }

    /// Every entry, oldest first.
    pub fn entries(&self) -> &[SessionEntry] {
        &self.entries
    }

    /// The newest message id among the deliveries it holds: everything of the room up to
    /// there is already in it, as the message itself or in the history it opened with.
    pub fn newest_delivery(&self) -> Option<u64> {
        self.entries
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::User { delivery_id, .. } | EntryBody::Withdrawn { delivery_id } => delivery_id.parse().ok(),
                _ => None,
            })
            .max()
    }

    /// Every Discord message it holds: its messages and the lines of its blocks (history, a
    /// message's context). A reply to one of them points at it instead of quoting it again.
    pub fn message_ids(&self) -> std::collections::HashSet<u64> {
        let mut ids = std::collections::HashSet::new();
        for e in &self.entries {
            if let EntryBody::User { delivery_id, lines, .. } = &e.body {
                ids.extend(delivery_id.parse::<u64>().ok());
                ids.extend(lines.iter().copied());
            }
        }
        ids
    }

    /// About how many bytes the session holds in memory: its texts, pictures and tool calls, and
    /// a fixed cost per entry. What a warm cache weighs it by.
    pub fn approx_bytes(&self) -> usize {
        const PER_ENTRY: usize = 160;
        self.entries
            .iter()
            .map(|e| {
                PER_ENTRY
                    + e.id.len()
                    + match &e.body {
                        EntryBody::User { author, delivery_id, text, images, lines } => {
                            author.len() + delivery_id.len() + text.len() + images.iter().map(String::len).sum::<usize>() + lines.len() * 8
                        }
                        EntryBody::Assistant { text, tool_calls, stop_reason, provider_error, .. } => {
                            text.len()
                                + stop_reason.len()
                                + provider_error.as_ref().map_or(0, String::len)
                                + tool_calls.iter().map(|c| c.id.len() + c.name.len() + c.arguments.len()).sum::<usize>()
                        }
                        EntryBody::ToolResult { call_id, name, content, .. } => call_id.len() + name.len() + content.len(),
                        EntryBody::Compaction { summary, first_kept_id } => summary.len() + first_kept_id.len(),
                        EntryBody::Note { text } => text.len(),
                        EntryBody::Withdrawn { delivery_id } => delivery_id.len(),
                    }
            })
            .sum()
    }

    /// Drops the bytes of every picture from before the run that made the latest compaction, keeping their count:
    /// the model sees those only as a stub, and a warm session need not carry them. Later ones
    /// are shown whole until the next compaction (so the prompt's prefix stays what a cache
    /// holds) and count toward its budget. The store keeps them all whole.
    pub fn forget_pictures(&mut self) {
        let stubbed = self.stubbed_before();
        for e in &mut self.entries[..stubbed] {
            if let EntryBody::User { images, .. } = &mut e.body {
                for image in images.iter_mut() {
                    *image = String::new();
                }
            }
        }
    }

    /// Lets go of the entries the newest summary replaced, as [`Session::open`] never reads
    /// them: a warm copy of a long-lived lane then stays near its context budget instead of
    /// holding every word the lane ever had. The store keeps them all. Called between runs
    /// (a run counts its entries by position).
    pub fn let_go_of_summarised(&mut self) {
        let first_kept = self.entries.iter().rev().find_map(|e| match &e.body {
            EntryBody::Compaction { first_kept_id, .. } => Some(first_kept_id.clone()),
            _ => None,
        });
        if let Some(start) = first_kept.and_then(|id| self.entries.iter().position(|e| e.id == id))
            && start > 0
        {
            self.entries.drain(..start);
        }
    }

    /// The texts of the user messages from `author` the model still sees (after the last
    /// compaction), oldest first: e.g. the self-context notes a lane was sent, so the next one
    /// carries only what changed.
    pub fn seen_from(&self, author: &str) -> Vec<&str> {
        let (start, _) = self.context_start();
        self.entries[start..]
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::User { author: a, text, .. } if a == author => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Appends an entry after the current head, durably, and returns its id.
    pub async fn append(&mut self, body: EntryBody) -> Result<String, AgentError> {
        let id = new_id();
        let parent_id = self.entries.last().map(|e| e.id.clone());
        let entry = NewEntry {
            id: id.clone(),
            parent_id: parent_id.clone(),
            kind: body.kind().to_owned(),
            body: serde_json::to_value(&body).map_err(|e| AgentError::Session(e.to_string()))?,
            in_context: body.in_context(),
        };
        self.seq = self.store.append_entry(&self.lease, &self.tree, &entry).await?;
        self.entries.push(SessionEntry { id: id.clone(), parent_id, body });
        Ok(id)
    }

    /// Where stubs end: the start of the run that made the latest compaction (0 with none). What
    /// a compaction kept from before that run is shown as stubs from then on. That run's own
    /// entries were shown whole after its compaction, so later turns show them whole too, and
    /// repeat its last request byte for byte; the next compaction makes them stubs.
    ///
    /// A run's start is found after the last answer with no tool call before the compaction; a
    /// run that took a steered message after such an answer is taken to start there, which only
    /// makes a stub a turn early.
    fn stubbed_before(&self) -> usize {
        let Some(at) = self.entries.iter().rposition(|e| matches!(e.body, EntryBody::Compaction { .. })) else { return 0 };
        self.entries[..at]
            .iter()
            .rposition(|e| matches!(&e.body, EntryBody::Assistant { tool_calls, .. } if tool_calls.is_empty()))
            .map_or(0, |answer| answer + 1)
    }

    /// The index of the first entry the model still sees in full, and the summary standing in for the rest.
    pub(crate) fn context_start(&self) -> (usize, Option<&str>) {
        let compaction = self.entries.iter().rev().find_map(|e| match &e.body {
            EntryBody::Compaction { summary, first_kept_id } => Some((summary.as_str(), first_kept_id.as_str())),
            _ => None,
        });
        match compaction {
            Some((summary, first_kept)) => {
                let start = self.entries.iter().position(|e| e.id == first_kept).unwrap_or(self.entries.len());
                (start, Some(summary))
            }
            None => (0, None),
        }
    }

    /// The model context this session stands for: the latest summary, then
    /// every in-context entry after it, consecutive user entries (a turn's note
    /// and its messages, a burst) as one message. A tool call whose result never landed
    /// gets a stated placeholder, so the context stays well-formed.
    pub fn context(&self) -> Vec<ChatMessage> {
        self.context_settled_before(0)
    }

    /// Like [`Session::context`], but a long tool result or a picture that a compaction kept
    /// is shown as a short stub, unless it is among this run's own entries (from `settled` on):
    /// a page read for one answer is not carried whole for the rest of a long-lived lane.
    ///
    /// Stubs are made at a compaction and nowhere else, because a compaction rewrites the
    /// conversation's start anyway: between two compactions every later request repeats the
    /// earlier ones byte for byte, so a provider's prompt cache serves all of it and the next
    /// turn writes only what it adds. A stub made when the run that read the page ended would
    /// change the prefix there, and every later turn would write the rest of it to the cache again.
    pub fn context_settled_before(&self, settled: usize) -> Vec<ChatMessage> {
        let stubbed_before = self.stubbed_before().min(settled);
        let (start, summary) = self.context_start();
        let mut out = Vec::new();
        if let Some(summary) = summary {
            out.push(ChatMessage::user(format!("{SUMMARY_PREFIX}{summary}")));
        }
        let kept = &self.entries[start..];
        for (i, entry) in kept.iter().enumerate() {
            if !entry.body.in_context() {
                continue;
            }
            match &entry.body {
                // A picture a compaction kept is a stub from then on, as a long tool result is.
                EntryBody::User { text, images, .. } if start + i < stubbed_before && !images.is_empty() => {
                    push_user(&mut out, format!("{text}\n{}", picture_stub(images.len())), &[])
                }
                EntryBody::User { text, images, .. } => push_user(&mut out, text.clone(), images),
                EntryBody::Assistant { text, tool_calls, forgotten_asker, .. } => {
                    out.push(ChatMessage::Assistant { text: text.clone(), tool_calls: tool_calls.clone() });
                    // After the turn's last word, not between a tool call and its result.
                    if *forgotten_asker && tool_calls.is_empty() {
                        push_user(&mut out, FORGOTTEN_ASKER_NOTE.to_owned(), &[]);
                    }
                    for call in tool_calls {
                        let answered =
                            kept[i + 1..].iter().any(|e| matches!(&e.body, EntryBody::ToolResult { call_id, .. } if *call_id == call.id));
                        if !answered {
                            out.push(ChatMessage::Tool { call_id: call.id.clone(), name: call.name.clone(), content: INTERRUPTED.into() });
                        }
                    }
                }
                EntryBody::ToolResult { call_id, name, content, .. } => {
                    let content = if start + i < stubbed_before && content.chars().count() > SETTLED_RESULT_MAX_CHARS {
                        format!(
                            "(the {name} result from an earlier turn, {} characters, is no longer shown; call {name} again if you need it)",
                            content.chars().count()
                        )
                    } else {
                        content.clone()
                    };
                    out.push(ChatMessage::Tool { call_id: call_id.clone(), name: name.clone(), content })
                }
                EntryBody::Compaction { .. } | EntryBody::Note { .. } | EntryBody::Withdrawn { .. } => {}
            }
        }
        out
    }
}
