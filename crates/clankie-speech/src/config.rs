//! Where each engine is, from settings. Its own file so the settings' shape can be read apart
//! from the choice of engines the crate root makes from it.

use std::time::Duration;

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
