//! How rooms are kept, read from settings: the keeper's configuration and its speech engines'.

use std::time::Duration;

use clankie_speech::SpeechConfig;
use clankie_voice_body::BodyConfig;

/// How rooms are kept.
#[derive(Debug, Clone)]
pub struct RoomConfig {
    /// The voice channels he may join, as (guild, channel).
    pub allow: Vec<(u64, u64)>,
    /// How long he stays after the last human left.
    pub grace: Duration,
    /// The room lease's time to live; renewed at a third of it.
    pub lease_ttl: Duration,
    /// This replica's name, the lease owner.
    pub replica: String,
    /// How the audio body cuts speech.
    pub body: BodyConfig,
    /// How long to wait for his voice state after asking for op 4 before asking again.
    pub rejoin_after: Duration,
    /// After a voice server refused him for want of DAVE (close 4017), how long the room is
    /// left alone before he tries it again.
    pub dave_refused_hold: Duration,
    /// The speech engines: OpenAI-compatible where configured, offline otherwise.
    pub speech: SpeechConfig,
    /// Utterances of one room transcribed at once.
    pub transcriptions: usize,
    /// The end-of-turn detector's base URL; turns end on the silence bound without one.
    pub turns: Option<String>,
}

impl RoomConfig {
    /// The keeper's configuration from settings.
    pub fn from_settings(settings: &clankie_settings::Settings) -> RoomConfig {
        RoomConfig {
            allow: settings.voice_rooms.clone(),
            grace: settings.voice_grace,
            lease_ttl: settings.voice_lease_ttl,
            replica: settings.replica_id.clone(),
            body: BodyConfig {
                speech_start: settings.voice_speech_start,
                end_of_speech: settings.voice_end_of_turn,
                turn_silence: settings.voice_turn_silence,
                pre_roll: settings.voice_pre_roll,
                longest_segment: settings.voice_max_utterance,
                barge_in: settings.barge_in,
                ..BodyConfig::default()
            },
            rejoin_after: Duration::from_secs(3),
            dave_refused_hold: settings.voice_dave_refused_hold,
            speech: speech_config(settings),
            transcriptions: settings.voice_transcriptions,
            turns: settings.turn_base_url.clone(),
        }
    }
}

/// The speech engines' configuration from settings; the offline transcriber learns his names.
pub fn speech_config(settings: &clankie_settings::Settings) -> SpeechConfig {
    SpeechConfig {
        stt_base_url: settings.stt_base_url.clone(),
        stt_model: settings.stt_model.clone(),
        stt_api_key: settings.stt_api_key.clone(),
        stt_grammar: settings.stt_grammar.clone(),
        tts_base_url: settings.tts_base_url.clone(),
        tts_model: settings.tts_model.clone(),
        tts_voice: settings.tts_voice.clone(),
        tts_api_key: settings.tts_api_key.clone(),
        timeout: settings.speech_timeout,
        extra_words: clankie_speech::offline::his_names(),
    }
}
