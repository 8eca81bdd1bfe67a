//! The message structure Anthropic's Messages API refuses, checked before a request is served:
//! each refusal is a 400 `invalid_request_error` worded as Anthropic words it, so a history the
//! client leaves odd (a deleted first message, a forget, a stubbed tool round) fails here as it
//! would against Claude, not in production.
//!
//! - roles: `user` or `assistant`, the first message `user`;
//! - content: none empty but an optional final assistant message, no empty text block;
//! - a `tool_use` answered by `tool_result` blocks at the start of the very next message, one
//!   for each id, and no `tool_result` whose `tool_use` is not in the message before;
//! - an image's bytes of the media type it names (PNG, JPEG, GIF or WebP).

use base64::Engine as _;
use serde_json::Value;

/// The media types an image may name.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// `Err` with Anthropic's message when `body`'s messages are shaped as Anthropic refuses.
pub(crate) fn check(body: &Value) -> Result<(), String> {
    let Some(messages) = body["messages"].as_array() else {
        return Err("messages: Field required".into());
    };
    if messages.is_empty() {
        return Err("messages: at least one message is required".into());
    }
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        if role != "user" && role != "assistant" {
            return Err(format!("messages.{i}.role: Input should be 'user' or 'assistant'"));
        }
        if i == 0 && role != "user" {
            return Err("messages: first message must use the \"user\" role".into());
        }
        let blocks = blocks_of(message);
        let final_assistant = i + 1 == messages.len() && role == "assistant";
        if blocks.is_empty() && !final_assistant {
            return Err(format!("messages.{i}: all messages must have non-empty content except for the optional final assistant message"));
        }
        for (j, block) in blocks.iter().enumerate() {
            if block["type"] == "text" && block["text"].as_str().is_none_or(str::is_empty) {
                return Err(format!("messages.{i}.content.{j}: text content blocks must be non-empty"));
            }
            if block["type"] == "image" {
                image(block, &format!("messages.{i}.content.{j}"))?;
            }
        }
        tool_results_answer(messages, i)?;
        if role == "assistant"
            && let Some(next) = messages.get(i + 1)
        {
            tool_uses_answered(&blocks, &blocks_of(next), i)?;
        }
    }
    Ok(())
}

/// A message's content as blocks: a string is one text block.
fn blocks_of(message: &Value) -> Vec<Value> {
    match &message["content"] {
        Value::String(s) if s.is_empty() => Vec::new(),
        Value::String(s) => vec![serde_json::json!({ "type": "text", "text": s })],
        Value::Array(blocks) => blocks.clone(),
        _ => Vec::new(),
    }
}

fn ids_of<'a>(blocks: &'a [Value], kind: &str, field: &str) -> Vec<&'a str> {
    blocks.iter().filter(|b| b["type"] == kind).filter_map(|b| b[field].as_str()).collect()
}

/// Every `tool_use` of assistant message `i` answered at the start of the next message.
fn tool_uses_answered(assistant: &[Value], next: &[Value], i: usize) -> Result<(), String> {
    let uses = ids_of(assistant, "tool_use", "id");
    if uses.is_empty() {
        return Ok(());
    }
    let leading = next.iter().take_while(|b| b["type"] == "tool_result").count();
    if leading < uses.len() {
        return Err(format!(
            "messages.{}: Did not find {} `tool_result` block(s) at the beginning of this message. Messages following `tool_use` blocks must begin with a matching number of `tool_result` blocks.",
            i + 1,
            uses.len()
        ));
    }
    let answered = ids_of(&next[..leading], "tool_result", "tool_use_id");
    let missing: Vec<&str> = uses.iter().copied().filter(|id| !answered.contains(id)).collect();
    if !missing.is_empty() {
        return Err(format!(
            "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
            missing.join(", ")
        ));
    }
    Ok(())
}

/// Every `tool_result` of message `i` answers a `tool_use` of the message before.
fn tool_results_answer(messages: &[Value], i: usize) -> Result<(), String> {
    let blocks = blocks_of(&messages[i]);
    let asked = if i == 0 { Vec::new() } else { blocks_of(&messages[i - 1]) };
    let asked = ids_of(&asked, "tool_use", "id");
    for (j, block) in blocks.iter().enumerate().filter(|(_, b)| b["type"] == "tool_result") {
        let id = block["tool_use_id"].as_str().unwrap_or_default();
        if !asked.contains(&id) {
            return Err(format!(
                "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
            ));
        }
    }
    Ok(())
}

