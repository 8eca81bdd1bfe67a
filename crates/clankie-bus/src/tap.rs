//! Rendering bus traffic as JSON lines, for `clankie tap` and trails.

use std::time::{SystemTime, UNIX_EPOCH};

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
            Err(e) => json!({ "subject": subject, "time": time, "type": parsed.family().payload(), "error": e.to_string(), "bytes": payload.len() }),
        },
    }
}

/// Formats a time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Howard Hinnant's days-to-civil conversion.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_millis(1_795_999_999_123)), "2026-11-30T00:53:19.123Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn strangers_render_as_errors_not_panics() {
        let v = render("elsewhere.x", b"\xff", UNIX_EPOCH);
        assert!(v["error"].is_string());
        let v = render(&Subject::BodySend { channel: 1 }.to_string(), b"\xff\xff", UNIX_EPOCH);
        assert_eq!(v["type"], "clankie.v1.OutboundMessage");
        assert!(v["error"].is_string());
    }
}
