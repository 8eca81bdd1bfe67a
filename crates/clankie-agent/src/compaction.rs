//! Auto-compaction: when a session's context outgrows its budget, the older
//! part is summarised and the summary stands in for it.
//!
//! The cut always falls on a user message, so a tool call and its result are
//! never separated.

use crate::provider::{CachePlan, ChatMessage, ModelRequest};
use crate::session::{EntryBody, Session};

/// When to compact and how much to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Context size (estimated tokens) past which the session is compacted.
    pub budget_tokens: usize,
    /// Roughly how much recent context survives verbatim.
    pub keep_recent_tokens: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy { budget_tokens: 60_000, keep_recent_tokens: 12_000 }
    }
}

/// The summarising instruction.
pub const SUMMARY_INSTRUCTION: &str = "You are compacting your own conversation history. Summarise the transcript below for your later self: \
who said what that still matters, open requests, promises and decisions. Plain prose, at most 200 words.";

/// A planned compaction: the entry that stays first, and the request that summarises what goes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub first_kept_id: String,
    pub request: ModelRequest,
}

/// What one picture costs in context, in tokens (a detailed 1024×1024 picture at OpenAI's
/// rates); pictures count toward the budget like words.
pub const PICTURE_TOKENS: usize = 765;

fn tokens(body: &EntryBody) -> usize {
    if let EntryBody::User { images, .. } = body {
        return text_tokens(body) + images.len() * PICTURE_TOKENS;
    }
    text_tokens(body)
}

fn text_tokens(body: &EntryBody) -> usize {
    let chars = match body {
        EntryBody::User { text, .. } | EntryBody::Note { text } => text.len(),
        EntryBody::Assistant { text, tool_calls, .. } => text.len() + tool_calls.iter().map(|c| c.arguments.len()).sum::<usize>(),
        EntryBody::ToolResult { content, .. } => content.len(),
        EntryBody::Compaction { summary, .. } => summary.len(),
        EntryBody::Withdrawn { .. } => 0,
    };
    chars / 4 + 4
}

fn render(body: &EntryBody) -> Option<String> {
    match body {
        EntryBody::User { text, .. } => Some(format!("user: {text}")),
        EntryBody::Assistant { text, tool_calls, provider_error: None, .. } => {
            let calls: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
            Some(if calls.is_empty() { format!("you: {text}") } else { format!("you: {text} [called {}]", calls.join(", ")) })
        }
        EntryBody::ToolResult { name, content, .. } => Some(format!("tool {name}: {content}")),
        _ => None,
    }
}

/// Decides whether the session needs compacting and, if so, what to summarise.
pub(crate) fn plan(session: &Session, policy: &CompactionPolicy) -> Option<Plan> {
    let (start, summary) = session.context_start();
    let entries = &session.entries()[start..];
    let sizes: Vec<usize> = entries
        .iter()
        .map(|e| if matches!(e.body, EntryBody::Note { .. } | EntryBody::Compaction { .. }) { 0 } else { tokens(&e.body) })
        .collect();
    let total: usize = sizes.iter().sum::<usize>() + summary.map_or(0, |s| s.len() / 4);
    if total <= policy.budget_tokens {
        return None;
    }
    let mut recent = 0;
    let mut cut = None;
    for i in (1..entries.len()).rev() {
        recent += sizes[i];
        if matches!(entries[i].body, EntryBody::User { .. }) {
            cut = Some(i);
            if recent >= policy.keep_recent_tokens {
                break;
            }
        }
    }
    let cut = cut?;
    let mut transcript = String::new();
    if let Some(previous) = summary {
        transcript.push_str("Earlier summary: ");
        transcript.push_str(previous);
        transcript.push('\n');
    }
    for line in entries[..cut].iter().filter_map(|e| render(&e.body)) {
        transcript.push_str(&line);
        transcript.push('\n');
    }
    Some(Plan {
        first_kept_id: entries[cut].id.clone(),
        // Nothing of a summary call is sent again (the next one summarises a different transcript),
        // so writing it to a provider's cache would only cost more than sending it plain.
        request: ModelRequest {
            system: SUMMARY_INSTRUCTION.to_owned(),
            messages: vec![ChatMessage::user(transcript)],
            tools: Vec::new(),
            cache: CachePlan::Once,
        },
    })
}
