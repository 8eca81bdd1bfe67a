//! The voice parts: his first audio after a question and how fast he stops when spoken over,
//! on the local speech service or the offline engines, with DAVE and passthrough; and the
//! speech service's own pace.

use std::time::{Duration, Instant};

use anyhow::Result;
use clankie_model_standin::{Reply, Script};
use clankie_sandbox::rig::Rig;

use clankie_bench::figures::percentile;

/// `voice`: the speech service's pace, then a voice run with DAVE and one in passthrough.
pub(crate) async fn report() -> Result<()> {
    let speech =
        tokio::task::spawn_blocking(|| clankie_stack::SpeechServer::start(&Default::default(), &mut |m| eprintln!("{m}"))).await??;
    let (tts_rtf, stt_rtf, decisions) = speech_pace(&speech).await?;
    println!("tts_rtf: {tts_rtf:.3}");
    println!("stt_rtf: {stt_rtf:.3}");
    println!("turn_decision_ms_p50: {:.0}", percentile(&decisions, 0.50));
    print_voice("voice", voice(20, 10, Some(&speech), true).await?);
    print_voice("voice_passthrough", voice(20, 10, Some(&speech), false).await?);
    Ok(())
}

/// `voice-offline`, named only: the same runs on the offline engines.
pub(crate) async fn report_offline() -> Result<()> {
    print_voice("voice_offline", voice(20, 10, None, true).await?);
    print_voice("voice_offline_passthrough", voice(20, 10, None, false).await?);
    Ok(())
}

/// The voice part's state directory: its embedded audio body trusts the loopback's voice CA,
/// written there, through `SSL_CERT_FILE`, which must be set before any thread exists.
pub(crate) fn voice_state() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("clankie-bench-voice-{}", std::process::id()))
}

/// Phrases the offline transcriber may hear in the voice part.
const VOICE_PHRASES: [&str; 7] = [
    "Clankie, what time is it",
    "Clankie, tell me a long story",
    "good morning everyone",
    "tell me a joke",
    "how is the weather today",
    "the train leaves at nine",
    "clankie play some music",
];

/// Prints a voice run's first-audio and barge-in percentiles under `prefix`.
fn print_voice(prefix: &str, (mut first, mut stops): (Vec<f64>, Vec<f64>)) {
    first.sort_by(f64::total_cmp);
    stops.sort_by(f64::total_cmp);
    println!("{prefix}_first_audio_ms_p50: {:.0}", percentile(&first, 0.50));
    println!("{prefix}_first_audio_ms_p99: {:.0}", percentile(&first, 0.99));
    println!("{prefix}_barge_in_stop_ms_p50: {:.0}", percentile(&stops, 0.50));
    println!("{prefix}_barge_in_stop_ms_p99: {:.0}", percentile(&stops, 0.99));
    let (p50, p99) = (percentile(&stops, 0.50), percentile(&stops, 0.99));
    let met = |v: f64| if v <= BARGE_IN_GOAL_MS { "met" } else { "MISSED" };
    println!("{prefix}_barge_in_goal_ms: {BARGE_IN_GOAL_MS:.0} (p50 {}, p99 {})", met(p50), met(p99));
}

/// How soon his audio should stop once someone speaks over him, from the start of their speech
/// to his last frame: the voice floor's barge-in goal, which the bench reports against.
const BARGE_IN_GOAL_MS: f64 = 600.0;

/// A clip of `text` said aloud: by the local speech service's Piper when there is one, else by espeak-ng.
async fn say(speech: Option<&clankie_stack::SpeechServer>, text: &str) -> Result<(Vec<i16>, u32)> {
    use clankie_speech::TextToSpeech as _;
    match speech {
        Some(s) => {
            let piper = clankie_speech::openai::OpenAiSpeaker::new(&s.base_url(), "piper", "joe", None, Duration::from_secs(30))?;
            let audio = piper.synthesize(text).await?;
            Ok((audio.pcm, audio.rate))
        }
        None => clankie_discord_loopback::Loopback::synthesize(text).await.map_err(anyhow::Error::msg),
    }
}

/// How long the clip's quiet tail lasts, in ms (Piper ends a sentence with some silence).
fn quiet_tail_ms(pcm: &[i16], rate: u32) -> i64 {
    let last = pcm.iter().rposition(|s| s.unsigned_abs() > 300).unwrap_or(pcm.len());
    ((pcm.len() - last) as i64 * 1000) / i64::from(rate)
}

