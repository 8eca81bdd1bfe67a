//! `speech_service_`: the local speech service (`deploy/speech/server.py`, the real engines)
//! under a storm of end-of-turn questions. Each `/v1/turn` may begin an early transcription of
//! the turn's audio; those must stay bounded (one per speaker, a fixed pool, a bounded queue) so
//! that the process's threads do not grow with the questions and an asked transcription never
//! waits behind early ones of other audio.

use std::io::{Read as _, Write as _};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clankie_speech::Audio;

/// Concurrent `/v1/turn` questions.
const STORM: usize = 20;
/// Slack over the bound for threads the interpreter or the engines start now and then.
const SLACK: usize = 3;

/// Connections the service reset (a listen backlog overflowed) and the test made again.
static RETRIED: AtomicUsize = AtomicUsize::new(0);

/// One HTTP/1.1 POST on loopback with `Connection: close`: the status and the body. A connection
/// reset before any answer is made again (the service's listen backlog, not what is measured).
fn post(port: u16, path: &str, content_type: &str, body: &[u8]) -> (u16, Vec<u8>) {
    for _ in 0..20 {
        match try_post(port, path, content_type, body) {
            Ok(answer) => return answer,
            Err(e) => eprintln!("speech_service: {path}: {e}; making the connection again"),
        }
        RETRIED.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the speech service never answered {path}");
}

fn try_post(port: u16, path: &str, content_type: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(|e| format!("write: {e}"))?;
    stream.write_all(body).map_err(|e| format!("write: {e}"))?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(|e| format!("read: {e}"))?;
    let split =
        response.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| format!("no response head in {} bytes", response.len()))?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, response[split + 4..].to_vec()))
}

fn speak(port: u16, text: &str) -> Audio {
    let body = serde_json::json!({ "input": text, "response_format": "wav" }).to_string();
    let (status, wav) = post(port, "/v1/audio/speech", "application/json", body.as_bytes());
    assert_eq!(status, 200, "Piper speaks");
    Audio::from_wav(&wav).unwrap()
}

/// The first `ms` of the clip (its quiet head skipped).
fn first_ms(audio: &Audio, ms: u64) -> Audio {
    let start = audio.pcm.iter().position(|s| s.unsigned_abs() > 300).unwrap_or(0);
    let n = (audio.rate as u64 * ms / 1000) as usize;
    let pcm = audio.pcm[start..(start + n).min(audio.pcm.len())].to_vec();
    assert!(pcm.len() * 1000 / audio.rate as usize >= ms as usize - 50, "the clip is {} samples", audio.pcm.len());
    Audio { pcm, rate: audio.rate }
}

/// `POST /v1/audio/transcriptions`: the words and how long the answer took.
fn transcribe(port: u16, audio: &Audio) -> (String, Duration) {
    let boundary = "clankie-speech-service-test";
    let mut body = Vec::new();
    body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n").as_bytes());
    body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nClankie\r\n").as_bytes());
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"u.wav\"\r\nContent-Type: audio/wav\r\n\r\n")
            .as_bytes(),
    );
    body.extend_from_slice(&audio.wav());
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let began = Instant::now();
    let (status, answer) = post(port, "/v1/audio/transcriptions", &format!("multipart/form-data; boundary={boundary}"), &body);
    let took = began.elapsed();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let json: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    (json["text"].as_str().unwrap().to_owned(), took)
}

fn turn(port: u16, speaker: Option<&str>, audio: &Audio) -> u16 {
    let path = speaker.map_or("/v1/turn".to_owned(), |s| format!("/v1/turn?speaker={s}"));
    post(port, &path, "audio/wav", &audio.wav()).0
}

/// The service's process: the python3 whose arguments hold `--port <port>`.
fn service_pid(port: u16) -> u32 {
    let port = port.to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.iter().any(|a| *a == b"--die-with-stdin") && args.windows(2).any(|w| w[0] == b"--port" && w[1] == port.as_bytes()) {
            return pid;
        }
    }
    panic!("no speech service process on port {port}");
}

fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

