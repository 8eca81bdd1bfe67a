//! `clankie self` against a running stack: what a person changes reaches every
//! lane's next turn, with no restart.

use std::time::Duration;

use clankie_model_standin::{RecordedRequest, Reply, Script};
use clankie_proto::{Family, v1};
use clankie_sandbox::rig::{GENERAL, Rig, until};
use clankie_store::{MemoryStatus, Store};
use serde_json::json;

const LOBBIES: u64 = 201;
const VOICE: u64 = 300;
const DM: u64 = 900;

fn system_of(r: &RecordedRequest) -> String {
    r.messages().iter().filter(|m| m["role"] == "system").filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n")
}

async fn clankie_self(rig: &Rig, args: &[&str]) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
        .arg("self")
        .args(args)
        .env("CLANKIE_DATABASE_URL", &rig.settings.database_url)
        .env("CLANKIE_NATS_URL", &rig.nats_url)
        .env("CLANKIE_STATE_DIR", rig.settings.state_root.display().to_string())
        .output()
        .await
        .expect("clankie self");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "clankie self {args:?} failed: {}{}", stdout, String::from_utf8_lossy(&out.stderr));
    stdout
}

#[tokio::test]
async fn an_approved_memory_reaches_every_lane_and_a_pending_one_reaches_none() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let speaks = clankie_testkit::record::<v1::Speak>(&bus, Family::VoiceSpeak).await;
    // He proposes two memories through his tool, in one room.
    rig.standin.script(Script::when("remember", Reply::tool("propose_memory", json!({ "fact": "Lobby nights are Fridays (osprey)." }))));
    rig.standin.script(Script::when("remember", Reply::tool("propose_memory", json!({ "fact": "Gil prefers the EU servers (heron)." }))));
    rig.standin.script(Script::when("remember", Reply::text("I'll ask to keep both.")));
    let id = rig.say(GENERAL, "gil", "@Clankie remember: lobby nights are fridays, and I like EU servers");
    rig.wait_outcomes(GENERAL, &[id]).await;

    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    let proposed = store.memories(MemoryStatus::Proposed, 10).await.unwrap();
    assert_eq!(proposed.len(), 2, "{proposed:?}");
    let osprey = proposed.iter().find(|m| m.fact.contains("osprey")).expect("the osprey proposal");
    assert_eq!(osprey.proposed_in, format!("room:100:{GENERAL}"));
    let listed = clankie_self(&rig, &["proposals"]).await;
    assert!(listed.contains(&format!("#{}", osprey.id)) && listed.contains("heron"), "{listed}");
    let before = rig.standin.requests().len();
    assert!(rig.standin.requests().iter().all(|r| !system_of(r).contains("osprey")), "a proposal reached a prompt before approval");

    assert!(clankie_self(&rig, &["approve", &osprey.id.to_string()]).await.contains("approved"));

    // The next turn of every lane: the warm room, a cold room, a DM and the voice room.
    let ids = [rig.say(GENERAL, "gil", "@Clankie and now?"), rig.say(LOBBIES, "ada", "@Clankie hi"), rig.say(DM, "dee", "hello")];
    for (channel, id) in [GENERAL, LOBBIES, DM].into_iter().zip(ids) {
        rig.wait_outcomes(channel, &[id]).await;
    }
    rig.voice_live(VOICE, "ada").await;
    rig.say(VOICE, "ada", "clankie, are you there?");
    until("the voice answer", Duration::from_secs(20), || !speaks.all().is_empty()).await;

    let after: Vec<RecordedRequest> = rig.standin.requests().into_iter().skip(before).collect();
    for place in [
        format!("guild text channel {GENERAL}"),
        format!("guild text channel {LOBBIES}"),
        "a private DM".into(),
        format!("voice channel {VOICE}"),
    ] {
        let theirs: Vec<&RecordedRequest> = after.iter().filter(|r| system_of(r).contains(&place)).collect();
        assert!(!theirs.is_empty(), "no request in {place}");
        for r in theirs {
            let system = system_of(r);
            assert!(system.contains("Lobby nights are Fridays (osprey)."), "the approved memory is missing in {place}: {system}");
            assert!(!system.contains("heron"), "the pending proposal reached {place}");
        }
    }
    // Outside the room where he proposed it (his own session holds his tool call), it appears nowhere.
    for r in after.iter().filter(|r| !system_of(r).contains(&format!("guild text channel {GENERAL}"))) {
        assert!(!r.all_text().contains("heron"));
    }
}

