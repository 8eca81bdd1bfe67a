//! The offline rehearsal model: lets the whole pipeline be seen working with
//! no provider configured. Deterministic, and it says what it is in every
//! answer it writes.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::json;

use super::{ChatMessage, ModelError, ModelRequest, StreamItem, Usage};
use crate::silence::SILENT_TOKEN;

/// The label every rehearsal answer starts with.
pub const REHEARSAL_LABEL: &str = "[rehearsal]";

/// The name of the mid-turn progress tool it knows how to call.
const TEXT_UPDATE: &str = "send_text_update";

/// A deterministic stand-in model with a configurable pace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RehearsalModel {
    /// Silence before the first token.
    pub think_delay: Duration,
    /// Gap between tokens.
    pub token_delay: Duration,
}

impl Default for RehearsalModel {
    fn default() -> Self {
        RehearsalModel { think_delay: Duration::from_millis(1500), token_delay: Duration::from_millis(60) }
    }
}

/// What the rehearsal model decides to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    Say(String),
    TextUpdate(String),
}

/// Reads the request: decline when asked for quiet, post one progress note
/// before "slow" work, otherwise answer every message heard since it last spoke.
pub(crate) fn plan(request: &ModelRequest) -> Plan {
    let since_reply: Vec<&str> = request
        .messages
        .iter()
        .rev()
        .take_while(|m| !matches!(m, ChatMessage::Assistant { tool_calls, .. } if tool_calls.is_empty()))
        .filter_map(|m| match m {
            ChatMessage::User { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let updated = request
        .messages
        .iter()
        .rev()
        .take_while(|m| !matches!(m, ChatMessage::User { .. }))
        .any(|m| matches!(m, ChatMessage::Tool { name, .. } if name == TEXT_UPDATE));
    // A turn's messages arrive as `<message>` blocks, many to a user message; plain texts count one each.
    let blocks = since_reply.iter().map(|t| t.matches("<message ").count()).sum::<usize>();
    let heard = if blocks > 0 { blocks } else { since_reply.len() };
    let last = since_reply.first().copied().unwrap_or_default().to_lowercase();
    if last.contains("stay silent") || last.contains("shh") {
        return Plan::Say(SILENT_TOKEN.to_owned());
    }
    let can_update = request.tools.iter().any(|t| t.name == TEXT_UPDATE);
    if can_update && !updated && last.contains("slow") {
        return Plan::TextUpdate(format!("{REHEARSAL_LABEL} On it; this will take a moment."));
    }
    let messages = if heard == 1 { "1 message".to_owned() } else { format!("{heard} messages") };
    Plan::Say(format!("{REHEARSAL_LABEL} I'm the offline rehearsal model, answering {messages} at once. No provider is configured."))
}

impl RehearsalModel {
    pub(crate) fn open(&self, request: &ModelRequest) -> BoxStream<'static, Result<StreamItem, ModelError>> {
        let input_tokens = request.messages.iter().map(ChatMessage::token_estimate).sum::<usize>() as u64;
        let (think, pace) = (self.think_delay, self.token_delay);
        let items: Vec<(Duration, StreamItem)> = match plan(request) {
            Plan::Say(text) => {
                let words: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
                let out = (text.len() / 4) as u64;
                let mut items: Vec<(Duration, StreamItem)> =
                    words.into_iter().enumerate().map(|(i, w)| (if i == 0 { think } else { pace }, StreamItem::Text(w))).collect();
                items.push((Duration::ZERO, StreamItem::Finish("stop".into())));
                items.push((Duration::ZERO, StreamItem::Usage(Usage { input_tokens, output_tokens: out, ..Usage::default() })));
                items
            }
            Plan::TextUpdate(text) => vec![
                (
                    think,
                    StreamItem::ToolCallDelta {
                        index: 0,
                        id: Some("rehearsal_update".into()),
                        name: Some(TEXT_UPDATE.into()),
                        arguments: json!({ "text": text }).to_string(),
                    },
                ),
                (Duration::ZERO, StreamItem::Finish("tool_calls".into())),
                (Duration::ZERO, StreamItem::Usage(Usage { input_tokens, output_tokens: 12, ..Usage::default() })),
            ],
        };
        futures::stream::iter(items)
            .then(|(delay, item)| async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok(item)
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolSpec;

    fn request(messages: Vec<ChatMessage>, with_update: bool) -> ModelRequest {
        let tools = if with_update {
            vec![ToolSpec { name: TEXT_UPDATE.into(), description: String::new(), parameters: json!({}) }]
        } else {
            vec![]
        };
        ModelRequest { system: String::new(), messages, tools, cache: Default::default() }
    }

    fn user(t: &str) -> ChatMessage {
        ChatMessage::user(t)
    }

    #[test]
    fn answers_a_burst_once_and_labels_itself() {
        let p = plan(&request(vec![user("a"), user("b"), user("c")], false));
        match p {
            Plan::Say(t) => assert!(t.starts_with(REHEARSAL_LABEL) && t.contains("3 messages"), "{t}"),
            other => panic!("{other:?}"),
        }
        // A turn as a lane sends it: a note and two message blocks in one user message.
        let turn =
            "<self_context>\nElsewhere now: nowhere.\n</self_context>\n<message from=\"a\">x</message>\n<message from=\"b\">y</message>";
        assert!(matches!(plan(&request(vec![user(turn)], false)), Plan::Say(t) if t.contains("2 messages")));
    }

    #[test]
    fn declines_when_asked_for_quiet() {
        assert_eq!(plan(&request(vec![user("please stay silent")], false)), Plan::Say(SILENT_TOKEN.into()));
    }

    #[test]
    fn posts_one_progress_note_before_slow_work() {
        let first = plan(&request(vec![user("do something slow")], true));
        assert!(matches!(first, Plan::TextUpdate(_)));
        let after = plan(&request(
            vec![
                user("do something slow"),
                ChatMessage::Assistant {
                    text: String::new(),
                    tool_calls: vec![crate::provider::ToolCall { id: "x".into(), name: TEXT_UPDATE.into(), arguments: "{}".into() }],
                },
                ChatMessage::Tool { call_id: "x".into(), name: TEXT_UPDATE.into(), content: "posted".into() },
            ],
            true,
        ));
        assert!(matches!(after, Plan::Say(_)), "{after:?}");
    }
}
