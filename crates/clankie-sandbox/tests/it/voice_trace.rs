//! `trace_` in voice: a question spoken in the sandbox's voice channel is one trace from her
//! utterance to his first audio, exported to a real OTLP receiver process, and its stages take
//! the time the loopback measured.

use std::collections::HashMap;
use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_sandbox::rig::Rig;
use serde_json::Value;

const VOICE: u64 = 300;

fn ms(span: &Value) -> f64 {
    (span["end_ns"].as_u64().unwrap_or(0).saturating_sub(span["start_ns"].as_u64().unwrap_or(0))) as f64 / 1e6
}

#[test]
fn trace_a_spoken_question_in_the_sandbox_is_one_trace_from_utterance_to_first_audio_whose_stages_add_up_to_the_measured_latency() {
    // The embedded audio body trusts the loopback's voice CA as `clankie run` arranges it.
    let state = clankie_testkit::TestDir::new();
    // SAFETY: no other thread exists yet in this test process.
    unsafe { std::env::set_var("SSL_CERT_FILE", state.path().join("voice").join("voice-ca.pem")) };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let otlp = tokio::task::spawn_blocking(|| clankie_stack::OtlpReceiver::start(&mut |m| eprintln!("clankie: {m}")))
            .await
            .unwrap()
            .expect("the OTLP receiver starts");
        let _traces =
            clankie_http::init_tracing_to("warn", "sandbox", clankie_trace::Export::to(otlp.endpoint(), Duration::from_millis(100)));
        let question = "Clankie, what time is it";
        let grammar = state.path().join("trace.gram");
        std::fs::write(&grammar, clankie_speech::offline::grammar(&[question, "good morning everyone"])).unwrap();
        let (state_dir, grammar) = (state.path().display().to_string(), grammar.display().to_string());
        let rig = Rig::with(&[
            ("CLANKIE_STATE_DIR", state_dir.as_str()),
            ("CLANKIE_STT_GRAMMAR", grammar.as_str()),
            ("CLANKIE_LOOPBACK_DAVE", "off"),
        ])
        .await;
        rig.voice_live(VOICE, "ada").await;
        let voice = rig.sandbox.discord.voice();
        clankie_testkit::until("his voice connection", Duration::from_secs(20), || voice.bot_connected(VOICE)).await;
        rig.standin.script(Script::when("spoken aloud", Reply::text("It is nine.")));
        let (pcm, rate) = clankie_discord_loopback::Loopback::synthesize(question).await.unwrap();
        let tail = {
            let last = pcm.iter().rposition(|s| s.unsigned_abs() > 300).unwrap_or(pcm.len());
            ((pcm.len() - last) as i64 * 1000) / i64::from(rate)
        };
        let before = voice.heard(VOICE).len();
        rig.sandbox.discord.voice_speak(VOICE, "ada", &pcm, rate).await.unwrap();
        // As the voice bench measures it: the clip ends with five 20 ms silence frames and its own
        // quiet tail, so her speech ended before them; his first frame is the loopback's.
        let ended = clankie_bus::now_ms() - 100 - tail;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let first_frame = loop {
            if let Some(since) = voice.speaking_since(VOICE).filter(|s| *s > ended) {
                break since;
            }
            if let Some(s) = voice.heard(VOICE).get(before) {
                break s.start_ms;
            }
            assert!(tokio::time::Instant::now() < deadline, "no spoken answer");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let measured = (first_frame - ended) as f64;

        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let spans = loop {
            let body: Value = serde_json::from_str(&otlp.spans_json().unwrap()).unwrap();
            let spans = body["spans"].as_array().cloned().unwrap_or_default();
            let root = spans.iter().find(|s| s["name"] == "voice.turn" && !s["events"].as_array().is_none_or(|e| e.is_empty()));
            let stages = ["voice.playback_start", "voice.synthesize", "voice.first_sentence", "voice.transcribe", "voice.turn_detection"];
            if let Some(root) = root
                && stages.iter().all(|n| spans.iter().any(|s| s["name"] == *n && s["trace_id"] == root["trace_id"]))
            {
                break spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the spoken turn's spans never all arrived: {:?}",
                spans.iter().map(|s| &s["name"]).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let root = spans.iter().find(|s| s["name"] == "voice.turn" && !s["events"].as_array().is_none_or(|e| e.is_empty())).unwrap();
        let trace = &root["trace_id"];
        assert_eq!(root["events"][0]["name"], "first_audio", "{root}");
        let mine: Vec<&Value> = spans.iter().filter(|s| &s["trace_id"] == trace).collect();
        let by_id: HashMap<&str, &Value> = mine.iter().filter_map(|s| Some((s["span_id"].as_str()?, *s))).collect();
        // Every span of the trace reaches the turn through its parents.
        for s in &mine {
            let mut at = *s;
            while let Some(parent) = at["parent_span_id"].as_str().filter(|p| !p.is_empty()) {
                at = by_id.get(parent).copied().unwrap_or_else(|| panic!("{} has a parent no one exported", s["name"]));
            }
            assert_eq!(at["span_id"], root["span_id"], "{} is not under the spoken turn", s["name"]);
        }
        let mut tree: Vec<&&Value> = mine.iter().collect();
        tree.sort_by_key(|s| s["start_ns"].as_u64());
        let t0 = root["start_ns"].as_u64().unwrap_or(0);
        for s in &tree {
            println!(
                "  +{:>7.1} ms {:>8.1} ms  {}",
                (s["start_ns"].as_u64().unwrap_or(0).saturating_sub(t0)) as f64 / 1e6,
                ms(s),
                s["name"].as_str().unwrap_or("")
            );
        }
        // The stages one after another: the turn detector's wait, transcription (until the words
        // are published), the persona until its first sentence, its synthesis, and the start of
        // playback; what lies between them (the bus hop, the floor, the run starting) is small.
        let stage = |name: &str| mine.iter().find(|s| s["name"] == name).map_or(0.0, |s| ms(s));
        let stages = [
            "voice.reception",
            "voice.turn_detection",
            "voice.transcribe",
            "voice.first_sentence",
            "voice.synthesize",
            "voice.playback_start",
        ];
        let sum: f64 = stages.iter().map(|n| stage(n)).sum();
        let whole = ms(root);
        println!(
            "spoken turn: measured at the loopback {measured:.0} ms, the trace's turn {whole:.0} ms, its stages {sum:.0} ms ({})",
            stages.iter().map(|n| format!("{n} {:.0}", stage(n))).collect::<Vec<_>>().join(", ")
        );
        // What she said and what he answered are in no attribute or event.
        let exported = serde_json::to_string(&spans).unwrap().to_lowercase();
        for canary in ["what time is it", "it is nine"] {
            assert!(!exported.contains(canary), "{canary:?} was exported");
        }
        assert!((sum - measured).abs() <= measured * 0.10, "the stages ({sum:.0} ms) are not within 10% of the measured {measured:.0} ms");
        assert!((whole - measured).abs() <= measured * 0.10, "the turn ({whole:.0} ms) is not within 10% of the measured {measured:.0} ms");
    });
}
