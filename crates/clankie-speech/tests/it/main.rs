//! `speech_engine`: the OpenAI audio clients against the stand-in's routes (which wrap the
//! offline engines), their failures, and the offline engines themselves.

use std::time::Duration;

use clankie_model_standin::StandIn;
use clankie_model_standin::audio::{AudioReply, AudioRoute, AudioScript};
use clankie_speech::offline::{Espeak, Pocketsphinx, grammar};
use clankie_speech::openai::{OpenAiSpeaker, OpenAiTranscriber};
use clankie_speech::{SpeechError, SpeechToText, TextToSpeech};

const PHRASES: [&str; 7] = [
    "Clankie, what is the capital of France",
    "Paris is the capital of France",
    "tell me a joke",
    "how is the weather today",
    "clankie play some music",
    "good morning everyone",
    "what time is it",
];

fn clients(standin: &StandIn, timeout: Duration) -> (OpenAiTranscriber, OpenAiSpeaker) {
    let base = standin.base_url();
    (
        OpenAiTranscriber::new(&base, "whisper-1", Some("stt-key".into()), timeout).unwrap(),
        OpenAiSpeaker::new(&base, "tts-1", "alloy", Some("tts-key".into()), timeout).unwrap(),
    )
}

#[tokio::test]
async fn speech_engine_openai_clients_speak_and_hear_through_the_standin() {
    let standin = StandIn::start().await.unwrap();
    standin.audio().set_phrases(&PHRASES);
    let (stt, tts) = clients(&standin, Duration::from_secs(20));
    let audio = tts.synthesize("Clankie, what is the capital of France").await.unwrap();
    assert!(audio.duration() > Duration::from_millis(1000), "{:?} of speech", audio.duration());
    let text = stt.transcribe(&audio).await.unwrap();
    assert_eq!(text, "clankie what is the capital of france");
    assert_eq!(standin.audio().counts(), (1, 1));
}

#[tokio::test]
async fn speech_engine_failures_each_have_a_code() {
    let standin = StandIn::start().await.unwrap();
    standin.audio().set_phrases(&PHRASES);
    let (stt, tts) = clients(&standin, Duration::from_millis(1500));
    let speech = Espeak::new(Duration::from_secs(10)).synthesize("good morning everyone").await.unwrap();
    let cases = [
        (AudioReply::Status { status: 400 }, "speech_rejected_4xx"),
        (AudioReply::Status { status: 503 }, "speech_failed_5xx"),
        (AudioReply::Delay { ms: 3_000 }, "speech_timeout"),
        (AudioReply::Empty, ""),
    ];
    for (reply, code) in cases {
        standin.audio().script(AudioScript { route: AudioRoute::Speech, reply: reply.clone() });
        let e = tts.synthesize("hello").await.unwrap_err();
        let expected = if code.is_empty() { "speech_empty_audio" } else { code };
        assert_eq!(e.code(), expected, "speech with {reply:?}: {e}");
        standin.audio().script(AudioScript { route: AudioRoute::Transcriptions, reply: reply.clone() });
        let e = stt.transcribe(&speech).await.unwrap_err();
        // An empty transcription body is not JSON with a text: the audio could not be read.
        let expected = if code.is_empty() { "speech_bad_audio" } else { code };
        assert_eq!(e.code(), expected, "transcription with {reply:?}: {e}");
    }
    // After every failure the engines work again.
    assert_eq!(stt.transcribe(&speech).await.unwrap(), "good morning everyone");
    assert!(matches!(stt.transcribe(&clankie_speech::Audio { pcm: vec![], rate: 16_000 }).await, Err(SpeechError::EmptyAudio)));
}

#[tokio::test]
async fn speech_engine_offline_needs_a_grammar_to_read_synthesized_speech() {
    let dir = std::env::temp_dir().join(format!("clankie-speech-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("room.gram");
    std::fs::write(&file, grammar(&PHRASES)).unwrap();
    let words = clankie_speech::offline::his_names();
    let tts = Espeak::new(Duration::from_secs(10));
    let with = Pocketsphinx::new(Some(file), &words, Duration::from_secs(20)).unwrap();
    let audio = tts.synthesize("Clankie, what is the capital of France").await.unwrap();
    assert_eq!(with.transcribe(&audio).await.unwrap(), "clankie what is the capital of france");
    let other = tts.synthesize("how is the weather today").await.unwrap();
    assert_eq!(with.transcribe(&other).await.unwrap(), "how is the weather today", "a distractor is told apart");
    assert!(with.describe().contains("offline"), "the offline engine says what it is");
    // The same engine with its open language model instead of a grammar does not read it.
    let without = Pocketsphinx::new(None, &words, Duration::from_secs(20)).unwrap();
    let open = without.transcribe(&audio).await.unwrap_or_default();
    println!("speech_engine offline without a grammar heard {open:?}");
    assert_ne!(open, "clankie what is the capital of france", "the grammar is what reads synthesized speech");
}