/// The local speech service's own pace over the open-speech sentences: the real-time factors of
/// Piper and Whisper, and how long Smart Turn takes per decision.
async fn speech_pace(speech: &clankie_stack::SpeechServer) -> Result<(f64, f64, Vec<f64>)> {
    use clankie_speech::{SpeechToText as _, TextToSpeech as _};
    let base = speech.base_url();
    let piper = clankie_speech::openai::OpenAiSpeaker::new(&base, "piper", "joe", None, Duration::from_secs(30))?;
    let whisper = clankie_speech::openai::OpenAiTranscriber::new(&base, "whisper", None, Duration::from_secs(30))?;
    let turns = clankie_speech::openai::HttpTurnDetector::new(&base, Duration::from_secs(5))?;
    let (mut audio_s, mut tts_s, mut stt_s, mut decisions) = (0.0, 0.0, 0.0, Vec::new());
    for text in PACE_SENTENCES {
        let began = Instant::now();
        let audio = piper.synthesize(text).await?;
        tts_s += began.elapsed().as_secs_f64();
        audio_s += audio.duration().as_secs_f64();
        let began = Instant::now();
        whisper.transcribe(&audio).await?;
        stt_s += began.elapsed().as_secs_f64();
        let began = Instant::now();
        turns.finished(&audio, None).await?;
        decisions.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    decisions.sort_by(f64::total_cmp);
    Ok((tts_s / audio_s, stt_s / audio_s, decisions))
}

/// Sentences the speech pace is measured over.
const PACE_SENTENCES: [&str; 5] = [
    "The weather was warm enough to eat outside on the terrace.",
    "My brother moved to a small town near the mountains last year.",
    "Could you turn the music down a little, please?",
    "I am reading a book about the history of the ocean.",
    "We cooked dinner together and talked for hours.",
];

/// From the end of a user's utterance to his first audio frame at the loopback, with an instant
/// model, on the local speech service (Whisper, Piper, Smart Turn) or, without one, the offline
/// engines; then how fast his audio stops when someone speaks over him. With `dave` the call is
/// end-to-end encrypted (DAVE, as Discord requires), else passthrough.
async fn voice(utterances: usize, barges: usize, speech: Option<&clankie_stack::SpeechServer>, dave: bool) -> Result<(Vec<f64>, Vec<f64>)> {
    let state = voice_state();
    std::fs::create_dir_all(&state)?;
    let grammar = state.join("bench.gram");
    std::fs::write(&grammar, clankie_speech::offline::grammar(&VOICE_PHRASES))?;
    let (state_dir, grammar) = (state.display().to_string(), grammar.display().to_string());
    let base = speech.map(clankie_stack::SpeechServer::base_url).unwrap_or_default();
    let mut settings = vec![("CLANKIE_STATE_DIR", state_dir.as_str())];
    match speech {
        Some(_) => settings.extend([
            ("CLANKIE_STT_BASE_URL", base.as_str()),
            ("CLANKIE_TTS_BASE_URL", base.as_str()),
            ("CLANKIE_TURN_BASE_URL", base.as_str()),
        ]),
        None => settings.push(("CLANKIE_STT_GRAMMAR", grammar.as_str())),
    }
    if !dave {
        settings.push(("CLANKIE_LOOPBACK_DAVE", "off"));
    }
    let rig = Rig::with(&settings).await;
    const VOICE: u64 = 300;
    rig.voice_live(VOICE, "ada").await;
    let voice = rig.sandbox.discord.voice();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !voice.bot_connected(VOICE) {
        anyhow::ensure!(Instant::now() < deadline, "his voice connection never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (question, rate) = say(speech, "Clankie, what time is it?").await?;
    let tail = quiet_tail_ms(&question, rate);
    let mut first_audio = Vec::new();
    for _ in 0..utterances {
        rig.standin.script(Script::when("spoken aloud", Reply::text("It is nine.")));
        let before = voice.heard(VOICE).len();
        rig.sandbox.discord.voice_speak(VOICE, "ada", &question, rate).await?;
        // The clip ends with five 20 ms silence frames and its own quiet tail; her speech ended before them.
        let ended = clankie_bus::now_ms() - 100 - tail;
        let deadline = Instant::now() + Duration::from_secs(20);
        let started = loop {
            if let Some(since) = voice.speaking_since(VOICE).filter(|s| *s > ended) {
                break since;
            }
            if let Some(s) = voice.heard(VOICE).get(before) {
                break s.start_ms;
            }
            anyhow::ensure!(Instant::now() < deadline, "no spoken answer");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        first_audio.push((started - ended) as f64);
        // Let the answer finish before the next question.
        while voice.heard(VOICE).len() <= before {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let story = "Once upon a time, in a quiet village by the sea, there lived an old lighthouse keeper who counted the ships \
                 every evening and wrote their names in a great blue book, one by one, until the stars came out.";
    let (ask, ask_rate) = say(speech, "Clankie, tell me a long story").await?;
    let (interruption, i_rate) = say(speech, "good morning everyone").await?;
    let mut stops = Vec::new();
    for _ in 0..barges {
        rig.standin.script(Script::when("spoken aloud", Reply::text(story)));
        let before = voice.heard(VOICE).len();
        rig.sandbox.discord.voice_speak(VOICE, "ada", &ask, ask_rate).await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while voice.speaking_since(VOICE).is_none_or(|since| clankie_bus::now_ms() - since <= 1_000) {
            anyhow::ensure!(Instant::now() < deadline, "he never began the story");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let spoke_at = clankie_bus::now_ms();
        rig.sandbox.discord.voice_speak(VOICE, "ada", &interruption, i_rate).await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let story = loop {
            if let Some(s) = voice.heard(VOICE).get(before).cloned() {
                break s;
            }
            anyhow::ensure!(Instant::now() < deadline, "the story never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        stops.push((story.end_ms - spoke_at) as f64);
        // Her interruption is a line of its own; let whatever answers it pass.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let _ = std::fs::remove_dir_all(&state);
    Ok((first_audio, stops))
}
