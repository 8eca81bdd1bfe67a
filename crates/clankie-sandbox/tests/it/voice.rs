use std::time::Duration;

use clankie_bus::Bus;
use clankie_model_standin::{Reply, Script};
use clankie_proto::{Family, Subject, v1};

use clankie_testkit::record;

use super::{Rig, until};

const GUILD: u64 = 100;
const VOICE: u64 = 300;
/// Every voice persona request says this; the captain's never does.
const VOICE_PROMPT: &str = "spoken aloud";

async fn tap(rig: &Rig) -> Bus {
    let settings =
        clankie_settings::Settings::for_endpoints(&rig.nats_url, "postgres://unused@127.0.0.1:1/x", std::path::Path::new("/tmp")).unwrap();
    Bus::connect(&settings, "test").await.unwrap()
}

async fn live(rig: &Rig) {
    rig.voice_live(VOICE, "ada").await;
}

#[tokio::test]
async fn typing_in_the_voice_chat_is_answered_by_the_voice_room_alone() {
    let rig = Rig::new().await;
    let bus = tap(&rig).await;
    let (decisions, speaks) =
        (record::<v1::FloorDecision>(&bus, Family::VoiceFloor).await, record::<v1::Speak>(&bus, Family::VoiceSpeak).await);
    let (text_ingress, transcripts) =
        (record::<v1::Ingress>(&bus, Family::IngressText).await, record::<v1::Transcript>(&bus, Family::VoiceTranscript).await);
    let receipts = record::<v1::Receipt>(&bus, Family::Receipt).await;
    live(&rig).await;
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Something, aloud, marmalade!")));

    let id = rig.say(VOICE, "ada", "say quixotic in vc clankie");
    until("the spoken answer", Duration::from_secs(20), || !speaks.all().is_empty()).await;
    let decided: Vec<_> = decisions.all().into_iter().filter(|d| d.delivery_id == id.to_string()).collect();
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].verdict, v1::FloorVerdict::Wake as i32);
    assert_eq!(decided[0].source, v1::RoomInputSource::Text as i32);
    assert_eq!(speaks.all()[0].text, "Something, aloud, marmalade!");

    // The same delivery again: Discord replays it on a resume, and a copy reaches the floor past JetStream's dedup.
    rig.sandbox.discord.drop_and_replay(1);
    let copy = v1::RoomInput {
        delivery_id: id.to_string(),
        guild_id: GUILD,
        channel_id: VOICE,
        author_name: "ada".into(),
        source: v1::RoomInputSource::Text as i32,
        text: "say quixotic in vc clankie".into(),
        ..Default::default()
    };
    bus.publish(&Subject::IngressRoom { guild: GUILD, channel: VOICE }, &copy, Some(&clankie_bus::MsgId::new("not-the-discord-id")))
        .await
        .unwrap();
    until("the floor's duplicate receipt", Duration::from_secs(20), || receipts.all().iter().any(|r| r.kind == "voice.duplicate")).await;
    let unrelated = rig.say(VOICE, "bob", "nice pumpernickel today");
    until("the next decision", Duration::from_secs(20), || decisions.all().iter().any(|d| d.delivery_id == unrelated.to_string())).await;

    assert_eq!(speaks.all().len(), 1, "one delivery opened one voice response");
    assert!(rig.sandbox.discord.posts(VOICE).is_empty(), "no text reply in the voice chat");
    assert!(text_ingress.all().iter().all(|i| i.delivery_id != id.to_string()), "no captain text turn for it");
    assert!(receipts.all().iter().all(|r| !(r.kind.starts_with("captain.") && r.delivery_id == id.to_string())));

    // Typed text is in the ring with its source, and never on the transcript subject.
    let ring = rig.sandbox.voice.ring(GUILD, VOICE).await.unwrap();
    assert!(ring.iter().any(|l| l.delivery_id == id.to_string() && l.source == v1::RoomInputSource::Text));
    assert!(transcripts.all().is_empty(), "typed text reached speech-transcript subscribers");

    // An unaddressed typed line: heard, not answered, and no text fallback.
    let verdict = decisions.all().into_iter().find(|d| d.delivery_id == unrelated.to_string()).unwrap().verdict;
    assert!([v1::FloorVerdict::Attention as i32, v1::FloorVerdict::Ignore as i32].contains(&verdict));
    // The floor takes a room's inputs in order, so once a later addressed line is spoken
    // anything the unaddressed one caused would already be here.
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Sentinel heard.")));
    let sentinel = rig.say(VOICE, "cy", "clankie sentinel");
    until("the sentinel's answer", Duration::from_secs(20), || speaks.all().iter().any(|s| s.delivery_id == sentinel.to_string())).await;
    let spoken: Vec<String> = speaks.all().into_iter().map(|s| s.delivery_id).collect();
    assert_eq!(spoken, [id.to_string(), sentinel.to_string()], "the unaddressed line was answered aloud");
    assert!(rig.sandbox.discord.posts(VOICE).is_empty());

    // Every receipt of the delivery joins by its id, and none carries its words.
    let trail: Vec<_> = receipts.all().into_iter().filter(|r| r.delivery_id == id.to_string()).collect();
    let kinds: Vec<&str> = trail.iter().map(|r| r.kind.as_str()).collect();
    for kind in ["gateway.ingress", "discord.voice.text_input", "voice.floor", "voice.response", "voice.playback"] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let text_input = trail.iter().find(|r| r.kind == "discord.voice.text_input").unwrap();
    assert_eq!(text_input.counts["chars"], 26);
    assert!(text_input.flags["addressed"]);
    // Single words, so a sentence squeezed into an id would be seen too.
    let everything = format!("{:?}", receipts.all());
    for word in ["quixotic", "marmalade", "pumpernickel"] {
        assert!(!everything.contains(word), "a receipt carried {word:?}");
    }
}

