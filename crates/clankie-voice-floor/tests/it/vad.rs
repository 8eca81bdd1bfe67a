//! `vad_`: noise at speech level is neither an utterance nor an interruption; speech in noise
//! is one utterance. The clips are made here: white and pink noise, keyboard clicks and
//! music-like tones, each as loud as the spoken clip.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;

use super::{Rig, VOICE, clip, has_code, until};

const RATE: u32 = 16_000;
const VOICE_PROMPT: &str = "spoken aloud";
const PHRASES: [&str; 4] =
    ["Clankie, what is the capital of France", "Clankie, tell me a long story", "good morning everyone", "what time is it"];

/// A small deterministic generator: the clips are the same on every run.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

fn rms(pcm: &[i16]) -> f32 {
    (pcm.iter().map(|&s| f32::from(s).powi(2)).sum::<f32>() / pcm.len().max(1) as f32).sqrt()
}

/// `samples` scaled to the loudness `target` (an RMS in sample units).
fn at_level(samples: &[f32], target: f32) -> Vec<i16> {
    let level = (samples.iter().map(|s| s * s).sum::<f32>() / samples.len().max(1) as f32).sqrt().max(1e-9);
    samples.iter().map(|s| (s / level * target).clamp(-32_000.0, 32_000.0) as i16).collect()
}

fn white(seconds: f32, seed: u64) -> Vec<f32> {
    let mut n = Noise(seed);
    (0..(seconds * RATE as f32) as usize).map(|_| n.next()).collect()
}

/// Pink noise (Paul Kellet's filter over white).
fn pink(seconds: f32) -> Vec<f32> {
    let mut n = Noise(7);
    let mut b = [0f32; 7];
    (0..(seconds * RATE as f32) as usize)
        .map(|_| {
            let w = n.next();
            b[0] = 0.99886 * b[0] + w * 0.0555179;
            b[1] = 0.99332 * b[1] + w * 0.0750759;
            b[2] = 0.96900 * b[2] + w * 0.1538520;
            b[3] = 0.86650 * b[3] + w * 0.3104856;
            b[4] = 0.55000 * b[4] + w * 0.5329522;
            b[5] = -0.7616 * b[5] - w * 0.0168980;
            let out = b[..6].iter().sum::<f32>() + b[6] + w * 0.5362;
            b[6] = w * 0.115926;
            out
        })
        .collect()
}

/// Keystrokes: a short decaying click every 90–170 ms.
fn clicks(seconds: f32) -> Vec<f32> {
    let mut n = Noise(11);
    let len = (seconds * RATE as f32) as usize;
    let mut out = vec![0f32; len];
    let mut at = 0usize;
    while at < len {
        for i in 0..(RATE as usize / 200).min(len - at) {
            out[at + i] = n.next() * (-(i as f32) / 12.0).exp();
        }
        at += (RATE as usize * 90 / 1000) + (n.next().abs() * (RATE as f32 * 0.08)) as usize;
    }
    out
}

/// Music-like: chords of harmonic tones, a new one every 400 ms.
fn tones(seconds: f32) -> Vec<f32> {
    let chords = [[220.0, 277.2, 329.6], [246.9, 311.1, 370.0], [196.0, 246.9, 293.7], [261.6, 329.6, 392.0]];
    (0..(seconds * RATE as f32) as usize)
        .map(|i| {
            let t = i as f32 / RATE as f32;
            let chord = chords[(t / 0.4) as usize % chords.len()];
            chord.iter().map(|f| (1..4).map(|h| (std::f32::consts::TAU * f * h as f32 * t).sin() / h as f32).sum::<f32>()).sum()
        })
        .collect()
}

/// A spoken clip at 16 kHz, with `noise` mixed under it `snr_db` below it.
async fn speech_in_noise(text: &str, snr_db: f32) -> (Vec<i16>, f32) {
    let (speech, rate) = clip(text).await;
    let speech = clankie_pcm::resample(&speech, rate, RATE);
    let level = rms(&speech);
    let noise = at_level(&pink(speech.len() as f32 / RATE as f32 + 0.01), level / 10f32.powf(snr_db / 20.0));
    let mixed = speech.iter().zip(noise).map(|(&s, n)| (i32::from(s) + i32::from(n)).clamp(-32_000, 32_000) as i16).collect();
    (mixed, level)
}

async fn live_room(rig: &Rig) -> tokio::process::Child {
    super::live_room_hearing(rig, &PHRASES).await.0
}

