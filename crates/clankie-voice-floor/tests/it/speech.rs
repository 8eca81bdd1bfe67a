//! `spoken_round_trip` and `barge_in`: speech in through the offline transcriber, the floor, the
//! persona (the model stand-in), and speech out through espeak-ng, over the real voice wire.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_speech::SpeechToText;
use clankie_speech::offline::Pocketsphinx;

use super::{Rig, VOICE, clip, keeping, until};

/// The phrases the offline transcriber may hear: the test's own and distractors, so that picking
/// the right one means something.
const PHRASES: [&str; 10] = [
    "Clankie, what is the capital of France",
    "Clankie, what time is it",
    "Paris is the capital of France",
    "Clankie, tell me a long story",
    "tell me a joke",
    "how is the weather today",
    "clankie play some music",
    "good morning everyone",
    "what time is it",
    "the train leaves at nine",
];
/// Every voice persona request says this; the captain's never does.
const VOICE_PROMPT: &str = "spoken aloud";

async fn live_room(rig: &Rig) -> (tokio::process::Child, std::path::PathBuf) {
    super::live_room_hearing(rig, &PHRASES).await
}

#[tokio::test]
async fn spoken_round_trip_a_question_aloud_is_heard_answered_and_spoken() {
    let rig = Rig::new().await;
    let (_floor, grammar_file) = live_room(&rig).await;
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Paris is the capital of France.")));

    let (question, rate) = clip("Clankie, what is the capital of France").await;
    let asked = clankie_bus::now_ms();
    rig.discord.voice_speak(VOICE, "ada", &question, rate).await.unwrap();

    // The persona's request holds ada's line, heard as speech.
    let requests = rig.standin.wait_for_requests(1, Duration::from_secs(20)).await;
    let request = requests.iter().find(|r| r.all_text().contains(VOICE_PROMPT)).expect("a voice persona request");
    let text = request.all_text();
    let line = text.lines().find(|l| l.contains("capital")).unwrap_or_else(|| panic!("no heard line in: {text}"));
    assert!(line.contains("from=\"ada\"") && line.contains("how=\"said\""), "not ada's speech: {line}");
    assert!(line.contains("france"), "{line}");

    // He says the answer aloud: the loopback hears it, and it transcribes as the answer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let answer = loop {
        if let Some(s) = rig.discord.voice().heard(VOICE).into_iter().find(|s| s.start_ms > asked) {
            break s;
        }
        assert!(tokio::time::Instant::now() < deadline, "nothing spoken; receipts: {:?}", rig.receipts("voice.playback"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let words = clankie_speech::offline::his_names();
    let ears = Pocketsphinx::new(Some(grammar_file), &words, Duration::from_secs(20)).unwrap();
    let heard = ears.transcribe(&clankie_speech::Audio { pcm: answer.pcm.clone(), rate: answer.rate }).await.unwrap();
    println!(
        "spoken_round_trip: he said {:?} ({} ms of audio, first audio {} ms after the question began)",
        heard,
        answer.duration_ms(),
        answer.start_ms - asked
    );
    assert!(heard.contains("paris"), "his answer transcribed as {heard:?}");

    until("the played receipt", Duration::from_secs(10), || rig.receipts("voice.playback").iter().any(|r| super::has_code(r, "played")))
        .await;
    // Voice receipts of the spoken delivery join by its utterance id and carry no words.
    let utterance = rig.receipts("voice.transcribed").into_iter().find(|r| super::has_code(r, "transcribed")).unwrap().delivery_id;
    let joined: Vec<_> = rig.receipts.all().into_iter().filter(|r| r.delivery_id == utterance).collect();
    let kinds: Vec<&str> = joined.iter().map(|r| r.kind.as_str()).collect();
    for kind in ["voice.heard", "voice.transcribed", "voice.floor", "voice.response", "voice.playback"] {
        assert!(kinds.contains(&kind), "{kind} missing from the utterance's receipts: {kinds:?}");
    }
    // usage: what the run's calls cost is on its response receipt, as the provider reported it.
    let response = joined.iter().find(|r| r.kind == "voice.response").unwrap();
    let billed: u64 = rig.standin.requests().iter().filter(|r| r.all_text().contains(VOICE_PROMPT)).map(|r| r.token_estimate).sum();
    assert!(billed > 0);
    assert_eq!(response.counts.get("input_tokens").copied(), Some(billed as i64), "the voice run's input is missing from its receipt");
    let all = format!("{:?}", rig.receipts.all());
    for word in ["capital", "france", "paris", "Paris"] {
        assert!(!all.contains(word), "a receipt carries the word {word:?}");
    }
}

#[tokio::test]
async fn barge_in_ada_speaking_over_him_stops_his_audio() {
    let rig = Rig::new().await;
    let (_floor, _) = live_room(&rig).await;
    let long = "Once upon a time, in a quiet village by the sea, there lived an old lighthouse keeper who \
                counted the ships every evening and wrote their names in a great blue book, one by one, until the stars came out.";
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text(long)));
    let (ask, rate) = clip("Clankie, tell me a long story").await;
    let asked = clankie_bus::now_ms();
    rig.discord.voice_speak(VOICE, "ada", &ask, rate).await.unwrap();

    // Wait until he has been speaking a while.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !rig.discord.voice().speaking_since(VOICE).is_some_and(|since| clankie_bus::now_ms() - since > 1_500) {
        assert!(tokio::time::Instant::now() < deadline, "he never started his story");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (interruption, rate) = clip("good morning everyone").await;
    let spoke_at = clankie_bus::now_ms();
    rig.discord.voice_speak(VOICE, "ada", &interruption, rate).await.unwrap();
    until("the cut-off receipt", Duration::from_secs(10), || {
        rig.receipts("voice.playback").iter().any(|r| super::has_code(r, "cut_off") && r.at_ms >= spoke_at)
    })
    .await;
    // The loopback closes a stream of his once it has been quiet for its segment gap.
    until("his story's end at the loopback", Duration::from_secs(10), || {
        rig.discord.voice().heard(VOICE).iter().any(|s| s.start_ms > asked)
    })
    .await;
    let story = rig.discord.voice().heard(VOICE).into_iter().find(|s| s.start_ms > asked).expect("his story at the loopback");
    let stopped_after = story.end_ms - spoke_at;
    println!("barge_in: his audio stopped {stopped_after} ms after ada began ({} ms of the story played)", story.duration_ms());
    // How soon is the bench's figure (`clankie-bench voice`, barge-in p50/p99); here, that she
    // stopped him: the whole story runs past 9 s and she speaks 1.5 s into it, so a floor that
    // let it play on goes seconds past this bound, and one that stopped him comes in well under.
    assert!(stopped_after <= 3_000, "his audio went on {stopped_after} ms after she spoke");
    assert!(story.duration_ms() < 9_000, "the whole story played");
}

