//! `anthropic_` through the real captain: a durable lane on Claude's wire reads its prompt
//! from the stand-in's cache, which keeps Anthropic's rules.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_store::{Persona, Store};
use serde_json::Value;

use super::{GENERAL, Rig};

fn sheet(name: &str) -> String {
    format!("{name} is a friendly robot who remembers the room, keeps answers short and never pretends to know what he does not. ")
        .repeat(30)
}

/// The newest presence line a request carries (`Elsewhere now: …`), if any.
fn presence_told(text: &str) -> Option<String> {
    let at = text.rfind("Elsewhere now: ")?;
    Some(text[at..].lines().next().unwrap_or_default().trim_end_matches(['"', '\\']).to_owned())
}

#[tokio::test]
async fn anthropic_a_durable_lanes_turns_read_their_prompt_from_the_cache_presence_changes_keep_it_and_a_persona_change_costs_one_turn() {
    let rig = Rig::with(&[("CLANKIE_MODEL_PROVIDER", "anthropic")]).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    store.set_persona(&Persona { character_sheet: sheet("Clankie"), ..Default::default() }).await.unwrap();
    let bus = rig.bus().await;
    let guild = rig.sandbox.discord.config().guild_id;
    let voice = rig.sandbox.discord.config().channels.iter().find(|c| c.voice).map_or(300, |c| c.id);
    let (mut shares, mut presence) = (vec![], vec![]);
    for turn in 0..6u64 {
        if turn == 4 {
            store.set_persona(&Persona { character_sheet: sheet("Clanky"), ..Default::default() }).await.unwrap();
        }
        // Between turns he comes and goes in voice: his presence changes, as the time does.
        let session = clankie_proto::v1::VoiceSession {
            guild_id: guild,
            channel_id: (turn % 2 == 1).then_some(voice),
            session_id: format!("anthropic-{turn}"),
            updated_at_ms: clankie_bus::now_ms(),
            live_until_ms: 0,
        };
        bus.publish(&clankie_proto::Subject::VoiceSession { guild }, &session, None).await.unwrap();
        // Read where the self reads it: the turn's snapshot takes the last session published.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while bus
            .last::<clankie_proto::v1::VoiceSession>(&clankie_proto::Subject::VoiceSession { guild })
            .await
            .unwrap()
            .is_none_or(|s| s.session_id != session.session_id)
        {
            assert!(tokio::time::Instant::now() < deadline, "the presence change of turn {turn} was never readable");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        rig.standin.script(Script::any(Reply::text(format!("Answer {turn}: the lobby opens at eight."))));
        let before = rig.standin.requests().len();
        let said = rig.say(GENERAL, "ada", &format!("@Clankie question {turn}: is the lobby up?"));
        rig.wait_outcomes(GENERAL, &[said]).await;
        let requests = rig.standin.requests();
        assert_eq!(requests.len(), before + 1, "one model call per turn");
        let r = requests.last().unwrap();
        assert!(r.body["system"][0]["cache_control"].is_object(), "the system prompt ends in a breakpoint");
        let marks = r.body.to_string().matches("\"cache_control\"").count();
        let his = r.body["messages"].as_array().unwrap().iter().rev().skip(1).any(|m| m["role"] == "assistant");
        assert_eq!(marks, 3 + usize::from(his), "tools, system prompt, his last message once there is one, conversation");
        shares.push(r.cached_estimate as f64 / r.token_estimate as f64);
        presence.push(presence_told(&r.all_text()));
    }
    println!("anthropic through the captain: presence told per turn {presence:?}");
    // Each change of presence reached the turn after it, as a note appended to the conversation
    // (the cached prefix before it unchanged): in voice on the odd turns, nowhere on the even.
    let in_voice = format!("voice channel {voice}");
    assert!(presence[0].as_deref().is_none_or(|p| !p.contains(&in_voice)), "{presence:?}");
    for (turn, told) in presence.iter().enumerate().skip(1) {
        let told = told.as_deref().unwrap_or_else(|| panic!("turn {turn}'s request told no presence: {presence:?}"));
        assert_eq!(told.contains(&in_voice), turn % 2 == 1, "turn {turn} was told {told:?}: {presence:?}");
    }
    println!("anthropic through the captain: cached share per turn {:?}", shares.iter().map(|s| format!("{s:.3}")).collect::<Vec<_>>());
    for (turn, share) in shares.iter().enumerate().filter(|(t, _)| ![0, 4].contains(t)) {
        assert!(*share >= 0.85, "turn {turn} read only {share:.3} from the cache: {shares:?}");
    }
    assert!(shares[4] < 0.85, "the persona changed the prefix: {shares:?}");
    // The turn's receipt carries the reads and writes the provider reported.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let receipts = loop {
        let receipts: Vec<(Value,)> =
            sqlx::query_as("SELECT counts FROM receipts WHERE kind = 'captain.turn' ORDER BY at").fetch_all(store.pool()).await.unwrap();
        if receipts.len() >= 6 {
            break receipts;
        }
        assert!(tokio::time::Instant::now() < deadline, "{} turn receipts of 6 were stored", receipts.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let last = &receipts.last().expect("turn receipts").0;
    let request = rig.standin.requests().pop().unwrap();
    // The store leaves a zero count out.
    assert_eq!(last["cached_input_tokens"].as_u64().unwrap_or(0), request.cached_estimate, "{last}");
    assert_eq!(last["cache_write_input_tokens"].as_u64().unwrap_or(0), request.cache_write_estimate, "{last}");
    // The console's lanes view shows the lane's cached share, from the same counts.
    let lane = clankie_proto::LaneKey::Room { guild, channel: GENERAL }.to_string();
    let view = store.lane_view(&lane).await.unwrap().expect("the lane's view");
    let requests = rig.standin.requests();
    assert_eq!(view.cached_input_tokens as u64, requests.iter().map(|r| r.cached_estimate).sum::<u64>());
    assert_eq!(view.input_tokens as u64, requests.iter().map(|r| r.token_estimate).sum::<u64>());
}

/// The first bytes of a PNG (its signature and the start of its header), base64.
const PNG_BYTES: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB";

/// Ada asking him about a picture in #general.
fn asked_about_a_picture() -> clankie_discord_loopback::NewMessage {
    clankie_discord_loopback::NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: "@Clankie what is this?".into(),
        attachments: vec![clankie_discord_loopback::NewAttachment {
            filename: "map.png".into(),
            content_type: "image/png".into(),
            // A PNG's signature and header: Claude refuses bytes that are no picture of their type.
            base64: Some(PNG_BYTES.into()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn anthropic_a_picture_reaches_claude_as_an_image_block_through_the_captain() {
    let rig = Rig::with(&[("CLANKIE_MODEL_PROVIDER", "anthropic")]).await;
    rig.standin.script(Script::any(Reply::text("That's the lobby map.")));
    let asked = rig.sandbox.discord.user_message(asked_about_a_picture());
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let request = &rig.standin.requests()[0];
    let images: Vec<&Value> =
        request.messages().iter().filter_map(|m| m["content"].as_array()).flatten().filter(|b| b["type"] == "image").collect();
    assert_eq!(images.len(), 1, "the picture reached Claude as an image block");
    assert_eq!(images[0]["source"]["type"], "base64");
    assert_eq!(images[0]["source"]["media_type"], "image/png");
    assert_eq!(images[0]["source"]["data"], PNG_BYTES, "the block carries the stored bytes");
    assert!(rig.sandbox.discord.posts(GENERAL).iter().any(|p| p.content == "That's the lobby map."));
}

/// A picture shown in one turn stays in the conversation until a compaction, so the next turn
/// repeats the last request byte for byte and reads all of it from the cache.
#[tokio::test]
async fn anthropic_a_picture_in_one_turn_is_read_whole_from_the_cache_by_the_next() {
    let rig = Rig::with(&[("CLANKIE_MODEL_PROVIDER", "anthropic")]).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    store.set_persona(&Persona { character_sheet: sheet("Clankie"), ..Default::default() }).await.unwrap();
    rig.standin.script(Script::any(Reply::text("That's the lobby map.")));
    rig.standin.script(Script::any(Reply::text("Any time.")));
    let asked = rig.sandbox.discord.user_message(asked_about_a_picture());
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let thanked = rig.say(GENERAL, "ada", "@Clankie thanks");
    rig.wait_outcomes(GENERAL, &[thanked]).await;
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2, "the picture's turn and the thanks");
    let images = |r: &clankie_model_standin::RecordedRequest| {
        r.messages().iter().filter_map(|m| m["content"].as_array()).flatten().filter(|b| b["type"] == "image").count()
    };
    assert_eq!((images(&requests[0]), images(&requests[1])), (1, 1), "the next turn still shows the picture");
    let (before, after) = (&requests[0], &requests[1]);
    println!(
        "anthropic: the picture's turn {} tokens; the next read {} from the cache, wrote {}, of {}",
        before.token_estimate, after.cached_estimate, after.cache_write_estimate, after.token_estimate
    );
    assert!(
        after.cached_estimate >= before.token_estimate,
        "the next turn read {} tokens from the cache, less than the picture's turn's whole prompt of {}",
        after.cached_estimate,
        before.token_estimate
    );
}

/// Anthropic bills a call from its `message_start`: a stream that drops after it is on the
/// invoice, so the turn's receipt counts it beside the retry that answered.
#[tokio::test]
async fn usage_a_stream_dropped_after_message_start_is_in_the_receipt() {
    let rig = Rig::with(&[("CLANKIE_MODEL_PROVIDER", "anthropic")]).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    rig.standin.script(Script::any(Reply::Drop { text_before: String::new() }));
    rig.standin.script(Script::any(Reply::text("The lobby opens at eight.")));
    let said = rig.say(GENERAL, "ada", "@Clankie when does the lobby open?");
    rig.wait_outcomes(GENERAL, &[said]).await;
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2, "the dropped call and the retry that answered");
    let billed: u64 = requests.iter().map(|r| r.token_estimate).sum();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let counts = loop {
        let row: Option<(Value,)> = sqlx::query_as("SELECT counts FROM receipts WHERE kind = 'captain.turn' AND delivery_id = $1")
            .bind(said.to_string())
            .fetch_optional(store.pool())
            .await
            .unwrap();
        if let Some((counts,)) = row {
            break counts;
        }
        assert!(tokio::time::Instant::now() < deadline, "the turn's receipt was never stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "usage: the dropped call {} input tokens, the retry {}, the receipt {}",
        requests[0].token_estimate, requests[1].token_estimate, counts["input_tokens"]
    );
    assert_eq!(counts["input_tokens"].as_u64(), Some(billed), "the dropped call's input is missing from the receipt: {counts}");
}

/// The voice room's request is rebuilt at every line heard: the room block is new each time, so
/// a breakpoint after it would write at 1.25x what no later request reads. Its marks end the
/// tools, the system prompt and the self-context, which the next run repeats.
#[tokio::test]
async fn anthropic_the_voice_rooms_requests_mark_their_self_context_and_never_the_room_block() {
    const VOICE: u64 = 300;
    let rig = Rig::with(&[("CLANKIE_MODEL_PROVIDER", "anthropic")]).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    store.set_persona(&Persona { character_sheet: sheet("Clankie"), ..Default::default() }).await.unwrap();
    rig.voice_live(VOICE, "ada").await;
    // The voice persona's system prompt says its words are spoken aloud; a text lane's never does.
    let voice_requests = || rig.standin.requests().into_iter().filter(|r| r.body.to_string().contains("spoken aloud")).collect::<Vec<_>>();
    for round in 0..2 {
        let token = format!("[vc-{round}]");
        rig.standin.script(Script::when(&token, Reply::text(format!("Blue team leads, round {round}."))));
        rig.say(VOICE, "ada", &format!("clankie {token} who is winning?"));
        super::until("the voice room's request", Duration::from_secs(20), || voice_requests().len() > round).await;
    }
    let requests = voice_requests();
    for r in &requests {
        let blocks = r.body["messages"][0]["content"].as_array().expect("the self-context and the room block, one user turn");
        assert!(blocks.len() >= 2, "{}", r.body);
        assert!(blocks[0]["cache_control"].is_object(), "the self-context ends in a breakpoint: {}", r.body);
        let after: usize = r.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .skip(1)
            .filter(|b| b.get("cache_control").is_some())
            .count();
        assert_eq!(after, 0, "no breakpoint after the self-context: {}", r.body);
        println!(
            "anthropic: a voice request of {} tokens read {} and wrote {}",
            r.token_estimate, r.cached_estimate, r.cache_write_estimate
        );
        // The room block is billed plain: neither read from the cache nor written to it.
        assert!(r.cached_estimate + r.cache_write_estimate < r.token_estimate, "the room block went to the cache");
    }
}

/// What every room's system prompt shares (who he is, his people, memory, the rules) comes
/// before what is one room's alone, and is marked apart: a room's first turn reads it from the
/// cache another room's turn wrote, instead of writing it again at 1.25x.
#[tokio::test]
async fn anthropic_a_rooms_first_turn_reads_the_shared_persona_another_room_wrote() {
    const LOBBIES: u64 = 201;
    let rig = Rig::with(&[("CLANKIE_MODEL_PROVIDER", "anthropic")]).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    store.set_persona(&Persona { character_sheet: sheet("Clankie"), ..Default::default() }).await.unwrap();
    let mut firsts = Vec::new();
    for channel in [GENERAL, LOBBIES] {
        rig.standin.script(Script::any(Reply::text("The lobby opens at eight.")));
        let before = rig.standin.requests().len();
        let said = rig.say(channel, "ada", "@Clankie is the lobby up?");
        rig.wait_outcomes(channel, &[said]).await;
        firsts.push(rig.standin.requests()[before].clone());
    }
    let (general, lobbies) = (&firsts[0], &firsts[1]);
    let shared = general.body["system"][0]["text"].as_str().expect("the shared part, a block of its own").to_owned();
    assert_eq!(lobbies.body["system"][0]["text"].as_str(), Some(shared.as_str()), "both rooms share it byte for byte");
    assert_ne!(general.body["system"][1], lobbies.body["system"][1], "each room's own part is its own");
    println!(
        "anthropic: #general's first turn {} tokens, wrote {}; #lobbies' first turn {} tokens, read {} from the cache, wrote {}",
        general.token_estimate, general.cache_write_estimate, lobbies.token_estimate, lobbies.cached_estimate, lobbies.cache_write_estimate
    );
    assert!(lobbies.cached_estimate >= 1_024, "the second room's first turn read the shared part from the cache");
}
