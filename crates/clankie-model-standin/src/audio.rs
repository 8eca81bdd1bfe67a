//! The OpenAI audio routes, served by wrapping the offline engines, so tests drive the real
//! speech clients: `POST /v1/audio/transcriptions` (multipart WAV → `{"text"}`, pocketsphinx with
//! the grammar set by `POST /control/audio/grammar`) and `POST /v1/audio/speech` (→ WAV,
//! espeak-ng). `POST /control/audio/script` queues a failure for the next request of a route.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use clankie_speech::offline::{Espeak, Pocketsphinx};
use clankie_speech::{Audio, SpeechToText, TextToSpeech};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Which audio route a scripted reply is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AudioRoute {
    Transcriptions,
    Speech,
}

/// How the next request of a route is answered instead of by the engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AudioReply {
    /// An error status, such as 400 or 503.
    Status { status: u16 },
    /// Nothing for this long, then the engine's answer (a client with a shorter timeout gives up).
    Delay { ms: u64 },
    /// 200 with an empty body.
    Empty,
}

/// One queued audio reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AudioScript {
    pub route: AudioRoute,
    pub reply: AudioReply,
}

#[derive(Default)]
struct Inner {
    scripts: Vec<AudioScript>,
    /// The transcriber, made once: with the grammar file once phrases are set (pocketsphinx
    /// reads the file at each transcription, so new phrases need no new engine).
    engine: Option<Arc<Pocketsphinx>>,
    grammar_file: Option<std::path::PathBuf>,
    transcriptions: u64,
    speeches: u64,
}

/// The audio routes' state.
#[derive(Clone, Default)]
pub struct AudioShared(Arc<Mutex<Inner>>);

impl AudioShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a reply for the next request of its route.
    pub fn script(&self, script: AudioScript) {
        self.lock().scripts.push(script);
    }

    /// The phrases transcription may recognise (a JSGF grammar is made of them).
    pub fn set_phrases(&self, phrases: &[&str]) {
        static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut inner = self.lock();
        let file = inner.grammar_file.get_or_insert_with(|| {
            let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::env::temp_dir().join(format!("clankie-standin-grammar-{}-{n}.gram", std::process::id()))
        });
        if std::fs::write(&*file, clankie_speech::offline::grammar(phrases)).is_ok() {
            inner.engine = None;
        }
    }

    /// The transcriber, made on first use.
    fn engine(&self) -> Option<Arc<Pocketsphinx>> {
        let mut inner = self.lock();
        if inner.engine.is_none() {
            let engine =
                Pocketsphinx::new(inner.grammar_file.clone(), &clankie_speech::offline::his_names(), Duration::from_secs(30)).ok()?;
            inner.engine = Some(Arc::new(engine));
        }
        inner.engine.clone()
    }

    /// How many (transcriptions, speeches) were asked for.
    pub fn counts(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.transcriptions, inner.speeches)
    }

    fn take(&self, route: AudioRoute) -> Option<AudioReply> {
        let mut inner = self.lock();
        match route {
            AudioRoute::Transcriptions => inner.transcriptions += 1,
            AudioRoute::Speech => inner.speeches += 1,
        }
        let i = inner.scripts.iter().position(|s| s.route == route)?;
        Some(inner.scripts.remove(i).reply)
    }
}

pub(crate) fn routes(shared: AudioShared) -> Router {
    Router::new()
        .route("/v1/audio/transcriptions", post(transcriptions))
        .route("/v1/audio/speech", post(speech))
        .route("/control/audio/script", post(add_script))
        .route("/control/audio/grammar", post(set_grammar))
        .with_state(shared)
}

async fn add_script(State(shared): State<AudioShared>, axum::Json(script): axum::Json<AudioScript>) -> StatusCode {
    shared.script(script);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct Phrases {
    phrases: Vec<String>,
}

async fn set_grammar(State(shared): State<AudioShared>, axum::Json(p): axum::Json<Phrases>) -> StatusCode {
    let phrases: Vec<&str> = p.phrases.iter().map(String::as_str).collect();
    shared.set_phrases(&phrases);
    StatusCode::NO_CONTENT
}

fn error(status: u16) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(json!({ "error": { "message": "scripted audio failure", "type": "server_error" } }))).into_response()
}

/// Applies a scripted reply; `None` means answer with the engine.
async fn scripted(reply: Option<AudioReply>) -> Option<Response> {
    match reply? {
        AudioReply::Status { status } => Some(error(status)),
        AudioReply::Empty => Some(StatusCode::OK.into_response()),
        AudioReply::Delay { ms } => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            None
        }
    }
}

/// The `file` part of a multipart/form-data body.
fn file_part<'a>(headers: &HeaderMap, body: &'a [u8]) -> Option<&'a [u8]> {
    let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let boundary = content_type.split("boundary=").nth(1)?.trim_matches('"');
    let delimiter = format!("--{boundary}");
    let mut rest = body;
    while let Some(start) = find(rest, delimiter.as_bytes()) {
        rest = &rest[start + delimiter.len()..];
        let headers_end = find(rest, b"\r\n\r\n")?;
        let part_headers = String::from_utf8_lossy(&rest[..headers_end]).to_lowercase();
        let content = &rest[headers_end + 4..];
        let end = find(content, format!("\r\n{delimiter}").as_bytes())?;
        if part_headers.contains("name=\"file\"") {
            return Some(&content[..end]);
        }
        rest = &content[end..];
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn transcriptions(State(shared): State<AudioShared>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(response) = scripted(shared.take(AudioRoute::Transcriptions)).await {
        return response;
    }
    let Some(wav) = file_part(&headers, &body) else { return error(400) };
    let Ok(audio) = Audio::from_wav(wav) else { return error(400) };
    let Some(engine) = shared.engine() else { return error(500) };
    match engine.transcribe(&audio).await {
        Ok(text) => axum::Json(json!({ "text": text })).into_response(),
        Err(_) => error(500),
    }
}

async fn speech(State(shared): State<AudioShared>, body: Bytes) -> Response {
    if let Some(response) = scripted(shared.take(AudioRoute::Speech)).await {
        return response;
    }
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(&body) else { return error(400) };
    let Some(input) = request["input"].as_str() else { return error(400) };
    match Espeak::new(Duration::from_secs(30)).synthesize(input).await {
        Ok(audio) => ([(header::CONTENT_TYPE, "audio/wav")], audio.wav()).into_response(),
        Err(_) => error(500),
    }
}
