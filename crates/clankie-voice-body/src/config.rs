//! The body's settings: how it connects, how it tells voice from noise and how it cuts speech into
//! turns, in one value that every stage reads.

use std::time::Duration;

/// How the body cuts speech.
#[derive(Debug, Clone, Copy)]
pub struct BodyConfig {
    /// Speech shorter than this is noise: it is not a segment (it stays as pre-roll).
    pub speech_start: Duration,
    /// A pause this long ends a segment, whatever the turn detector says: the silence bound.
    pub end_of_speech: Duration,
    /// A pause this long asks the turn detector (when there is one) whether the turn is over.
    pub turn_silence: Duration,
    /// Audio from just before a segment opened (noise too short to be speech) that it keeps.
    pub pre_roll: Duration,
    /// A person speaking this long raises [`BodyEvent::SpeechStarted`](crate::BodyEvent::SpeechStarted).
    pub barge_in: Duration,
    /// A segment is cut here even without a pause, so a monologue cannot grow without bound.
    pub longest_segment: Duration,
    /// How long a (re)connect may take before it fails.
    pub connect_timeout: Duration,
    /// The AEAD mode asked for (the voice server offers both `_rtpsize` modes; AES-GCM is Discord's preferred).
    pub crypto_mode: songbird::driver::CryptoMode,
    /// The voice activity detector's score (0–1) from which a packet counts as speech: Discord
    /// clients send whatever passes their noise gate, so a packet alone proves nothing.
    pub vad_threshold: f32,
    /// How much a speaker's loudness must vary (the standard deviation of 20 ms levels, in dB,
    /// over 400 ms) for voice to count: speech rises and falls with its syllables, while held
    /// tones, which the detector takes for voice, stay level.
    pub min_modulation_db: f32,
}

impl Default for BodyConfig {
    fn default() -> Self {
        BodyConfig {
            speech_start: Duration::from_millis(200),
            end_of_speech: Duration::from_millis(400),
            turn_silence: Duration::from_millis(200),
            pre_roll: Duration::from_millis(300),
            barge_in: Duration::from_millis(500),
            longest_segment: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(10),
            crypto_mode: songbird::driver::CryptoMode::Aes256Gcm,
            vad_threshold: 0.5,
            min_modulation_db: 1.5,
        }
    }
}
