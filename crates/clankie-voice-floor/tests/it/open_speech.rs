//! `open_speech_`: open speech, no grammar anywhere, through the local speech service (Whisper
//! tiny.en to hear, Piper to speak).

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::{Family, v1};
use clankie_speech::SpeechToText as _;

use super::{Rig, VOICE, live_room_on, piper_clip, speech, until, word_errors};

/// The test's own sentences: everyday English, no names, no numbers.
const SENTENCES: [&str; 20] = [
    "The weather was warm enough to eat outside on the terrace.",
    "Please bring some water and a loaf of bread.",
    "My brother moved to a small town near the mountains last year.",
    "We should leave before the traffic gets too heavy.",
    "The library closes early on Saturdays.",
    "She painted the kitchen a bright shade of yellow.",
    "I forgot my umbrella on the train this morning.",
    "The children built a castle out of sand and shells.",
    "Could you turn the music down a little, please?",
    "Our friends have a dog that barks at the mailman.",
    "The soup needs more salt and a little pepper.",
    "He fixed the old bicycle with a new chain.",
    "Let's meet at the station after work.",
    "The garden looks lovely now that the roses are out.",
    "I am reading a book about the history of the ocean.",
    "The coffee machine in the office is broken again.",
    "They watched the sunset from the top of the hill.",
    "Remember to water the plants while I am away.",
    "The museum has a new exhibition about ancient maps.",
    "We cooked dinner together and talked for hours.",
];

/// Sentences said: 20 in the long mode (`CLANKIE_VOICE_CLIPS=20`), 5 in CI.
fn clips() -> usize {
    super::voice_clips(SENTENCES.len())
}

#[tokio::test]
async fn open_speech_sentences_said_aloud_reach_the_floor_with_a_word_error_rate_under_10_percent() {
    let speech = speech().await;
    let rig = Rig::new().await;
    let _floor = live_room_on(&rig, &speech).await;
    let transcripts = clankie_testkit::record::<v1::Transcript>(&rig.bus, Family::VoiceTranscript).await;
    let (mut errors, mut words) = (0, 0);
    for (n, sentence) in SENTENCES.iter().take(clips()).enumerate() {
        let (pcm, rate) = piper_clip(&speech, sentence).await;
        rig.discord.voice_speak(VOICE, "ada", &pcm, rate).await.unwrap();
        until("its transcript", Duration::from_secs(30), || transcripts.all().len() > n).await;
        let heard = &transcripts.all()[n];
        let (wrong, of) = word_errors(sentence, &heard.text);
        println!("open_speech: sentence {n}: {wrong} of {of} words wrong");
        (errors, words) = (errors + wrong, words + of);
    }
    let wer = errors as f64 / words as f64;
    println!("open_speech: {} sentences, {errors} word errors in {words} words: WER {:.1}%", clips(), wer * 100.0);
    assert_eq!(transcripts.all().len(), clips(), "a sentence was heard as two");
    assert!(wer <= 0.10, "WER {:.1}% over the set", wer * 100.0);
}

#[tokio::test]
async fn open_speech_the_spoken_round_trip_is_heard_answered_and_his_answer_transcribes_back() {
    let speech = speech().await;
    let rig = Rig::new().await;
    let answer = "I made a big pot of vegetable soup with fresh bread from the market.";
    rig.standin.script(Script::when("spoken aloud", Reply::text(answer)));
    let _floor = live_room_on(&rig, &speech).await;
    let asked_at = clankie_bus::now_ms();
    let (pcm, rate) = piper_clip(&speech, "Clankie, what did you cook for dinner yesterday?").await;
    rig.discord.voice_speak(VOICE, "ada", &pcm, rate).await.unwrap();
    // He answers aloud: his audio at the loopback, after the question.
    let his = || rig.discord.voice().heard(VOICE).into_iter().find(|s| s.start_ms > asked_at);
    until("his answer aloud", Duration::from_secs(30), || his().is_some_and(|s| s.end_ms > 0 && s.duration_ms() > 1_000)).await;
    // The segment is whole once the loopback has heard the end of it.
    until("the end of his answer", Duration::from_secs(30), || rig.receipts("voice.playback").iter().any(|r| super::has_code(r, "played")))
        .await;
    // The answer was to the question as Whisper heard it: the persona's request holds its words.
    let asked = rig.standin.requests().into_iter().find(|r| r.all_text().contains("spoken aloud")).expect("a voice persona request");
    let heard = asked.all_text().to_lowercase();
    let missing: Vec<&str> = ["cook", "dinner", "yesterday"].into_iter().filter(|w| !heard.contains(w)).collect();
    assert!(missing.is_empty(), "the persona's request lacks the question's words {missing:?}");
    let spoken = his().expect("his answer");
    let whisper = clankie_speech::openai::OpenAiTranscriber::new(&speech.base_url(), "whisper", None, Duration::from_secs(30)).unwrap();
    let back = whisper.transcribe(&clankie_speech::Audio { pcm: spoken.pcm.clone(), rate: spoken.rate }).await.unwrap();
    let (wrong, of) = word_errors(answer, &back);
    println!("open_speech: his answer ({} ms of audio) transcribed back with {wrong} of {of} words wrong", spoken.duration_ms());
    assert!(wrong as f64 / of as f64 <= 0.10, "his answer came back as {back:?}");
}