/// An image block whose base64 bytes are of the media type it names.
fn image(block: &Value, at: &str) -> Result<(), String> {
    let source = &block["source"];
    if source["type"] != "base64" {
        return Ok(());
    }
    let named = source["media_type"].as_str().unwrap_or_default();
    if !IMAGE_TYPES.contains(&named) {
        return Err(format!("{at}.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"));
    }
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(source["data"].as_str().unwrap_or_default()) else {
        return Err(format!("{at}.image.source.base64: invalid base64 data"));
    };
    match sniff(&bytes) {
        Some(found) if found == named => Ok(()),
        Some(found) => Err(format!(
            "{at}.image.source.base64.data: The image was specified using the {named} media type, but the image appears to be a {found} image"
        )),
        None => Err(format!("{at}.image.source.base64.data: Could not process image")),
    }
}

/// The image type `bytes` begin as, by their magic numbers.
fn sniff(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', ..] => Some("image/png"),
        [0xFF, 0xD8, 0xFF, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', ..] => Some("image/gif"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(messages: Value) -> Value {
        json!({ "model": "claude", "max_tokens": 64, "messages": messages })
    }

    fn refused(messages: Value) -> String {
        check(&body(messages)).expect_err("refused")
    }

    #[test]
    fn anthropic_a_tool_round_answered_in_the_next_message_is_valid() {
        let ok = json!([
            { "role": "user", "content": "read it" },
            { "role": "assistant", "content": [{ "type": "text", "text": "reading" }, { "type": "tool_use", "id": "t1", "name": "read_page", "input": {} }] },
            { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t1", "content": "page" }, { "type": "text", "text": "thanks" }] },
            { "role": "assistant", "content": "" },
        ]);
        assert_eq!(check(&body(ok)), Ok(()));
    }

    #[test]
    fn anthropic_the_structures_anthropic_refuses_are_refused_with_its_words() {
        let use_ = json!({ "type": "tool_use", "id": "t1", "name": "read_page", "input": {} });
        let result = json!({ "type": "tool_result", "tool_use_id": "t1", "content": "page" });
        assert!(refused(json!([{ "role": "assistant", "content": "hi" }])).contains("first message"));
        assert!(refused(json!([{ "role": "system", "content": "hi" }])).contains("'user' or 'assistant'"));
        assert!(refused(json!([{ "role": "user", "content": "" }, { "role": "assistant", "content": "x" }])).contains("non-empty content"));
        assert!(
            refused(json!([{ "role": "user", "content": [{ "type": "text", "text": "" }] }]))
                .contains("text content blocks must be non-empty")
        );
        // A history whose tool result went (a deleted or forgotten message) leaves its use unanswered.
        let unanswered = refused(json!([
            { "role": "user", "content": "a" }, { "role": "assistant", "content": [use_.clone()] }, { "role": "user", "content": "b" }
        ]));
        assert!(unanswered.contains("Did not find 1 `tool_result` block(s)"), "{unanswered}");
        let text_first = refused(json!([
            { "role": "user", "content": "a" }, { "role": "assistant", "content": [use_.clone()] },
            { "role": "user", "content": [{ "type": "text", "text": "b" }, result.clone()] }
        ]));
        assert!(text_first.starts_with("messages.2: Did not find"), "{text_first}");
        let orphan = refused(
            json!([{ "role": "user", "content": "a" }, { "role": "assistant", "content": "x" }, { "role": "user", "content": [result] }]),
        );
        assert!(orphan.contains("unexpected `tool_use_id`"), "{orphan}");
        let png = base64::engine::general_purpose::STANDARD.encode([0x89, b'P', b'N', b'G', 0x0D, 0x0A]);
        let mislabelled = refused(json!([{ "role": "user", "content": [
            { "type": "image", "source": { "type": "base64", "media_type": "image/jpeg", "data": png } }
        ] }]));
        assert!(mislabelled.contains("appears to be a image/png image"), "{mislabelled}");
    }
}
