//! Decoding events to proto3 JSON, so nobody reads raw protobuf.

use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, DynamicMessage};

use crate::Subject;

static POOL: LazyLock<Result<DescriptorPool, String>> =
    LazyLock::new(|| DescriptorPool::decode(crate::DESCRIPTOR_SET).map_err(|e| e.to_string()));

/// Why an event could not be shown as JSON.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    #[error("the embedded descriptor set is unreadable: {0}")]
    Descriptor(String),
    #[error("no message named {0} in clankie.v1")]
    UnknownType(String),
    #[error("payload is not a valid {type_name}: {source}")]
    Decode { type_name: &'static str, source: prost::DecodeError },
    #[error("could not render JSON: {0}")]
    Render(#[from] serde_json::Error),
}

/// Decodes `payload` as the message `type_name` (fully qualified) into proto3 JSON.
pub fn decode_named(type_name: &'static str, payload: &[u8]) -> Result<serde_json::Value, JsonError> {
    let pool = POOL.as_ref().map_err(|e| JsonError::Descriptor(e.clone()))?;
    let desc = pool.get_message_by_name(type_name).ok_or_else(|| JsonError::UnknownType(type_name.to_owned()))?;
    let msg = DynamicMessage::decode(desc, payload).map_err(|source| JsonError::Decode { type_name, source })?;
    let mut json = serde_json::to_value(&msg)?;
    redact(&mut json);
    Ok(json)
}

/// Credentials carried by events (a voice server's token) never reach a tap or a trail.
fn redact(json: &mut serde_json::Value) {
    if let Some(object) = json.as_object_mut() {
        for (key, value) in object.iter_mut() {
            if key == "token" {
                *value = serde_json::Value::String("(redacted)".into());
            } else {
                redact(value);
            }
        }
    }
}

/// Decodes the payload a subject carries into proto3 JSON.
pub fn decode(subject: &Subject, payload: &[u8]) -> Result<serde_json::Value, JsonError> {
    decode_named(subject.family().payload(), payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Family, v1};

    #[test]
    fn every_family_payload_is_in_the_descriptor_set() {
        for family in Family::ALL {
            decode_named(family.payload(), &[]).unwrap_or_else(|e| panic!("{family:?}: {e}"));
        }
    }

    #[test]
    fn enums_render_by_name() {
        let outcome = v1::DeliveryOutcome { delivery_id: "42".into(), kind: v1::OutcomeKind::Absorbed as i32, ..Default::default() };
        let json =
            decode(&Subject::LaneOutcome { lane: crate::LaneKey::Dm { channel: 1 } }, &prost::Message::encode_to_vec(&outcome)).unwrap();
        assert_eq!(json["kind"], "OUTCOME_KIND_ABSORBED");
        assert_eq!(json["deliveryId"], "42");
    }

    #[test]
    fn a_voice_server_token_is_redacted() {
        let server = v1::VoiceServer { guild_id: 1, endpoint: Some("127.0.0.1:9".into()), token: "s3cr3t".into(), at_ms: 0 };
        let json = decode(&Subject::VoiceServer { guild: 1 }, &prost::Message::encode_to_vec(&server)).unwrap();
        assert_eq!(json["token"], "(redacted)");
        assert!(!json.to_string().contains("s3cr3t"));
        assert_eq!(json["endpoint"], "127.0.0.1:9");
    }

    #[test]
    fn garbage_is_a_decode_error() {
        let err = decode(&Subject::BodySend { channel: 1 }, &[0xff, 0xff, 0xff]).unwrap_err();
        assert!(matches!(err, JsonError::Decode { .. }), "{err}");
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn cases() -> u32 {
            std::env::var("CLANKIE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
        }

        /// Every typed decoder the services use, on the same bytes.
        fn decode_typed(bytes: &[u8]) {
            macro_rules! each {
                ($($t:ty),* $(,)?) => { $( let _ = <$t as prost::Message>::decode(bytes); )* };
            }
            each!(
                v1::Ingress,
                v1::RoomInput,
                v1::Steer,
                v1::DeliveryOutcome,
                v1::TypingAction,
                v1::OutboundMessage,
                v1::VoiceSession,
                v1::Transcript,
                v1::FloorDecision,
                v1::Receipt,
                v1::Experience,
                v1::TypingSignal,
                v1::HistoryRequest,
                v1::HistoryReply,
                v1::Speak,
                v1::AskRequest,
                v1::AskReply,
                v1::MediaResolveRequest,
                v1::MediaResolveReply,
                v1::MediaAttachmentRequest,
                v1::MediaRegisterRequest,
                v1::MediaRegisterReply,
                v1::MediaForgetRequest,
                v1::MediaForgetReply,
                v1::CommandRequest,
                v1::CommandReply,
            );
        }

        /// Random bytes, and real messages with a few bytes changed (which reach deeper into the decoders).
        fn payloads() -> impl Strategy<Value = Vec<u8>> {
            let mutated = (any::<String>(), any::<u64>(), proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)).prop_map(
                |(text, id, edits)| {
                    let msg = v1::Ingress {
                        delivery_id: id.to_string(),
                        content: text.clone(),
                        author_name: text,
                        guild_id: Some(id),
                        attachments: vec![v1::Attachment { id, filename: "a.png".into(), ..Default::default() }],
                        ..Default::default()
                    };
                    let mut bytes = prost::Message::encode_to_vec(&msg);
                    for (at, b) in edits {
                        if !bytes.is_empty() {
                            let n = bytes.len();
                            bytes[at % n] = b;
                        }
                    }
                    bytes
                },
            );
            // A voice server's token, as sent or with one byte changed: redaction must hold for
            // whatever still decodes.
            let server = (proptest::collection::vec((any::<usize>(), any::<u8>()), 0..2)).prop_map(|edits| {
                let msg = v1::VoiceServer { guild_id: 7, endpoint: Some("127.0.0.1:9".into()), token: SECRET.into(), at_ms: 1 };
                let mut bytes = prost::Message::encode_to_vec(&msg);
                for (at, b) in edits {
                    let n = bytes.len();
                    bytes[at % n] = b;
                }
                bytes
            });
            // Random bytes mostly fail at the wire format; changed messages get past it.
            prop_oneof![1 => proptest::collection::vec(any::<u8>(), 0..512), 1 => mutated, 4 => server]
        }

        const SECRET: &str = "s3cr3t-voice-token";

        /// Whether every `token` in `json` is redacted.
        fn redacted(json: &serde_json::Value) -> bool {
            match json {
                serde_json::Value::Object(map) => map.iter().all(|(k, v)| if k == "token" { v == "(redacted)" } else { redacted(v) }),
                serde_json::Value::Array(items) => items.iter().all(redacted),
                _ => true,
            }
        }

        #[test]
        fn fuzz_decode_named_renders_what_decodes_with_every_token_redacted() {
            let (reached, tokens) = (std::sync::atomic::AtomicU32::new(0), std::sync::atomic::AtomicU32::new(0));
            let config = ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() };
            let outcome = proptest::test_runner::TestRunner::new(config).run(&payloads(), |bytes| {
                let mut decoded = false;
                for family in Family::ALL {
                    let Ok(json) = decode_named(family.payload(), &bytes) else { continue };
                    decoded = true;
                    prop_assert!(redacted(&json), "{:?} left a token: {json}", family);
                    if family == Family::VoiceServer && json.get("token").is_some() {
                        tokens.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                if decoded {
                    reached.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            });
            if let Err(e) = outcome {
                panic!("{e}");
            }
            let (reached, tokens) = (reached.into_inner(), tokens.into_inner());
            println!("fuzz_decode_named: {reached} of {} cases decoded as some event, {tokens} with a voice token", cases());
            assert!(reached * 2 >= cases(), "only {reached} of {} cases reached the property", cases());
            assert!(tokens > 0, "no case carried a token to redact");
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

            #[test]
            fn fuzz_every_clankie_v1_decoder_refuses_or_reads_arbitrary_bytes(bytes in payloads()) {
                decode_typed(&bytes);
                let pool = POOL.as_ref().unwrap();
                for desc in pool.all_messages() {
                    if let Ok(msg) = DynamicMessage::decode(desc, bytes.as_slice()) {
                        // What decodes must also render for a tap.
                        prop_assert!(serde_json::to_value(&msg).is_ok());
                    }
                }
            }
        }
    }
}
