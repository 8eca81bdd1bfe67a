//! The two engine traits, [`SpeechToText`] and [`TextToSpeech`], that the OpenAI and offline
//! engines implement; apart from the crate root so the engines need not import it.

use crate::audio::Audio;
use crate::error::SpeechError;

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
