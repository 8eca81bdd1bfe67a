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

mod audio;
mod config;
mod engine;
mod error;
pub mod offline;
pub mod openai;

pub use audio::Audio;
pub use config::SpeechConfig;
pub use engine::{SpeechToText, TextToSpeech};
pub use error::SpeechError;

use std::sync::Arc;

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
