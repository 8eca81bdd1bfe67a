//! The OpenAI audio API: transcriptions and speech.

use std::time::Duration;

use crate::audio::Audio;
use crate::engine::{SpeechToText, TextToSpeech};
use crate::error::SpeechError;

fn client(timeout: Duration) -> Result<reqwest::Client, SpeechError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(timeout).build().map_err(|e| SpeechError::Engine(format!("http client: {e}")))
}

fn classify(e: reqwest::Error) -> SpeechError {
    if e.is_timeout() {
        SpeechError::Timeout
    } else if let Some(status) = e.status() {
        SpeechError::Status(status.as_u16())
    } else if e.is_decode() || e.is_body() {
        SpeechError::BadAudio
    } else {
        SpeechError::Unreachable
    }
}

fn endpoint(base: &str, path: &str) -> String {
    format!("{}/{path}", base.trim_end_matches('/'))
}

/// `POST {base}/audio/transcriptions`.
pub struct OpenAiTranscriber {
    http: reqwest::Client,
    url: String,
    model: String,
    key: Option<String>,
    prompt: Option<String>,
}

impl OpenAiTranscriber {
    pub fn new(base: &str, model: &str, key: Option<String>, timeout: Duration) -> Result<OpenAiTranscriber, SpeechError> {
        Ok(OpenAiTranscriber {
            http: client(timeout)?,
            url: endpoint(base, "audio/transcriptions"),
            model: model.to_owned(),
            key,
            prompt: None,
        })
    }

    /// Sends `prompt` (the API's own field) with every utterance: Whisper spells the words it
    /// holds (his names) as they are written there.
    pub fn with_prompt(mut self, prompt: Option<String>) -> OpenAiTranscriber {
        self.prompt = prompt.filter(|p| !p.trim().is_empty());
        self
    }
}

/// A multipart/form-data body with the model, `response_format=json`, the prompt if any, and the WAV file.
fn multipart(model: &str, prompt: Option<&str>, wav: &[u8]) -> (String, Vec<u8>) {
    let boundary = format!(
        "clankie-{:016x}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
    );
    let mut body = Vec::with_capacity(wav.len() + 512);
    for (name, value) in [("model", Some(model)), ("response_format", Some("json")), ("prompt", prompt)] {
        let Some(value) = value else { continue };
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes());
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"utterance.wav\"\r\nContent-Type: audio/wav\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(wav);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[async_trait::async_trait]
impl SpeechToText for OpenAiTranscriber {
    async fn transcribe(&self, audio: &Audio) -> Result<String, SpeechError> {
        if audio.pcm.is_empty() {
            return Err(SpeechError::EmptyAudio);
        }
        let (content_type, body) = multipart(&self.model, self.prompt.as_deref(), &audio.wav());
        let mut request = self.http.post(&self.url).header("content-type", content_type).body(body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(classify)?.error_for_status().map_err(classify)?;
        let json: serde_json::Value = response.json().await.map_err(classify)?;
        json["text"].as_str().map(str::to_owned).ok_or(SpeechError::BadAudio)
    }

    fn describe(&self) -> String {
        format!("openai-compatible transcriptions, model {}", self.model)
    }
}

/// `POST {base}/audio/speech`, asking for WAV.
pub struct OpenAiSpeaker {
    http: reqwest::Client,
    url: String,
    model: String,
    voice: String,
    key: Option<String>,
}

impl OpenAiSpeaker {
    pub fn new(base: &str, model: &str, voice: &str, key: Option<String>, timeout: Duration) -> Result<OpenAiSpeaker, SpeechError> {
        Ok(OpenAiSpeaker {
            http: client(timeout)?,
            url: endpoint(base, "audio/speech"),
            model: model.to_owned(),
            voice: voice.to_owned(),
            key,
        })
    }
}

#[async_trait::async_trait]
impl TextToSpeech for OpenAiSpeaker {
    async fn synthesize(&self, text: &str) -> Result<Audio, SpeechError> {
        let body = serde_json::json!({ "model": self.model, "input": text, "voice": self.voice, "response_format": "wav" });
        let mut request = self.http.post(&self.url).json(&body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(classify)?.error_for_status().map_err(classify)?;
        let bytes = response.bytes().await.map_err(classify)?;
        if bytes.is_empty() {
            return Err(SpeechError::EmptyAudio);
        }
        let audio = Audio::from_wav(&bytes)?;
        if audio.pcm.is_empty() {
            return Err(SpeechError::EmptyAudio);
        }
        Ok(audio)
    }

    fn describe(&self) -> String {
        format!("openai-compatible speech, model {}, voice {}", self.model, self.voice)
    }
}

/// `POST {base}/turn` with the turn so far as WAV, answering `{"complete": bool}`: the local
/// speech service's Smart Turn (not part of OpenAI's API; the same client and failure codes).
pub struct HttpTurnDetector {
    http: reqwest::Client,
    url: String,
}

impl HttpTurnDetector {
    pub fn new(base: &str, timeout: Duration) -> Result<HttpTurnDetector, SpeechError> {
        Ok(HttpTurnDetector { http: client(timeout)?, url: endpoint(base, "turn") })
    }

    /// Whether the turn in `audio` sounds finished; `speaker` names whose turn it is, so the
    /// service keeps one early transcription per speaker.
    pub async fn finished(&self, audio: &Audio, speaker: Option<&str>) -> Result<bool, SpeechError> {
        if audio.pcm.is_empty() {
            return Err(SpeechError::EmptyAudio);
        }
        let mut request = self.http.post(&self.url).header("content-type", "audio/wav");
        if let Some(speaker) = speaker {
            request = request.header("x-clankie-speaker", speaker);
        }
        let response = request.body(audio.wav()).send().await.map_err(classify)?.error_for_status().map_err(classify)?;
        let json: serde_json::Value = response.json().await.map_err(classify)?;
        json["complete"].as_bool().ok_or(SpeechError::BadAudio)
    }
}
