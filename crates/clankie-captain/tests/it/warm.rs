use clankie_captain::prompt::HISTORY_OPEN;
use clankie_model_standin::{Reply, Script};

use super::{DumpLogsOnPanic, GUILD, Rig, spawn_captain};

/// The rule (seed ADR 0118): a lane's session is sent the room's history when it opens cold and
/// never again while warm; a session resumed from the store after a restart is sent only what
/// it has not heard. Across the three turns the model sees every line of the room exactly once.
#[tokio::test]
async fn a_warm_lane_is_never_resent_its_history_and_a_restart_reads_cold() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    // Not addressed to him and before any exchange: not admitted, but they are the room's history.
    rig.say_as(1, "cy", "earlier chatter about brackets", false, Some(GUILD)).await;
    rig.say_as(2, "dee", "who is playing tonight", false, Some(GUILD)).await;
    let mut captain = spawn_captain(&rig, "captain-a");
    rig.standin.script(Script::any(Reply::text("reply alpha")));
    let m1 = rig.say("ada", "@Clankie what did I miss?", true).await;
    rig.wait_outcomes(&[m1]).await;
    rig.posted_by_him("reply alpha");
    rig.standin.script(Script::any(Reply::text("reply beta")));
    let m2 = rig.say("ada", "@Clankie and now?", true).await;
    rig.wait_outcomes(&[m2]).await;
    rig.posted_by_him("reply beta");

    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].count(HISTORY_OPEN), 1, "a cold lane walks in with the room's history");
    assert_eq!(requests[0].count("earlier chatter about brackets"), 1);
    assert_eq!(requests[1].count(HISTORY_OPEN), 1, "the warm lane holds its one block and is sent no second copy");
    for line in ["earlier chatter about brackets", "what did I miss?", "reply alpha"] {
        assert_eq!(requests[1].count(line), 1, "warm turn: {line:?}");
    }

    // A real restart: the process dies and a new one holds nothing warm.
    captain.start_kill().unwrap();
    captain.wait().await.unwrap();
    // The room goes on while he is away.
    rig.overheard("eve", "the stream starts soon");
    let _captain = spawn_captain(&rig, "captain-a");
    rig.standin.script(Script::any(Reply::text("reply gamma")));
    let m3 = rig.say("ada", "@Clankie back?", true).await;
    rig.wait_outcomes(&[m3]).await;
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 3);
    let cold = &requests[2];
    for line in [
        "earlier chatter about brackets",
        "who is playing tonight",
        "what did I miss?",
        "reply alpha",
        "and now?",
        "reply beta",
        "the stream starts soon",
        "back?",
    ] {
        assert_eq!(cold.count(line), 1, "after the restart the model saw {line:?} {} times", cold.count(line));
    }
}

/// Seed ADR 0124 with providers' prefix caches in mind: the system prompt holds nothing that
/// changes turn by turn, so a warm lane's next request is its last one with the new turn
/// appended. Where else he is and what he lived elsewhere arrive as a late self-context
/// message, sent again only when it changed.
#[tokio::test]
async fn prefix_stable_a_warm_lane_with_a_new_voice_presence_and_experience_between_turns_extends_its_last_request() {
    let rig = Rig::new().await;
    let (captain, _task) = rig.captain("captain-a").await;
    rig.standin.script(Script::any(Reply::text("reply alpha")));
    let m1 = rig.say("ada", "@Clankie hello", true).await;
    rig.wait_outcomes(&[m1]).await;
    // The outcome goes out before the run puts its session back.
    super::until("the lane kept warm", std::time::Duration::from_secs(5), || captain.warm_lanes() == 1).await;

    // Between the turns he joins a voice channel of the guild and lives something there.
    let voice = clankie_proto::LaneKey::Voice { guild: GUILD, channel: 300 };
    let session = clankie_proto::v1::VoiceSession {
        guild_id: GUILD,
        channel_id: Some(300),
        session_id: "s".into(),
        updated_at_ms: 1,
        live_until_ms: 0,
    };
    rig.bus.publish(&clankie_proto::Subject::VoiceSession { guild: GUILD }, &session, None).await.unwrap();
    let lived = clankie_self::experience::talked(
        &voice,
        &[clankie_self::experience::Participant { id: 2, name: "bob" }],
        "v1",
        clankie_bus::now_ms(),
    );
    rig.store.insert_experience(&lived, std::time::Duration::from_secs(3600)).await.unwrap();

    rig.standin.script(Script::any(Reply::text("reply beta")));
    let m2 = rig.say("ada", "@Clankie and now?", true).await;
    rig.wait_outcomes(&[m2]).await;
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    let (first, second) = (requests[0].messages(), requests[1].messages());
    assert_eq!(&second[..first.len()], first, "the second request does not start with the first one's messages");
    let added: Vec<String> = second[first.len()..].iter().map(|m| m["content"].to_string()).collect();
    assert_eq!(added.len(), 2, "his answer, then the self-context and the new message as one user turn: {added:?}");
    assert!(added[0].contains("reply alpha"));
    assert!(
        added[1].contains(clankie_self::SELF_CONTEXT_OPEN.lines().next().unwrap()) && added[1].contains("voice channel 300"),
        "{added:?}"
    );
    assert!(added[1].contains("I was talking in the voice channel 300 with bob."), "{added:?}");
    let (note_at, message_at) = (added[1].find("</self_context>").unwrap(), added[1].find("and now?").unwrap());
    assert!(note_at < message_at, "the self-context comes just before the new input: {added:?}");

    // Nothing changed since: the third request adds no second self-context.
    rig.standin.script(Script::any(Reply::text("reply gamma")));
    let m3 = rig.say("ada", "@Clankie still there?", true).await;
    rig.wait_outcomes(&[m3]).await;
    let third = rig.standin.requests().pop().unwrap();
    assert_eq!(&third.messages()[..second.len()], second);
    assert_eq!(third.count("</self_context>"), 1, "an unchanged self-context was sent again");
}