#[tokio::test]
async fn a_persona_edit_reaches_a_warm_lane_without_a_restart() {
    let rig = Rig::new().await;
    let first = rig.say(GENERAL, "ada", "@Clankie hello there");
    rig.wait_outcomes(GENERAL, &[first]).await;
    until("the lane kept warm", Duration::from_secs(5), || rig.sandbox.captain.warm_lanes() == 1).await;

    let saved = clankie_self(&rig, &["persona", "--sheet", "A retired albatross pilot who loves bad puns.", "--style", "dry"]).await;
    assert!(saved.contains("persona saved"), "{saved}");
    let second = rig.say(GENERAL, "ada", "@Clankie still you?");
    rig.wait_outcomes(GENERAL, &[second]).await;

    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    assert!(!system_of(&requests[0]).contains("albatross"));
    let system = system_of(&requests[1]);
    assert!(system.contains("<character>\nA retired albatross pilot who loves bad puns.\n</character>"), "{system}");
    assert!(system.contains("How you speak: dry"));
    // Warm: the second request carries the first exchange as the lane's own turns, not as history.
    let conversation: String =
        requests[1].messages().iter().filter(|m| m["role"] != "system").map(|m| m["content"].to_string()).collect::<Vec<_>>().join("\n");
    assert!(conversation.contains("hello there") && !conversation.contains("untrusted_channel_history"), "{conversation}");
    let shown = clankie_self(&rig, &["show"]).await;
    assert!(shown.contains("albatross") && shown.contains("persona (version 1)"), "{shown}");
}

#[tokio::test]
async fn bad_input_to_clankie_self_is_refused_with_a_reason() {
    let rig = Rig::new().await;
    for (args, reason) in [
        (vec!["approve", "999"], "memory #999 is not proposed"),
        (vec!["settings", "--guilds", "12,abc"], "\"abc\" is not a Discord id"),
        (vec!["settings", "--sharing", "everyone"], "neither `guild` nor `none`"),
        (vec!["settings", "--owner", "1,2"], "--owner takes one Discord id"),
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
            .arg("self")
            .args(&args)
            .env("CLANKIE_DATABASE_URL", &rig.settings.database_url)
            .output()
            .await
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
    }
    let long = "x".repeat(301);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
        .args(["self", "remember", &long])
        .env("CLANKIE_DATABASE_URL", &rig.settings.database_url)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("at most 300"));
}

#[tokio::test]
async fn owner_settings_narrow_where_he_is_admitted_without_a_restart() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    clankie_self(&rig, &["settings", "--guilds", "100", "--channels", &LOBBIES.to_string()]).await;
    let outside = rig.say(GENERAL, "ada", "@Clankie are you there?");
    let inside = rig.say(LOBBIES, "ada", "@Clankie are you there?");
    rig.wait_outcomes(LOBBIES, &[inside]).await;
    until("the refusal receipt", Duration::from_secs(10), || {
        receipts.all().iter().any(|r| r.kind == "captain.not_admitted" && r.delivery_id == outside.to_string())
    })
    .await;
    let refusal = receipts.all().into_iter().find(|r| r.kind == "captain.not_admitted" && r.delivery_id == outside.to_string()).unwrap();
    assert_eq!(refusal.codes, ["not_admitted_here"]);
    assert_eq!(rig.standin.requests().len(), 1, "only the admitted channel reached the model");
    assert!(rig.sandbox.discord.posts(GENERAL).is_empty());

    clankie_self(&rig, &["settings", "--channels", ""]).await;
    let again = rig.say(GENERAL, "ada", "@Clankie and now?");
    rig.wait_outcomes(GENERAL, &[again]).await;
    assert_eq!(rig.sandbox.discord.posts(GENERAL).len(), 1);
}
