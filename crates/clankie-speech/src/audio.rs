//! The audio every engine takes and gives: mono 16-bit PCM with its rate. Its own file so the
//! engines import it without going through the crate root that wires them.

use std::time::Duration;

use crate::error::SpeechError;

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
