//! Rendering bus traffic as JSON lines, for `clankie tap` and trails.

use std::time::SystemTime;

pub use clankie_proto::time::rfc3339;

use clankie_proto::Subject;
use serde_json::{Value, json};

/// One message as a JSON object: `subject`, `time` (RFC 3339, UTC), `type` and `event`,
/// or `error` with the payload size when the message is not a clankie event.
pub fn render(subject: &str, payload: &[u8], at: SystemTime) -> Value {
    let time = rfc3339(at);
    match Subject::parse(subject) {
        Err(e) => json!({ "subject": subject, "time": time, "error": e.to_string(), "bytes": payload.len() }),
        Ok(parsed) => match clankie_proto::json::decode(&parsed, payload) {
            Ok(event) => json!({ "subject": subject, "time": time, "type": parsed.family().payload(), "event": event }),
            Err(e) => {
                json!({ "subject": subject, "time": time, "type": parsed.family().payload(), "error": e.to_string(), "bytes": payload.len() })
            }
        },
    }
}

/// Whether `subject` is a NATS subject filter: dot-separated non-empty tokens without
/// whitespace, `*` standing for one token and `>` only last.
pub fn valid_filter(subject: &str) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    !subject.is_empty()
        && tokens.iter().enumerate().all(|(i, t)| {
            !t.is_empty()
                && !t.chars().any(char::is_whitespace)
                && (*t != ">" || i == tokens.len() - 1)
                && (!t.contains(['*', '>']) || t.len() == 1)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn strangers_render_as_errors_not_panics() {
        let v = render("elsewhere.x", b"\xff", UNIX_EPOCH);
        assert!(v["error"].is_string());
        let v = render(&Subject::BodySend { channel: 1 }.to_string(), b"\xff\xff", UNIX_EPOCH);
        assert_eq!(v["type"], "clankie.v1.OutboundMessage");
        assert!(v["error"].is_string());
    }
}
