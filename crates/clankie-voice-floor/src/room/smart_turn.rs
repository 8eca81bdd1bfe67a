//! The end-of-turn detector a room's body asks whether a speaker has finished: the local speech
//! service's Smart Turn, behind the body's own detector trait.

use std::sync::Arc;
use std::time::Duration;

use clankie_speech::Audio;

/// The end-of-turn detector at `base` (the local speech service's Smart Turn). It must answer
/// within the silence bound to matter, so it gets two seconds at most.
pub(crate) fn turn_detector(base: &str) -> Result<Arc<dyn clankie_voice_body::TurnDetector>, clankie_speech::SpeechError> {
    Ok(Arc::new(SmartTurn(clankie_speech::openai::HttpTurnDetector::new(base, Duration::from_secs(2))?)))
}

struct SmartTurn(clankie_speech::openai::HttpTurnDetector);

#[async_trait::async_trait]
impl clankie_voice_body::TurnDetector for SmartTurn {
    async fn finished(&self, ssrc: u32, pcm: Vec<i16>) -> Result<bool, String> {
        let speaker = ssrc.to_string();
        self.0.finished(&Audio { pcm, rate: clankie_voice_body::HEARD_RATE }, Some(&speaker)).await.map_err(|e| e.code().to_owned())
    }
}