#[tokio::test]
async fn the_voice_room_hands_work_to_the_captain_and_says_what_came_of_it() {
    let rig = Rig::new().await;
    let bus = tap(&rig).await;
    let speaks = record::<v1::Speak>(&bus, Family::VoiceSpeak).await;
    let receipts = record::<v1::Receipt>(&bus, Family::Receipt).await;
    live(&rig).await;
    rig.standin
        .script(Script::when(VOICE_PROMPT, Reply::tool("ask_clankie", serde_json::json!({ "request": "look up when lobby 4 opens" }))));
    rig.standin.script(Script::when("via=\"the voice room\"", Reply::text("Lobby 4 opens at 20:00.")));
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("Lobby four opens at eight tonight.")));
    let id = rig.say(VOICE, "ada", "clankie when does lobby 4 open");
    until("the spoken answer", Duration::from_secs(30), || !speaks.all().is_empty()).await;
    assert_eq!(speaks.all()[0].text, "Lobby four opens at eight tonight.");
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].count("Lobby 4 opens at 20:00."), 1, "the captain's answer came back to the room");
    until("both handoff receipts", Duration::from_secs(5), || {
        let r = receipts.all();
        r.iter().any(|r| r.kind == "voice.handoff" && r.delivery_id == id.to_string())
            && r.iter().any(|r| r.kind == "captain.handoff" && r.delivery_id == id.to_string())
    })
    .await;
    // The captain's run is in the bill: its receipt counts what its model call spent.
    let handoff = receipts.all().into_iter().find(|r| r.kind == "captain.handoff").expect("the captain's handoff receipt");
    assert_eq!(handoff.counts.get("input_tokens").copied(), Some(requests[1].token_estimate as i64), "{handoff:?}");
    assert!(handoff.counts.get("output_tokens").is_some_and(|n| *n > 0), "{handoff:?}");
    assert!(rig.sandbox.discord.posts(VOICE).is_empty(), "the handoff posted nothing in text");
}

#[tokio::test]
async fn an_alias_added_to_the_persona_wakes_him_in_voice_without_a_restart() {
    let rig = Rig::new().await;
    let bus = tap(&rig).await;
    let decisions = record::<v1::FloorDecision>(&bus, Family::VoiceFloor).await;
    live(&rig).await;
    let first = rig.say(VOICE, "ada", "sprocket, is the lobby up?");
    until("the first decision", Duration::from_secs(20), || decisions.all().iter().any(|d| d.delivery_id == first.to_string())).await;

    let store = clankie_store::Store::connect(&rig.settings.database_url).await.unwrap();
    let persona = clankie_store::Persona { aliases: vec!["clanky".into(), "Sprocket".into()], ..store.persona().await.unwrap() };
    store.set_persona(&persona).await.unwrap();
    let second = rig.say(VOICE, "bob", "sprocket, is the lobby up?");
    until("the second decision", Duration::from_secs(20), || decisions.all().iter().any(|d| d.delivery_id == second.to_string())).await;

    let verdict = |id: u64| decisions.all().into_iter().find(|d| d.delivery_id == id.to_string()).map(|d| d.verdict);
    assert_ne!(verdict(first), Some(v1::FloorVerdict::Wake as i32), "woke on a name he did not have yet");
    assert_eq!(verdict(second), Some(v1::FloorVerdict::Wake as i32));
}