/// Every line of the room's history in the lane's tree, one string per entry.
async fn tree_texts(rig: &Rig) -> Vec<String> {
    let tree = format!("rooms/{}", clankie_proto::LaneKey::Room { guild: GUILD, channel: super::CHANNEL });
    rig.store.entries(&tree).await.unwrap().iter().map(|e| e.body.to_string()).collect()
}

/// Seed ADR 0118 across replicas: two captains take turns on one lane (each hands it over by
/// stopping), so every turn opens where the other left off. Warm or not is read from the stored
/// tree: no turn after the first is sent a history line the tree already holds, and the tree
/// holds each line of the room once.
#[tokio::test]
async fn warm_across_replicas_two_captains_alternating_turns_never_resend_or_restore_a_history_line() {
    let rig = Rig::new().await;
    rig.say_as(1, "cy", "earlier chatter about brackets", false, Some(GUILD)).await;
    let (a, task_a) = rig.captain("captain-a").await;
    let (b, task_b) = rig.captain("captain-b").await;
    task_b.abort();
    let _ = task_b.await;
    let mut running = Some(task_a);
    let overheard = ["line one of the room", "line two of the room", "line three of the room", "line four of the room"];
    let replies = ["reply alpha", "reply beta", "reply gamma", "reply delta"];
    for turn in 0..4 {
        let on = if turn % 2 == 0 { &a } else { &b };
        if turn > 0 {
            // Hand over: the other replica stops, this one starts; the room talked meanwhile.
            if let Some(t) = running.take() {
                t.abort();
                let _ = t.await;
            }
            let c = on.clone();
            running = Some(tokio::spawn(async move {
                let _ = c.run().await;
            }));
            rig.overheard("eve", overheard[turn]);
        }
        let before = tree_texts(&rig).await;
        rig.standin.script(Script::any(Reply::text(replies[turn])));
        let id = rig.say("ada", &format!("@Clankie question {turn}"), true).await;
        rig.wait_outcomes(&[id]).await;
        rig.posted_by_him(replies[turn]);
        let ran_on = rig
            .receipts
            .all()
            .into_iter()
            .find(|r| r.kind == "captain.run" && r.delivery_id == id.to_string())
            .and_then(|r| r.ids.get("replica").cloned());
        assert_eq!(ran_on.as_deref(), Some(if turn % 2 == 0 { "captain-a" } else { "captain-b" }), "turn {turn} ran elsewhere");
        let request = rig.standin.requests().pop().unwrap();
        let blocks: Vec<String> =
            request.messages().iter().map(|m| m["content"].to_string()).filter(|c| c.contains(HISTORY_OPEN)).collect();
        assert!(blocks.len() <= 1, "turn {turn} was sent {} history blocks", blocks.len());
        if turn > 0 {
            for line in ["earlier chatter about brackets", "question 0", overheard[1], "reply alpha"] {
                let held = before.iter().any(|t| t.contains(line));
                let resent = blocks.iter().any(|b| b.contains(line));
                assert!(!(held && resent), "turn {turn} was sent {line:?} again, which the tree holds");
            }
        }
    }
    // Only the first turn found the tree empty. A replica's second turn refreshed the copy it
    // kept with what the other appended meanwhile, instead of reading the whole tree again, and
    // built the very context the other replica sent, plus what came after.
    let runs: Vec<_> = rig.receipts.all().into_iter().filter(|r| r.kind == "captain.run").collect();
    let cold: Vec<bool> = runs.iter().filter_map(|r| r.flags.get("cold").copied()).collect();
    assert_eq!(cold, [true, false, false, false]);
    let from_store: Vec<bool> = runs.iter().filter_map(|r| r.flags.get("from_store").copied()).collect();
    assert_eq!(from_store, [true, true, false, false]);
    for r in &runs[2..] {
        assert!(r.counts.get("refreshed_entries").is_some_and(|n| *n > 0), "a refresh read nothing: {:?}", r.counts);
    }
    let requests = rig.standin.requests();
    for pair in requests.windows(2) {
        let (before, now) = (pair[0].messages(), pair[1].messages());
        assert_eq!(&now[..before.len()], before, "a turn on the other replica changed the context it continued");
    }
    let tree = tree_texts(&rig).await.join("\n");
    assert_eq!(tree.matches("earlier chatter about brackets").count(), 1);
    for line in overheard[1..].iter() {
        assert!(tree.matches(line).count() <= 1, "the tree holds {line:?} {} times", tree.matches(line).count());
    }
    for turn in 0..4 {
        assert_eq!(tree.matches(&format!("question {turn}")).count(), 1, "question {turn} is in the tree more than once");
    }
    if let Some(t) = running {
        t.abort();
    }
}