#[test]
fn speech_service_a_storm_of_turn_questions_keeps_threads_bounded_and_a_transcription_prompt() {
    let mut server = clankie_stack::SpeechServer::start(&Default::default(), &mut |m| eprintln!("{m}")).expect("the speech service starts");
    let port = server.port();
    let pid = service_pid(port);

    let sentences = [
        "The quick brown fox jumps over the lazy dog by the river.",
        "Clankie, could you tell me what the weather will be tomorrow?",
        "We should meet at the old library after lunch on Friday.",
        "Please remind everyone that the train leaves at nine sharp.",
        "I think the blue paint looks much better on the kitchen wall.",
    ];
    let clips: Vec<Audio> = sentences.iter().map(|s| speak(port, s)).collect();
    let asked = first_ms(&speak(port, "Good morning everyone, the meeting starts in ten minutes."), 2000);

    // Warm every engine (and every thread pool they start lazily), and give the service the
    // prompt an early transcription is begun with.
    let (words, took) = transcribe(port, &first_ms(&clips[0], 1500));
    eprintln!("speech_service: warm-up transcription {took:?}: {words:?}");
    assert_eq!(turn(port, Some("warm"), &first_ms(&clips[1], 1500)), 200);
    std::thread::sleep(Duration::from_secs(2));
    let before = threads(pid);

    // Every thread count of the service, sampled until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(before));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(threads(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };

    // 20 questions at once: 8 speakers asking twice, the second time with more of their turn
    // (1.2 s, then 1.8 s of the same sentence: their audio grew), and 4 without a speaker.
    let barrier = Arc::new(Barrier::new(STORM + 1));
    let calls: Vec<_> = (0..STORM)
        .map(|i| {
            let barrier = barrier.clone();
            let speaker = (i < 16).then(|| format!("speaker-{}", i % 8));
            let audio = first_ms(&clips[i % 5], if i < 8 || i >= 16 { 1200 } else { 1800 });
            std::thread::spawn(move || {
                barrier.wait();
                turn(port, speaker.as_deref(), &audio)
            })
        })
        .collect();
    barrier.wait();
    let storm_began = Instant::now();

    // A transcription of other audio, asked right after them (they are in the service, most of
    // them still waiting on the detector).
    std::thread::sleep(Duration::from_millis(500));
    let (words, latency) = transcribe(port, &asked);
    let during = peak.load(Ordering::Relaxed);
    let statuses: Vec<u16> = calls.into_iter().map(|c| c.join().unwrap()).collect();
    let storm = storm_began.elapsed();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    // Once every connection is closed, the service's threads go back to what they were.
    let settle = Instant::now();
    while threads(pid) > before + 1 && settle.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let after = threads(pid);
    let peak = peak.load(Ordering::Relaxed);

    println!(
        "speech_service: threads before {before}, peak {peak} (by the transcription {during}), after {after}; {STORM} turn questions answered in {storm:?}; the transcription asked after them answered in {latency:?}: {words:?}; {} connections reset and made again",
        RETRIED.load(Ordering::Relaxed)
    );

    // The service's threads are a fixed set (the interpreter's, CTranslate2's workers, ONNX's,
    // the early-transcription pool) plus one per open connection (ThreadingHTTPServer): the
    // test holds at most STORM connections at once, and the transcription's after them. Nothing
    // may grow with the questions themselves.
    assert!(peak <= before + STORM + 1 + SLACK, "threads grew with the turn questions: before {before}, peak {peak}");
    assert!(after <= before + SLACK, "threads outlived the turn questions: before {before}, after {after}");
    assert!(latency <= Duration::from_secs(2), "the transcription waited {latency:?} behind early transcriptions");
    assert!(words.to_lowercase().contains("morning"), "heard {words:?}");

    // And the early result is still taken when it is the same audio: a turn asked about, then
    // its transcription.
    std::thread::sleep(Duration::from_secs(3));
    let solo = first_ms(&clips[3], 1500);
    assert_eq!(turn(port, Some("solo"), &solo), 200);
    let (words, took) = transcribe(port, &solo);
    let log = std::fs::read_to_string(server.log()).unwrap();
    let last = log.lines().filter(|l| l.contains("transcribed:")).next_back().unwrap_or_default().to_owned();
    println!("speech_service: a transcription of the turn just asked about answered in {took:?}: {words:?} ({last})");
    assert!(last.contains("begun_at_pause=True"), "the early transcription was not taken: {last}");
    server.stop();
}
