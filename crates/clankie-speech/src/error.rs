//! Why an engine gave nothing, with a content-free code for receipts. Shared by every engine,
//! so it lives apart from the crate root that wires them.

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
