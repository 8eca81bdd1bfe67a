//! Speech engines for the voice room: [`SpeechToText`] and [`TextToSpeech`].
//!
//! Production engines speak the OpenAI audio API ([`openai`]): `POST {base}/audio/transcriptions`
//! (multipart WAV → `{"text"}`) and `POST {base}/audio/speech` (`{model, input, voice,
//! response_format}` → audio), which speaches, Kokoro-FastAPI and LocalAI serve too. With none
//! configured, the offline engines ([`offline`]) run: espeak-ng speaks and pocketsphinx
//! transcribes. They are for rehearsal, not real rooms: open-vocabulary pocketsphinx cannot read
//! synthesized speech, so it is given a grammar of the phrases it may hear.
//!
//! Every failure has a content-free code ([`SpeechError::code`]) for receipts.

pub mod offline;
pub mod openai;

use std::sync::Arc;
use std::time::Duration;

/// Mono 16-bit PCM and its rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audio {
    pub pcm: Vec<i16>,
    pub rate: u32,
}

impl Audio {
    /// Its length.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.pcm.len() as f64 / f64::from(self.rate.max(1)))
    }

    /// A WAV file of it.
    pub fn wav(&self) -> Vec<u8> {
        clankie_pcm::wav(&self.pcm, self.rate)
    }

    /// Audio from a WAV file.
    pub fn from_wav(bytes: &[u8]) -> Result<Audio, SpeechError> {
        let (pcm, rate) = clankie_pcm::read_wav(bytes).map_err(|_| SpeechError::BadAudio)?;
        Ok(Audio { pcm, rate })
    }
}

/// Why an engine gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum SpeechError {
    #[error("the speech service answered {0}")]
    Status(u16),
    #[error("the speech service did not answer in time")]
    Timeout,
    #[error("the speech service could not be reached")]
    Unreachable,
    #[error("the engine gave no audio")]
    EmptyAudio,
    #[error("the audio could not be read")]
    BadAudio,
    #[error("the offline engine failed: {0}")]
    Engine(String),
}

impl SpeechError {
    /// A content-free code for receipts and logs.
    pub fn code(&self) -> &'static str {
        match self {
            SpeechError::Status(s) if (400..500).contains(s) => "speech_rejected_4xx",
            SpeechError::Status(_) => "speech_failed_5xx",
            SpeechError::Timeout => "speech_timeout",
            SpeechError::Unreachable => "speech_unreachable",
            SpeechError::EmptyAudio => "speech_empty_audio",
            SpeechError::BadAudio => "speech_bad_audio",
            SpeechError::Engine(_) => "speech_engine_failed",
        }
    }
}

/// Turns an utterance into words.
#[async_trait::async_trait]
pub trait SpeechToText: Send + Sync {
    /// The words said in `audio`; empty when nothing was recognised.
    async fn transcribe(&self, audio: &Audio) -> Result<String, SpeechError>;
    /// What the engine is, for logs (`openai`, `pocketsphinx (offline)`).
    fn describe(&self) -> String;
}

/// Turns words into audio.
#[async_trait::async_trait]
pub trait TextToSpeech: Send + Sync {
    /// `text` spoken aloud.
    async fn synthesize(&self, text: &str) -> Result<Audio, SpeechError>;
    /// What the engine is, for logs (`openai`, `espeak-ng (offline)`).
    fn describe(&self) -> String;
}

/// Where each engine is, from settings: a base URL makes the OpenAI-compatible client, none the
/// offline engine.
#[derive(Clone, Default)]
pub struct SpeechConfig {
    pub stt_base_url: Option<String>,
    pub stt_model: String,
    pub stt_api_key: Option<String>,
    /// A JSGF grammar for the offline transcriber: the phrases it may hear.
    pub stt_grammar: Option<std::path::PathBuf>,
    pub tts_base_url: Option<String>,
    pub tts_model: String,
    pub tts_voice: String,
    pub tts_api_key: Option<String>,
    /// The longest one request may take.
    pub timeout: Duration,
    /// Words the offline transcriber must know beyond its dictionary (his names), with phones.
    pub extra_words: Vec<(String, String)>,
}

impl std::fmt::Debug for SpeechConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys are credentials: only whether they are set is shown.
        f.debug_struct("SpeechConfig")
            .field("stt_base_url", &self.stt_base_url)
            .field("stt_model", &self.stt_model)
            .field("stt_api_key", &self.stt_api_key.as_ref().map(|_| "(set)"))
            .field("stt_grammar", &self.stt_grammar)
            .field("tts_base_url", &self.tts_base_url)
            .field("tts_model", &self.tts_model)
            .field("tts_voice", &self.tts_voice)
            .field("tts_api_key", &self.tts_api_key.as_ref().map(|_| "(set)"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The words the offline transcriber is taught (his names), as a transcription prompt:
/// "Clankie, Clanky."
fn names_prompt(words: &[(String, String)]) -> Option<String> {
    let mut names: Vec<String> = Vec::new();
    for (word, _) in words {
        let mut chars = word.chars();
        let Some(first) = chars.next() else { continue };
        let name = first.to_uppercase().chain(chars).collect::<String>();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    (!names.is_empty()).then(|| format!("{}.", names.join(", ")))
}

/// The engines `config` describes.
pub fn engines(config: &SpeechConfig) -> Result<(Arc<dyn SpeechToText>, Arc<dyn TextToSpeech>), SpeechError> {
    let stt: Arc<dyn SpeechToText> = match &config.stt_base_url {
        Some(base) => Arc::new(
            openai::OpenAiTranscriber::new(base, &config.stt_model, config.stt_api_key.clone(), config.timeout)?
                .with_prompt(names_prompt(&config.extra_words)),
        ),
        None => Arc::new(offline::Pocketsphinx::new(config.stt_grammar.clone(), &config.extra_words, config.timeout)?),
    };
    let tts: Arc<dyn TextToSpeech> = match &config.tts_base_url {
        Some(base) => {
            Arc::new(openai::OpenAiSpeaker::new(base, &config.tts_model, &config.tts_voice, config.tts_api_key.clone(), config.timeout)?)
        }
        None => Arc::new(offline::Espeak::new(config.timeout)),
    };
    tracing::info!(stt = %stt.describe(), tts = %tts.describe(), "speech engines");
    Ok((stt, tts))
}