#[tokio::test]
async fn speech_engine_failures_in_the_room_leave_a_code_and_no_text_and_the_room_answers_on() {
    use clankie_model_standin::audio::{AudioReply, AudioRoute, AudioScript};
    let rig = Rig::new().await;
    rig.standin.audio().set_phrases(&PHRASES);
    let base = rig.standin.base_url();
    let _floor = rig.voice_floor_with(
        "floor-a",
        &[("CLANKIE_STT_BASE_URL", base.clone()), ("CLANKIE_TTS_BASE_URL", base), ("CLANKIE_SPEECH_TIMEOUT_MS", "1500".into())],
    );
    keeping(&rig, "floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;
    let (hello, rate) = clip("good morning everyone").await;
    let (ask, ask_rate) = clip("clankie play some music").await;
    let failures = [
        (AudioReply::Status { status: 400 }, "speech_rejected_4xx", "speech_rejected_4xx"),
        (AudioReply::Status { status: 503 }, "speech_failed_5xx", "speech_failed_5xx"),
        (AudioReply::Delay { ms: 3_000 }, "speech_timeout", "speech_timeout"),
        (AudioReply::Empty, "speech_bad_audio", "speech_empty_audio"),
    ];

    // Transcription failing: the utterance's receipt carries the code, and nothing else happens.
    for (reply, code, _) in &failures {
        let before = rig.receipts("voice.transcribed").len();
        rig.standin.audio().script(AudioScript { route: AudioRoute::Transcriptions, reply: reply.clone() });
        rig.discord.voice_speak(VOICE, "ada", &hello, rate).await.unwrap();
        until("the transcription receipt", Duration::from_secs(15), || rig.receipts("voice.transcribed").len() > before).await;
        let got = rig.receipts("voice.transcribed").remove(before);
        assert!(super::has_code(&got, code), "transcription with {reply:?} gave {:?}", got.codes);
    }

    // Speech failing: the persona answered, the playback receipt carries the code.
    for (reply, _, code) in &failures {
        let before = rig.receipts("voice.playback").iter().filter(|r| !super::has_code(r, "queued")).count();
        rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Here is some music for you.")));
        rig.standin.audio().script(AudioScript { route: AudioRoute::Speech, reply: reply.clone() });
        rig.discord.voice_speak(VOICE, "ada", &ask, ask_rate).await.unwrap();
        let settled = || rig.receipts("voice.playback").into_iter().filter(|r| !super::has_code(r, "queued")).collect::<Vec<_>>();
        until("the playback receipt", Duration::from_secs(20), || settled().len() > before).await;
        let got = settled().remove(before);
        assert!(super::has_code(&got, code), "speech with {reply:?} gave {:?}", got.codes);
    }

    // The room goes on: the next input is heard, answered and played.
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Here is some music for you.")));
    rig.discord.voice_speak(VOICE, "ada", &ask, ask_rate).await.unwrap();
    until("a played answer", Duration::from_secs(20), || rig.receipts("voice.playback").iter().any(|r| super::has_code(r, "played"))).await;
    assert!(rig.discord.posts(VOICE).is_empty(), "a failed engine fell back to a text post");
}

#[tokio::test]
async fn voice_steer_three_addressed_utterances_while_he_thinks_get_one_run_and_one_spoken_answer() {
    let rig = Rig::new().await;
    let speaks = clankie_testkit::record::<clankie_proto::v1::Speak>(&rig.bus, clankie_proto::Family::VoiceSpeak).await;
    let (_floor, _) = live_room(&rig).await;
    for who in ["bob", "cy"] {
        rig.discord.voice_join(VOICE, who).unwrap();
    }
    // The first call thinks long enough for all three to arrive; the steered call answers at once.
    rig.standin.script(Script::when(
        VOICE_PROMPT,
        Reply::Text { text: "One moment.".into(), chunk_chars: 64, chunk_delay_ms: 0, first_delay_ms: 4_000, tail_delay_ms: 0 },
    ));
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Music, the time, and a joke: here you go.")));
    let lines = [("ada", "clankie play some music"), ("bob", "Clankie, what time is it"), ("cy", "Clankie, tell me a long story")];
    let mut clips = Vec::new();
    for (_, line) in lines {
        clips.push(clip(line).await);
    }
    // Three people, each starting a second after the one before.
    let (a, b, c) = tokio::join!(
        rig.discord.voice_speak(VOICE, lines[0].0, &clips[0].0, clips[0].1),
        async {
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            rig.discord.voice_speak(VOICE, lines[1].0, &clips[1].0, clips[1].1).await
        },
        async {
            tokio::time::sleep(Duration::from_millis(2_000)).await;
            rig.discord.voice_speak(VOICE, lines[2].0, &clips[2].0, clips[2].1).await
        },
    );
    for spoken in [a, b, c] {
        assert!(spoken.unwrap() > 0);
    }
    let outcomes = || rig.receipts("voice.outcome");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while outcomes().len() < 3 {
        let seen: Vec<(String, String, Vec<String>)> =
            rig.receipts.all().into_iter().filter(|r| r.kind.starts_with("voice.")).map(|r| (r.kind, r.delivery_id, r.codes)).collect();
        assert!(tokio::time::Instant::now() < deadline, "three outcomes; voice receipts: {seen:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let codes: Vec<String> = outcomes().iter().map(|r| r.codes[0].clone()).collect();
    assert_eq!(codes.iter().filter(|c| *c == "replied").count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| *c == "absorbed").count(), 2, "{codes:?}");
    let replied = outcomes().into_iter().find(|r| super::has_code(r, "replied")).unwrap();
    assert_eq!(super::count(&replied, "heard"), Some(3), "the one run heard all three");
    // The answer's request held all three lines.
    let last = rig.standin.requests().into_iter().filter(|r| r.all_text().contains(VOICE_PROMPT)).last().unwrap();
    for (who, _) in lines {
        assert!(last.all_text().contains(&format!("from=\"{who}\"")), "the answering call did not hear {who}");
    }
    until("the spoken answer", Duration::from_secs(10), || !speaks.all().is_empty()).await;
    until("his answer played", Duration::from_secs(20), || rig.receipts("voice.playback").iter().any(|r| super::has_code(r, "played")))
        .await;
    assert_eq!(speaks.all().len(), 1, "one spoken answer covers all three");
    assert_eq!(speaks.all()[0].text, "Music, the time, and a joke: here you go.");
}

#[tokio::test]
async fn spoken_round_trip_his_first_sentence_is_spoken_while_the_rest_is_still_written() {
    let rig = Rig::new().await;
    let (_floor, _) = live_room(&rig).await;
    // 40 characters a piece, 4 s apart: the first piece completes a sentence; the second is
    // written 4 s after the model was asked, the third 8 s after.
    const PIECE_MS: i64 = 4_000;
    let answer = "Here is the first part. And then, after a long pause, the rest of it arrives at last.";
    rig.standin.script(Script::when(
        VOICE_PROMPT,
        Reply::Text { text: answer.into(), chunk_chars: 40, chunk_delay_ms: PIECE_MS as u64, first_delay_ms: 0, tail_delay_ms: 0 },
    ));
    let (ask, rate) = clip("Clankie, tell me a long story").await;
    rig.discord.voice_speak(VOICE, "ada", &ask, rate).await.unwrap();
    let requests = rig.standin.wait_for_requests(1, Duration::from_secs(20)).await;
    let asked_model = requests.iter().find(|r| r.all_text().contains(VOICE_PROMPT)).unwrap().at_ms;
    let second_piece = asked_model + PIECE_MS;
    let written_by = asked_model + 2 * PIECE_MS;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let first_audio = loop {
        if let Some(since) = rig.discord.voice().speaking_since(VOICE) {
            break since;
        }
        assert!(tokio::time::Instant::now() < deadline, "he said nothing");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "spoken_round_trip streaming: first audio {} ms after the model was asked; the answer was written by +{} ms",
        first_audio - asked_model,
        written_by - asked_model
    );
    assert!(first_audio < second_piece, "his first audio waited for the second piece (written at +{PIECE_MS} ms)");
    until("every sentence played", Duration::from_secs(30), || {
        rig.receipts("voice.playback").iter().filter(|r| super::has_code(r, "played")).count() >= 2
    })
    .await;
}

/// Waits until he has spoken and gone quiet again: the end of his first sentence.
async fn after_his_first_sentence(rig: &Rig, asked: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let spoke = rig.discord.voice().heard(VOICE).into_iter().any(|s| s.start_ms > asked);
        if spoke && rig.discord.voice().speaking_since(VOICE).is_none() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "he never finished his first sentence");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn barge_in_a_person_starting_in_the_gap_between_two_sentences_stops_the_answer() {
    let rig = Rig::new().await;
    let (_floor, _) = live_room(&rig).await;
    // His first sentence, then the model takes 4 s over each of the next: a gap to speak into,
    // short enough that without barge-in the second sentence would play while she speaks.
    let first = "The lighthouse keeper counted ships. ";
    let text = format!("{first}He wrote their names in a great blue book. Then the stars came out over the quiet sea.");
    rig.standin.script(Script::when(
        VOICE_PROMPT,
        Reply::Text { text, chunk_chars: first.len(), chunk_delay_ms: 4_000, first_delay_ms: 0, tail_delay_ms: 0 },
    ));
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Good morning to you.")));
    let (ask, rate) = clip("Clankie, tell me a long story").await;
    let asked = clankie_bus::now_ms();
    rig.discord.voice_speak(VOICE, "ada", &ask, rate).await.unwrap();
    after_his_first_sentence(&rig, asked).await;

    let (interruption, rate) = clip("good morning everyone").await;
    let spoke_at = clankie_bus::now_ms();
    rig.discord.voice_speak(VOICE, "ada", &interruption, rate).await.unwrap();
    let she_ended = clankie_bus::now_ms();
    // The story's later sentences come while she speaks or after: none is played.
    let story = |n: usize| move |r: &clankie_proto::v1::Receipt| r.delivery_id.ends_with(&format!("~0/{n}"));
    until("the story's later sentences settled", Duration::from_secs(30), || {
        let playback = rig.receipts("voice.playback");
        (1..=2).all(|n| playback.iter().any(story(n)))
    })
    .await;
    // Seen at the loopback: after her first word he said nothing of the story. Its sentences
    // each take over 2 s to say; his answer to her ("Good morning to you.") takes about one.
    let story_aloud: Vec<(i64, i64)> = rig
        .discord
        .voice()
        .heard(VOICE)
        .into_iter()
        .filter(|s| s.start_ms > spoke_at && s.duration_ms() >= 2_000)
        .map(|s| (s.start_ms - spoke_at, s.duration_ms()))
        .collect();
    println!("barge_in: in the gap; she spoke {} ms; story audio after she began (ms in, ms long): {story_aloud:?}", she_ended - spoke_at);
    assert!(story_aloud.is_empty(), "the story went on aloud after she spoke in the gap: {story_aloud:?}");
    let playback = rig.receipts("voice.playback");
    assert!(playback.iter().any(|r| story(0)(r) && super::has_code(r, "played")), "{playback:?}");
    for n in 1..=2 {
        let r = playback.iter().find(|r| story(n)(r)).unwrap();
        assert!(super::has_code(r, "cut_off") && super::count(r, "played_ms") == Some(0), "sentence {n} played: {r:?}");
    }
}

#[tokio::test]
async fn ring_fidelity_a_cut_3_s_into_a_12_sentence_answer_leaves_only_what_he_played_in_the_ring() {
    let rig = Rig::new().await;
    let (_floor, _) = live_room(&rig).await;
    let sentences: Vec<String> = (1..=12).map(|n| format!("This is sentence number {n} of the long story.")).collect();
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text(sentences.join(" "))));
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Yes?")));
    let (ask, rate) = clip("Clankie, tell me a long story").await;
    rig.discord.voice_speak(VOICE, "ada", &ask, rate).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !rig.discord.voice().speaking_since(VOICE).is_some_and(|since| clankie_bus::now_ms() - since > 3_000) {
        assert!(tokio::time::Instant::now() < deadline, "he never spoke for 3 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (interruption, rate) = clip("good morning everyone").await;
    rig.discord.voice_speak(VOICE, "ada", &interruption, rate).await.unwrap();
    let she_ended = clankie_bus::now_ms();
    let requests = rig.standin.wait_for_requests(2, Duration::from_secs(30)).await;
    let played = rig.receipts("voice.playback").iter().filter(|r| super::has_code(r, "played")).count();
    // Counted apart from the floor: how much of the story the loopback heard him say, against
    // each sentence's length as the same engine says it. Sentences whose whole length fits in it
    // were said whole.
    let story_ms: i64 = rig.discord.voice().heard(VOICE).iter().filter(|s| s.start_ms < she_ended).map(|s| s.duration_ms()).sum();
    let espeak = clankie_speech::offline::Espeak::new(Duration::from_secs(30));
    let (mut said_whole, mut through) = (0, 0i64);
    for sentence in &sentences {
        use clankie_speech::TextToSpeech as _;
        through += i64::try_from(espeak.synthesize(sentence).await.unwrap().duration().as_millis()).unwrap();
        // A margin for the frames that carry the audio (20 ms each) at either end.
        if through > story_ms + 100 {
            break;
        }
        said_whole += 1;
    }
    let next = requests[1].all_text();
    let line = next
        .lines()
        .find(|l| l.starts_with("<line") && l.contains("you=\"true\""))
        .unwrap_or_else(|| panic!("his line is not in the room block: {next}"));
    let numbers: Vec<usize> = (1..=12).filter(|n| line.contains(&format!("sentence number {n} "))).collect();
    let kept = numbers.len();
    // What he said is the answer's beginning: the first sentences, none skipped.
    assert_eq!(numbers, (1..=kept).collect::<Vec<_>>(), "the ring kept sentences other than the first ones: {line}");
    println!(
        "ring_fidelity: the loopback heard {story_ms} ms of the story, {said_whole} sentence(s) whole; the floor counted {played} \
played; the ring kept {kept} of 12 (partly or whole): {line}"
    );
    assert!(line.contains("cut off"), "not marked cut off: {line}");
    assert!(said_whole >= 1, "he was cut before a sentence was said whole ({story_ms} ms heard)");
    assert!(kept >= said_whole && kept <= said_whole + 1, "the ring kept {kept} sentences of which {said_whole} were heard whole");
    assert!(!line.contains("sentence number 12 "), "the ring says he said what nobody heard: {line}");
}

#[tokio::test]
async fn voice_transcription_a_slow_first_utterance_still_enters_the_room_before_a_fast_second() {
    use clankie_model_standin::audio::{AudioReply, AudioRoute, AudioScript};
    let rig = Rig::new().await;
    rig.standin.audio().set_phrases(&PHRASES);
    let base = rig.standin.base_url();
    let _floor = rig.voice_floor_with(
        "floor-a",
        &[("CLANKIE_STT_BASE_URL", base.clone()), ("CLANKIE_TTS_BASE_URL", base), ("CLANKIE_SPEECH_TIMEOUT_MS", "8000".into())],
    );
    keeping(&rig, "floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;
    let inputs = clankie_testkit::record::<clankie_proto::v1::RoomInput>(&rig.bus, clankie_proto::Family::VoiceInput).await;
    // The first utterance's transcription takes 5 s; the second's is at once.
    rig.standin.audio().script(AudioScript { route: AudioRoute::Transcriptions, reply: AudioReply::Delay { ms: 5_000 } });
    let (first, rate) = clip("good morning everyone").await;
    rig.discord.voice_speak(VOICE, "ada", &first, rate).await.unwrap();
    until("the first utterance", Duration::from_secs(10), || !rig.receipts("voice.heard").is_empty()).await;
    let (second, rate) = clip("what time is it").await;
    rig.discord.voice_speak(VOICE, "ada", &second, rate).await.unwrap();
    until("both heard", Duration::from_secs(20), || inputs.all().len() >= 2).await;
    // The receipts travel on a stream of their own and may land after the room input.
    until("both utterances' receipts", Duration::from_secs(10), || {
        rig.receipts("voice.transcribed").len() >= 2 && rig.receipts("voice.heard").len() >= 2
    })
    .await;
    let inputs = inputs.all();
    let heard: Vec<String> = inputs.iter().map(|i| i.text.to_lowercase()).collect();
    // Receipts travel each on a task of its own, so they are paired with the utterances by id,
    // never by the order they arrived in.
    let receipt = |kind: &str, id: &str| {
        rig.receipts(kind).into_iter().find(|r| r.delivery_id == id).unwrap_or_else(|| panic!("no {kind} receipt for {id}"))
    };
    let (first, second) = (&inputs[0].delivery_id, &inputs[1].delivery_id);
    let took = |id: &str| super::count(&receipt("voice.transcribed", id), "took_ms").unwrap_or(0);
    let took = [took(first), took(second)];
    println!("voice_transcription: heard {heard:?}, transcriptions took {took:?} ms");
    assert!(heard[0].contains("morning") && heard[1].contains("time"), "the room heard them out of order: {heard:?}");
    assert!(took[0] >= 4_000 && took[1] < took[0], "the first was not the slow one: {took:?}");
    // They overlapped: the second was heard (and handed to the transcriber) before the first's
    // transcription ended, so the order above is the room's doing, not the clock's.
    let second_heard = receipt("voice.heard", second).at_ms;
    let first_done = receipt("voice.transcribed", first).at_ms;
    assert!(second_heard < first_done, "no overlap: the second heard at {second_heard}, the first transcribed at {first_done}");
}

/// The room's transcriber panics on the first line it takes: it is started again on the same
/// ears (logged by name), and the next line ada says is transcribed and reaches the floor.
#[tokio::test]
async fn supervise_a_transcriber_that_panics_is_started_again_and_the_next_line_is_heard() {
    let rig = Rig::new().await;
    let file = rig.dir.path().join("room.gram");
    std::fs::write(&file, clankie_speech::offline::grammar(&PHRASES)).unwrap();
    let settings = [("CLANKIE_STT_GRAMMAR", file.display().to_string()), ("CLANKIE_FAULT_PANIC", "voice.transcriber".to_owned())];
    let _floor = super::live_room_with(&rig, &settings).await;
    let (first, rate) = clip("good morning everyone").await;
    rig.discord.voice_speak(VOICE, "ada", &first, rate).await.unwrap();
    until("the transcriber's panic", Duration::from_secs(20), || rig.log("floor-a").contains("fault injected at voice.transcriber")).await;
    let (second, rate) = clip("the train leaves at nine").await;
    let said_at = clankie_bus::now_ms();
    rig.discord.voice_speak(VOICE, "ada", &second, rate).await.unwrap();
    until("the second line transcribed", Duration::from_secs(30), || {
        rig.receipts("voice.transcribed").iter().any(|r| super::has_code(r, "transcribed") && r.at_ms > said_at)
    })
    .await;
    let log = rig.log("floor-a");
    assert!(log.contains("a part of this process panicked") && log.contains("voice.transcriber"), "the restart was not logged by name");
}

/// A room one part of which panics at `point` on the first line she says is let go and taken
/// again: the keeper logs it by name and writes a `restarted` receipt, the new room reconnects
/// its body, and the next line she says is transcribed and decided by the floor.
async fn a_room_that_panics_at(point: &str) {
    let rig = Rig::new().await;
    let file = rig.dir.path().join("room.gram");
    std::fs::write(&file, clankie_speech::offline::grammar(&PHRASES)).unwrap();
    let settings = [("CLANKIE_STT_GRAMMAR", file.display().to_string()), ("CLANKIE_FAULT_PANIC", point.to_owned())];
    let _floor = super::live_room_with(&rig, &settings).await;
    let (first, rate) = clip("good morning everyone").await;
    rig.discord.voice_speak(VOICE, "ada", &first, rate).await.unwrap();
    until("the injected panic", Duration::from_secs(20), || rig.log("floor-a").contains(&format!("fault injected at {point}"))).await;
    until("the room let go of", Duration::from_secs(10), || rig.receipts("voice.room").iter().any(|r| super::has_code(r, "restarted")))
        .await;
    let restarted_at = rig.receipts("voice.room").iter().find(|r| super::has_code(r, "restarted")).map(|r| r.at_ms).unwrap();
    until("the room taken again", Duration::from_secs(10), || {
        rig.receipts("voice.room").iter().any(|r| super::has_code(r, "live") && r.at_ms >= restarted_at)
    })
    .await;
    rig.connected(Duration::from_secs(10)).await;
    // Her second line, said until the new room hears one (the new body's connection may still be
    // settling when the first of them is said).
    let (second, rate) = clip("the train leaves at nine").await;
    let said_at = clankie_bus::now_ms();
    let decided = || rig.receipts("voice.floor").iter().any(|r| r.at_ms > said_at);
    for _ in 0..3 {
        rig.discord.voice_speak(VOICE, "ada", &second, rate).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !decided() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if decided() {
            break;
        }
    }
    assert!(decided(), "the room taken again after a panic at {point} never decided her next line");
    let log = rig.log("floor-a");
    assert!(log.contains("a part of a voice room ended") && log.contains("voice.room"), "the restart was not logged by name");
}

#[tokio::test]
async fn supervise_a_voice_body_that_panics_is_taken_again_and_the_next_line_is_heard() {
    a_room_that_panics_at("voice.body").await;
}

#[tokio::test]
async fn supervise_a_voice_room_actor_that_panics_is_taken_again_and_the_next_line_is_heard() {
    a_room_that_panics_at("voice.room").await;
}

/// A transcriber at a quarter of real time (each line takes four times its length) under a
/// person who keeps talking: the room's ears hold at most their bound, the oldest lines are
/// dropped with a receipt each, every line heard is either transcribed or dropped, and the
/// floor's memory stays flat. `CLANKIE_VOICE_CLIPS` × 4 lines (20 by default).
#[tokio::test]
async fn voice_actor_a_transcriber_at_4x_real_time_keeps_the_ears_under_their_bound_and_memory_flat() {
    use clankie_model_standin::audio::{AudioReply, AudioRoute, AudioScript};
    const EARS_HELD: i64 = 8;
    // At least 40 lines, so one kept line each would be far past what full ears hold.
    let lines = (super::voice_clips(100) * 4).max(40);
    let rig = Rig::new().await;
    rig.standin.audio().set_phrases(&PHRASES);
    let (line, rate) = clip("good morning everyone").await;
    let line_ms = line.len() as u64 * 1000 / u64::from(rate);
    for _ in 0..lines + 5 {
        rig.standin.audio().script(AudioScript { route: AudioRoute::Transcriptions, reply: AudioReply::Delay { ms: 4 * line_ms } });
    }
    let base = rig.standin.base_url();
    let floor = rig.voice_floor_with(
        "floor-a",
        &[
            ("CLANKIE_STT_BASE_URL", base.clone()),
            ("CLANKIE_TTS_BASE_URL", base),
            ("CLANKIE_VOICE_TRANSCRIPTIONS", "1".into()),
            // Her pauses end her turns sooner, so she gets far ahead of the transcriber quickly.
            ("CLANKIE_VOICE_END_OF_TURN_MS", "300".into()),
            ("CLANKIE_SPEECH_TIMEOUT_MS", (8 * line_ms).to_string()),
        ],
    );
    let pid = floor.id().expect("the floor runs");
    keeping(&rig, "floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;
    let anon = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status.lines().find_map(|l| l.strip_prefix("RssAnon:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    let mut memory = Vec::new();
    for n in 0..lines {
        rig.discord.voice_speak(VOICE, "ada", &line, rate).await.unwrap();
        // She pauses past the end of a turn before her next line.
        tokio::time::sleep(Duration::from_millis(600)).await;
        if n == 4 {
            memory.push(anon().unwrap_or(0));
        }
    }
    until("every line heard", Duration::from_secs(30), || rig.receipts("voice.heard").len() >= lines).await;
    let settled = || rig.receipts("voice.transcribed").len() + rig.receipts("voice.heard_dropped").len();
    until("every line transcribed or dropped", Duration::from_secs(120), || settled() >= rig.receipts("voice.heard").len()).await;
    // Once the ears are empty again: what they held is given back.
    memory.push(anon().unwrap_or(0));
    let (heard, transcribed, dropped) =
        (rig.receipts("voice.heard"), rig.receipts("voice.transcribed"), rig.receipts("voice.heard_dropped"));
    // Waiting at each moment a line was heard: heard so far less transcribed and dropped so far.
    let waiting: Vec<i64> = heard
        .iter()
        .map(|h| {
            let by = |rs: &[clankie_proto::v1::Receipt]| rs.iter().filter(|r| r.at_ms <= h.at_ms).count() as i64;
            by(&heard) - by(&transcribed) - by(&dropped)
        })
        .collect();
    let most = waiting.iter().copied().max().unwrap_or(0);
    println!(
        "voice_actor: {} lines of {line_ms} ms, each transcribed in {} ms: heard {}, transcribed {}, dropped {}; at most {most} waiting; \
floor anonymous RSS {:?} KiB (after line 5, once every line was settled)",
        lines,
        4 * line_ms,
        heard.len(),
        transcribed.len(),
        dropped.len(),
        memory
    );
    assert!(!dropped.is_empty(), "the transcriber kept up: the bound was never reached");
    assert_eq!(transcribed.len() + dropped.len(), heard.len(), "a line was neither transcribed nor dropped");
    // The ears' bound, plus the one line being transcribed and the one just handed over.
    assert!(most <= EARS_HELD + 2, "{most} lines waited at once: {waiting:?}");
    // Flat: the ears' high-water mark (their bound and the two lines in flight, at 16 kHz mono as
    // they hold a line) may stay with the allocator after they empty, with its own steps (512
    // KiB); a floor that kept each line it heard would hold lines - 5 lines more than at line 5.
    let line_kib = line_ms * 32 / 1024;
    let allowed = 512 + (EARS_HELD as u64 + 2) * line_kib;
    assert!((lines as u64 - 5) * line_kib > 3 * allowed / 2, "too few lines to tell a leak from the ears' bound");
    let grew = memory[1].saturating_sub(memory[0]);
    println!(
        "voice_actor: the floor's anonymous memory grew {grew} KiB over {} lines once they were settled (allowed {allowed} KiB)",
        lines - 5
    );
    assert!(
        grew <= allowed,
        "the floor's memory grew from {} to {} KiB once every line was settled, past {allowed} KiB",
        memory[0],
        memory[1]
    );
}