#[tokio::test]
async fn voice_steer_a_slow_ask_clankie_does_not_stop_the_room_hearing() {
    let rig = Rig::new().await;
    let bus = tap(&rig).await;
    let decisions = record::<v1::FloorDecision>(&bus, Family::VoiceFloor).await;
    let receipts = record::<v1::Receipt>(&bus, Family::Receipt).await;
    let speaks = record::<v1::Speak>(&bus, Family::VoiceSpeak).await;
    live(&rig).await;
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::tool("ask_clankie", serde_json::json!({ "request": "look up the bracket" }))));
    // The captain's side of the handoff thinks for 1.8 s.
    rig.standin.script(Script::when(
        "via=\"the voice room\"",
        Reply::Text { text: "Bracket starts at nine.".into(), chunk_chars: 64, chunk_delay_ms: 0, first_delay_ms: 1_800, tail_delay_ms: 0 },
    ));
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("The bracket starts at nine.")));
    let asked = rig.say(VOICE, "ada", "clankie when does the bracket start");
    until("the handoff under way", Duration::from_secs(20), || {
        rig.standin.requests().iter().any(|r| r.all_text().contains("via=\"the voice room\""))
    })
    .await;
    // While the captain thinks, the room still hears.
    let meanwhile = rig.say(VOICE, "bob", "nice weather for it");
    until("the floor's decision on the later line", Duration::from_millis(1_500), || {
        decisions.all().iter().any(|d| d.delivery_id == meanwhile.to_string())
    })
    .await;
    assert!(
        !receipts.all().iter().any(|r| r.kind == "voice.handoff" && r.delivery_id == asked.to_string()),
        "the later line was heard only after the handoff ended"
    );
    until("the spoken answer", Duration::from_secs(30), || !speaks.all().is_empty()).await;
    assert_eq!(speaks.all()[0].text, "The bracket starts at nine.");
    // The later line was decided while the captain was still thinking: before the captain's
    // answer could have been written (its request plus the 1.8 s it thinks).
    let captain_asked = rig.standin.requests().iter().find(|r| r.all_text().contains("via=\"the voice room\"")).map(|r| r.at_ms).unwrap();
    let decided = decisions.all().into_iter().find(|d| d.delivery_id == meanwhile.to_string()).map(|d| d.decided_at_ms).unwrap();
    assert!(
        decided < captain_asked + 1_800,
        "the later line waited for the handoff: decided {} ms after the captain was asked",
        decided - captain_asked
    );
}

#[tokio::test]
async fn voice_actor_a_room_closed_while_ask_clankie_runs_and_reopened_gets_one_run() {
    let rig = Rig::with(&[("CLANKIE_VOICE_GRACE_MS", "300")]).await;
    let bus = tap(&rig).await;
    let speaks = record::<v1::Speak>(&bus, Family::VoiceSpeak).await;
    let receipts = record::<v1::Receipt>(&bus, Family::Receipt).await;
    live(&rig).await;
    // The old room's run hands work over and waits 4 s for it.
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::tool("ask_clankie", serde_json::json!({ "request": "look up the lobby" }))));
    rig.standin.script(Script::when(
        "via=\"the voice room\"",
        Reply::Text { text: "Lobby 4 opens at 20:00.".into(), chunk_chars: 40, chunk_delay_ms: 0, first_delay_ms: 4_000, tail_delay_ms: 0 },
    ));
    // What the old run would say once its handoff came back (its request holds the answer).
    rig.standin.script(Script::when("Lobby 4 opens at 20:00.", Reply::text("The old room's answer.")));
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("New room, new run.")));
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("One more, then.")));
    rig.say(VOICE, "ada", "clankie, look up when the lobby opens");
    until("the handoff under way", Duration::from_secs(20), || {
        rig.standin.requests().iter().any(|r| r.all_text().contains("via=\"the voice room\""))
    })
    .await;

    // Everyone leaves: after the grace he leaves and the room closes. Then it opens again.
    rig.sandbox.discord.voice_leave(VOICE, "ada").expect("a voice channel");
    until("the room closed", Duration::from_secs(15), || rig.sandbox.gateway.live_voice_channel(GUILD).is_none()).await;
    rig.voice_live(VOICE, "ada").await;
    rig.say(VOICE, "ada", "clankie, hello again");
    until("the new room's answer", Duration::from_secs(20), || speaks.all().iter().any(|s| s.text == "New room, new run.")).await;

    // The old run's handoff comes back while the new room lives: nothing of it is spoken, and
    // it makes no model call more. The next line is the new room's second run.
    until("the old handoff settled", Duration::from_secs(20), || receipts.all().iter().any(|r| r.kind == "captain.handoff")).await;
    rig.say(VOICE, "ada", "clankie, anything else?");
    until("the next answer", Duration::from_secs(20), || speaks.all().iter().any(|s| s.text == "One more, then.")).await;
    let persona_calls = rig.standin.requests().iter().filter(|r| r.all_text().contains(VOICE_PROMPT)).count();
    let old_run_went_on =
        rig.standin.requests().iter().any(|r| r.all_text().contains(VOICE_PROMPT) && r.count("Lobby 4 opens at 20:00.") > 0);
    let spoken: Vec<String> = speaks.all().into_iter().map(|s| s.text).collect();
    println!("voice_actor: persona calls {persona_calls}, spoken {spoken:?}");
    assert_eq!(spoken, ["New room, new run.", "One more, then."], "the closed room's run spoke in the new one");
    assert!(!old_run_went_on, "the closed room's run went on after its handoff came back");
    assert_eq!(persona_calls, 3);
}
