//! The room's transcriber: takes utterances from the ears, transcribes a few at once, and
//! publishes each one's words as a room input in the order they were said.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clankie_bus::{Bus, MsgId, now_ms};
use clankie_proto::{Subject, v1};
use clankie_speech::SpeechToText;

use super::Key;
use super::ears::{Ears, Utterance};
use super::publisher::room_receipt;

/// A room's transcriber: at most `limit` utterances transcribed at once, and each one's words
/// enter the room in the order they were said, however long each took: a room input published
/// out of order would have the floor hear people out of order.
pub(super) async fn transcriber(bus: Bus, stt: Arc<dyn SpeechToText>, key: Key, limit: usize, heard: Ears) {
    use futures::StreamExt as _;
    use tracing::Instrument as _;
    let mut running = futures::stream::FuturesOrdered::new();
    loop {
        tokio::select! {
            next = heard.next(), if running.len() < limit.max(1) => {
                let Some(u) = next else { break };
                clankie_settings::fault::panic_once("voice.transcriber");
                let stt = stt.clone();
                // A stage of the spoken turn, until its words are published as a room input.
                let span = tracing::info_span!("voice.transcribe", delivery_id = %u.id);
                u.trace.parent(&span);
                running.push_back(
                    async move {
                        let began = Instant::now();
                        let result = stt.transcribe(&u.audio).await;
                        (u, result, began.elapsed(), tracing::Span::current())
                    }
                    .instrument(span),
                );
            }
            Some((u, result, took, span)) = running.next() => publish_heard(&bus, key, u, result, took).instrument(span).await,
            else => break,
        }
    }
    while let Some((u, result, took, span)) = running.next().await {
        publish_heard(&bus, key, u, result, took).instrument(span).await;
    }
}

/// An utterance's transcription: its receipt, then its words as a room input.
async fn publish_heard(bus: &Bus, key: Key, u: Utterance, result: Result<String, clankie_speech::SpeechError>, took: Duration) {
    let took_ms = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
    let code = match &result {
        Ok(text) if text.trim().is_empty() => "empty",
        Ok(_) => "transcribed",
        Err(e) => e.code(),
    };
    let chars = result.as_ref().map(|t| t.chars().count() as i64).unwrap_or(0);
    if let Err(e) = &result {
        metrics::counter!("clankie_speech_errors_total", "stage" => "transcribe", "code" => e.code()).increment(1);
    }
    room_receipt(bus, &u.id, "voice.transcribed", key, |r| {
        r.with_id("speaker", u.speaker).with_code(code).with_count("chars", chars).with_count("took_ms", took_ms)
    });
    let Ok(text) = result else { return };
    if text.trim().is_empty() {
        return;
    }
    let input = v1::RoomInput {
        delivery_id: u.id.clone(),
        guild_id: key.0,
        channel_id: key.1,
        author_id: u.speaker,
        author_name: u.author_name,
        source: v1::RoomInputSource::Speech as i32,
        text,
        received_at_ms: now_ms(),
        ..Default::default()
    };
    let id = MsgId::new(format!("speech:{}", u.id));
    if let Err(e) = bus.publish(&Subject::VoiceInput { guild: key.0, channel: key.1 }, &input, Some(&id)).await {
        tracing::warn!(error = %e, "an utterance's room input was not published");
    }
}
