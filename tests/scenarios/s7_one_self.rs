//! One self, many local threads: a room learns what another thread of the same
//! guild lived as a first-person experience, never as its words; nothing leaves
//! a DM and nothing crosses from one guild to another.

use std::time::Duration;

use clankie_model_standin::{RecordedRequest, Reply, Script};
use clankie_proto::{Family, v1};
use clankie_sandbox::rig::{GENERAL, Rig, until};

const GUILD: u64 = 100;
const LOBBIES: u64 = 201;
const VOICE: u64 = 300;
const OTHER_GUILD_ROOM: u64 = 210;
const DM: u64 = 900;

/// The requests made for one thread, told apart by where its system prompt says he is.
fn requests_in(rig: &Rig, place: &str) -> Vec<RecordedRequest> {
    rig.standin.requests().into_iter().filter(|r| system_of(r).contains(place)).collect()
}

fn system_of(r: &RecordedRequest) -> String {
    r.messages().iter().filter(|m| m["role"] == "system").filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n")
}

async fn store(rig: &Rig) -> clankie_store::Store {
    clankie_store::Store::connect(&rig.settings.database_url).await.expect("store")
}

/// Waits until the shared self has stored an experience of `thread`.
async fn experience_stored(rig: &Rig, thread: &str) {
    let store = store(rig).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let all = store.recent_experiences(None, 100, clankie_bus::now_ms()).await.expect("experiences");
        if all.iter().any(|e| e.thread == thread) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "no experience of {thread} stored: {all:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_text_room_knows_he_was_talking_in_voice_but_not_what_was_said() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let speaks = clankie_testkit::record::<v1::Speak>(&bus, Family::VoiceSpeak).await;
    rig.voice_live(VOICE, "ada").await;
    rig.standin.script(Script::when("spoken aloud", Reply::text("Periwinkle, got it, that's the password then.")));
    rig.say(VOICE, "ada", "clankie the password for tonight is periwinkle");
    until("the voice answer", Duration::from_secs(20), || !speaks.all().is_empty()).await;
    experience_stored(&rig, &format!("voice:{GUILD}:{VOICE}")).await;

    rig.standin.script(Script::when("what have you been up to", Reply::text("Hanging out in voice, mostly.")));
    let id = rig.say(GENERAL, "bob", "@Clankie what have you been up to?");
    rig.wait_outcomes(GENERAL, &[id]).await;

    let text_lane = requests_in(&rig, &format!("guild text channel {GENERAL}"));
    assert_eq!(text_lane.len(), 1, "one model request for the text turn");
    // What he lived elsewhere comes as the turn's self-context, before the new input.
    let seen = text_lane[0].all_text();
    assert!(seen.contains(&format!("I was talking in the voice channel {VOICE} with ada.")), "no voice experience in: {seen}");
    assert!(seen.contains(&format!("Elsewhere now: voice channel {VOICE}.")), "no voice presence in: {seen}");
    let whole = text_lane[0].all_text().to_lowercase();
    for canary in ["periwinkle", "password"] {
        assert!(!whole.contains(canary), "the voice conversation's {canary:?} reached the text lane");
    }
}

#[tokio::test]
async fn nothing_leaves_a_dm_and_nothing_crosses_between_guilds() {
    let rig = Rig::new().await;
    rig.standin.script(Script::when("tangerine", Reply::text("Your secret is safe: tangerine stays here.")));
    let dm = rig.say(DM, "dee", "between us, my secret word is tangerine");
    rig.wait_outcomes(DM, &[dm]).await;
    rig.standin.script(Script::when("marigold", Reply::text("Marigold it is, for this server.")));
    let g = rig.say(GENERAL, "gil", "@Clankie our server's codeword is marigold");
    rig.wait_outcomes(GENERAL, &[g]).await;
    // Both threads' experiences are in the shared self before the other rooms speak,
    // so a leak would have had every chance to happen.
    experience_stored(&rig, &format!("dm:{DM}")).await;
    experience_stored(&rig, &format!("room:{GUILD}:{GENERAL}")).await;

    let h = rig.say(OTHER_GUILD_ROOM, "hal", "@Clankie hello from the other server");
    rig.wait_outcomes(OTHER_GUILD_ROOM, &[h]).await;
    let g2 = rig.say(LOBBIES, "gil", "@Clankie anything new?");
    rig.wait_outcomes(LOBBIES, &[g2]).await;

    let other_guild = requests_in(&rig, &format!("guild text channel {OTHER_GUILD_ROOM}"));
    let same_guild = requests_in(&rig, &format!("guild text channel {LOBBIES}"));
    assert_eq!((other_guild.len(), same_guild.len()), (1, 1));
    // The same guild hears of the other room (so experiences do flow)...
    assert!(same_guild[0].all_text().contains(&format!("I was talking in the text channel {GENERAL} with gil.")));
    // ...but never of the DM, and the other guild hears of neither.
    for (who, r) in [("the same guild", &same_guild[0]), ("the other guild", &other_guild[0])] {
        let text = r.all_text().to_lowercase();
        for canary in ["tangerine", "dee", "a dm"] {
            assert!(!text.contains(canary), "{canary:?} from the DM reached {who}");
        }
    }
    let text = other_guild[0].all_text().to_lowercase();
    for canary in ["marigold", "gil", &format!("channel {GENERAL}")] {
        assert!(!text.contains(canary), "{canary:?} from guild {GUILD} reached the other guild");
    }
    // And no request of any guild lane carries the DM's words.
    for r in rig.standin.requests().iter().filter(|r| !system_of(r).contains("a private DM")) {
        assert!(!r.all_text().to_lowercase().contains("tangerine"));
    }
}
