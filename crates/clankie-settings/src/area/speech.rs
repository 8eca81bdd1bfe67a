//! Speech engines: transcription, synthesis, the turn detector, the local speech service.
use crate::setting::{Area, Kind, Service::*, Setting, Unit};

/// The `[speech]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(
        Area::Speech,
        "CLANKIE_STT_BASE_URL",
        Kind::Url,
        "unset: clankie run starts the local speech service (Whisper); a lone voice floor uses offline pocketsphinx (rehearsal only)",
        "An OpenAI-compatible audio API for transcription (`POST {base}/audio/transcriptions`): `clankie speech`'s, speaches or LocalAI.",
        &[VoiceFloor, Run, Cli],
    ),
    Setting::new(Area::Speech, "CLANKIE_STT_MODEL", Kind::Text, "whisper-1", "The transcription model asked for.", &[VoiceFloor, Run, Cli]),
    Setting::new(
        Area::Speech,
        "CLANKIE_STT_API_KEY",
        Kind::Text,
        "unset",
        "Bearer token for the transcription API. Never logged.",
        &[VoiceFloor, Run, Cli],
    )
    .secret(),
    Setting::new(
        Area::Speech,
        "CLANKIE_STT_GRAMMAR",
        Kind::Text,
        "unset",
        "A JSGF grammar of the phrases the offline transcriber may hear; without one, offline transcription of synthesized speech is noise.",
        &[VoiceFloor, Run, Cli],
    ),
    Setting::new(
        Area::Speech,
        "CLANKIE_TTS_BASE_URL",
        Kind::Url,
        "unset: clankie run starts the local speech service (Piper); a lone voice floor uses offline espeak-ng (rehearsal only)",
        "An OpenAI-compatible audio API for speech (`POST {base}/audio/speech`): `clankie speech`'s, Kokoro-FastAPI or LocalAI.",
        &[VoiceFloor, Run, Cli],
    ),
    Setting::new(Area::Speech, "CLANKIE_TTS_MODEL", Kind::Text, "tts-1", "The speech model asked for.", &[VoiceFloor, Run, Cli]),
    Setting::new(Area::Speech, "CLANKIE_TTS_VOICE", Kind::Text, "alloy", "The voice asked for.", &[VoiceFloor, Run, Cli]),
    Setting::new(
        Area::Speech,
        "CLANKIE_TTS_API_KEY",
        Kind::Text,
        "unset",
        "Bearer token for the speech API. Never logged.",
        &[VoiceFloor, Run, Cli],
    )
    .secret(),
    Setting::new(
        Area::Speech,
        "CLANKIE_SPEECH_TIMEOUT_MS",
        Kind::Duration(Unit::Millis),
        "15000",
        "The longest one transcription or synthesis may take before it fails.",
        &[VoiceFloor, Run],
    ),
    Setting::new(
        Area::Speech,
        "CLANKIE_TURN_BASE_URL",
        Kind::Url,
        "unset: turns end on the silence bound; clankie run uses the local speech service's Smart Turn",
        "An end-of-turn detector (`POST {base}/turn` with a WAV, answering `{\"complete\"}`), as `clankie speech` serves it.",
        &[VoiceFloor, Run, Cli],
    ),
    Setting::new(
        Area::Speech,
        "CLANKIE_SPEECH_HOST",
        Kind::Text,
        "127.0.0.1",
        "The address the local speech service (`deploy/speech/server.py`) listens on.",
        &[Speech],
    )
    .env_only(),
    Setting::new(Area::Speech, "CLANKIE_SPEECH_PORT", Kind::Count, "8788", "The port the local speech service listens on.", &[Speech])
        .env_only(),
    Setting::new(
        Area::Speech,
        "CLANKIE_SPEECH_WHISPER",
        Kind::Path,
        "unset: the pinned model",
        "A CTranslate2 Whisper model directory for the local speech service.",
        &[Speech],
    )
    .env_only(),
    Setting::new(
        Area::Speech,
        "CLANKIE_SPEECH_VOICE",
        Kind::Path,
        "unset: the pinned voice",
        "A Piper voice (.onnx with its .onnx.json) for the local speech service.",
        &[Speech],
    )
    .env_only(),
    Setting::new(
        Area::Speech,
        "CLANKIE_SPEECH_TURN",
        Kind::Path,
        "unset: the pinned model",
        "A Smart Turn ONNX model for the local speech service (`none`: no turn route).",
        &[Speech],
    )
    .env_only(),
    Setting::new(Area::Speech, "CLANKIE_SPEECH_THREADS", Kind::Count, "2", "CPU threads each speech engine uses.", &[Speech]).env_only(),
    Setting::new(
        Area::Speech,
        "CLANKIE_SPEECH_AUDIO_CONTEXT",
        Kind::Choice(&["short", "full"]),
        "short",
        "How much audio context Whisper keeps per utterance (`short` or `full`).",
        &[Speech],
    )
    .env_only(),
    Setting::new(
        Area::Speech,
        "CLANKIE_SPEECH_WORKERS",
        Kind::Count,
        "2",
        "Transcriptions the local speech service runs at once.",
        &[Speech],
    )
    .env_only(),
];