#[tokio::test]
async fn vad_noise_at_speech_level_while_he_is_quiet_is_no_utterance_and_speech_in_noise_is_one() {
    let speech = super::speech().await;
    let rig = Rig::new().await;
    // Whisper hears the room: open speech, no grammar to guess from. Turns end on the silence
    // bound alone: what is counted here is noise, not where a turn ends.
    let engines = [("CLANKIE_STT_BASE_URL", speech.base_url()), ("CLANKIE_TTS_BASE_URL", speech.base_url())];
    let _floor = super::live_room_with(&rig, &engines).await;
    let transcripts = clankie_testkit::record::<v1::Transcript>(&rig.bus, clankie_proto::Family::VoiceTranscript).await;
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Paris.")));
    let (speech, level) = speech_in_noise("Clankie, what is the capital of France", 6.0).await;
    for (kind, clip) in
        [("white noise", white(3.0, 1)), ("pink noise", pink(3.0)), ("keyboard clicks", clicks(3.0)), ("music-like tones", tones(3.0))]
    {
        let pcm = at_level(&clip, level);
        rig.discord.voice_speak(VOICE, "ada", &pcm, RATE).await.unwrap();
        println!("vad: {kind}: 3 s at speech level ({level:.0} RMS) sent");
    }
    // Speech at 6 dB SNR after all of it: the one utterance, and a line behind every noise.
    rig.discord.voice_speak(VOICE, "ada", &speech, RATE).await.unwrap();
    until("the speech heard", Duration::from_secs(20), || !rig.receipts("voice.transcribed").is_empty()).await;
    let heard = rig.receipts("voice.heard");
    let transcribed = rig.receipts("voice.transcribed");
    println!("vad: utterances {} and transcriptions {} for 12 s of noise and one spoken question", heard.len(), transcribed.len());
    assert_eq!(heard.len(), 1, "noise became an utterance: {heard:?}");
    assert_eq!(transcribed.len(), 1);
    let audio_ms = heard[0].counts.get("audio_ms").copied().unwrap_or(0);
    println!("vad: the utterance held {audio_ms} ms of audio; transcription {:?}", transcribed[0].codes);
    assert!(has_code(&transcribed[0], "transcribed"), "{transcribed:?}");
    until("its transcript", Duration::from_secs(10), || !transcripts.all().is_empty()).await;
    let said = "Clankie, what is the capital of France";
    let (wrong, of) = super::word_errors(said, &transcripts.all()[0].text);
    println!("vad: the question under 6 dB of pink noise came back with {wrong} of {of} words wrong");
    assert!(wrong <= 1, "the question under noise was heard as {:?}", transcripts.all()[0].text);
    assert!(audio_ms < 6_000, "the utterance swallowed the noise before it: {audio_ms} ms");
}

#[tokio::test]
async fn vad_two_seconds_of_noise_while_he_speaks_does_not_stop_him() {
    let rig = Rig::new().await;
    let _floor = live_room(&rig).await;
    // One sentence, so one playback: its receipt says whether it was cut off.
    let story = "Once upon a time, in a quiet village by the sea, there lived an old lighthouse keeper who \
                 counted the ships every evening and wrote their names in a great blue book, one by one, until the stars came out";
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text(story)));
    let (ask, rate) = clip("Clankie, tell me a long story").await;
    let (asked_level, asked_at) = (rms(&ask), clankie_bus::now_ms());
    rig.discord.voice_speak(VOICE, "ada", &ask, rate).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !rig.discord.voice().speaking_since(VOICE).is_some_and(|since| clankie_bus::now_ms() - since > 1_000) {
        assert!(tokio::time::Instant::now() < deadline, "he never started his story");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let noise_at = clankie_bus::now_ms();
    rig.discord.voice_speak(VOICE, "ada", &at_level(&white(2.0, 5), asked_level), RATE).await.unwrap();
    let cut = || rig.receipts("voice.playback").iter().any(|r| has_code(r, "cut_off"));
    let over = || rig.discord.voice().heard(VOICE).into_iter().find(|s| s.start_ms > asked_at && s.end_ms > noise_at + 2_000);
    until("his story past the noise, or cut off", Duration::from_secs(30), || cut() || over().is_some()).await;
    assert!(!cut(), "noise cut him off: {:?}", rig.receipts("voice.playback"));
    let heard = over().expect("his story at the loopback");
    println!("vad: 2 s of noise at {} ms into his story; it played {} ms", noise_at - heard.start_ms, heard.duration_ms());
    assert!(heard.end_ms > noise_at + 2_000, "his audio stopped during the noise");
    assert_eq!(rig.receipts("voice.heard").len(), 1, "the noise became an utterance");
}