/// The warm cache has a byte budget: a big session in another lane pushes the room's out, and
/// the room's next turn opens its stored tree and sends the model exactly what a warm session
/// would have (ADR 0118: the cache saves loading, never context).
#[tokio::test]
async fn cache_budget_an_evicted_lane_answers_from_its_stored_tree_with_the_same_context() {
    let rig = Rig::new().await;
    let budget = [("CLANKIE_WARM_CACHE_MIB", "1".to_owned()), ("CLANKIE_CONTEXT_BUDGET_TOKENS", "10000000".to_owned())];
    let (captain, _task) = rig.captain_with("captain-a", &budget).await;
    rig.standin.script(Script::any(Reply::text("reply alpha")));
    let first = rig.say("ada", &format!("@Clankie {}", "a long question ".repeat(20_000)), true).await;
    rig.wait_outcomes(&[first]).await;
    super::until("the room kept warm", std::time::Duration::from_secs(5), || captain.warm_lanes() == 1).await;
    let room_bytes = captain.warm_bytes();
    assert!(room_bytes > 300_000, "the room's session weighs {room_bytes}");

    // A DM's session of 800 KB does not fit beside it in 1 MiB: the room, used least recently, goes.
    rig.standin.script(Script::any(Reply::text("reply to the dm")));
    rig.say_in(8_000, "bob", &"a very long dm ".repeat(55_000), 901).await;
    rig.wait_outcomes(&[8_000]).await;
    super::until("the dm kept warm", std::time::Duration::from_secs(5), || captain.warm_bytes() > 800_000).await;
    assert_eq!(captain.warm_lanes(), 1, "the room's session was not let go");
    assert!(captain.warm_bytes() <= 1024 * 1024, "over budget: {}", captain.warm_bytes());

    rig.standin.script(Script::any(Reply::text("reply beta")));
    let second = rig.say("ada", "@Clankie and now?", true).await;
    rig.wait_outcomes(&[second]).await;
    let requests = rig.standin.requests();
    let room: Vec<_> = requests.iter().filter(|r| r.count("a very long dm") == 0).collect();
    assert_eq!(room.len(), 2);
    let (before, after) = (room[0].messages(), room[1].messages());
    assert_eq!(&after[..before.len()], before, "the evicted lane's context changed");
    let added: Vec<String> = after[before.len()..].iter().map(|m| m["content"].to_string()).collect();
    assert_eq!(added.len(), 2, "his answer and the new message, nothing else: {added:?}");
    assert!(added[0].contains("reply alpha") && added[1].contains("and now?"));
    let runs: Vec<_> = rig.receipts.all().into_iter().filter(|r| r.kind == "captain.run").collect();
    let flag = |name: &str| runs.iter().filter_map(|r| r.flags.get(name).copied()).collect::<Vec<bool>>();
    assert_eq!(flag("from_store"), [true, true, true], "the room's second turn opened from the store");
    assert_eq!(flag("cold"), [true, true, false], "the room's stored tree held its conversation, so its second turn was warm");
}
