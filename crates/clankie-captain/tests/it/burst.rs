use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;

use super::{Rig, kind};

#[tokio::test]
async fn the_seed_burst_gets_one_answer() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    // A slow first answer, so the next two messages arrive while it is being written.
    rig.standin.script(Script::any(Reply::Text {
        text: "Deadlock lobbies open at eight, ".into(),
        chunk_chars: 2,
        chunk_delay_ms: 150,
        first_delay_ms: 100,
        tail_delay_ms: 0,
    }));
    rig.standin.script(Script::any(Reply::text("Lobby 4 opens at 20:00; yes, bring your friend, and the code is in #lobbies.")));

    // Three messages 4 s and 6 s apart in the seed; scaled by ten here.
    let first = rig.say("ada", "@Clankie is the deadlock lobby up?", true).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = rig.say("ada", "the one for tonight", false).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let third = rig.say("ada", "and can I bring a friend?", false).await;
    rig.wait_outcomes(&[first, second, third]).await;

    let replies = rig.replies();
    assert_eq!(replies.len(), 1, "one answer for the burst: {replies:?}");
    assert_eq!(replies[0].reply_to_message_id, Some(third), "threaded onto the newest speaker's message");
    let kinds: Vec<_> = [first, second, third].iter().map(|id| rig.outcome_of(*id).iter().map(kind).collect::<Vec<_>>()).collect();
    assert_eq!(kinds, [vec![v1::OutcomeKind::Replied], vec![v1::OutcomeKind::Absorbed], vec![v1::OutcomeKind::Absorbed]]);
    for id in [first, second, third] {
        let stored = rig.store.outcome(&id.to_string()).await.unwrap().expect("recorded");
        assert_eq!(stored.kind, kind(&rig.outcome_of(id)[0]));
    }
    let starts = rig.typing.all().iter().filter(|t| t.op == v1::TypingOp::Start as i32).count();
    assert_eq!(starts, 1, "one typing start for the whole turn");
    let requests = rig.standin.requests();
    let last = requests.last().unwrap();
    for text in ["is the deadlock lobby up?", "the one for tonight", "and can I bring a friend?"] {
        assert_eq!(last.count(text), 1, "final request lacks {text:?} (or has it twice)");
    }
    let turns: i64 = sqlx::query_scalar("SELECT count(*) FROM turns").fetch_one(rig.store.pool()).await.unwrap();
    assert_eq!(turns, 1, "one run");
}

#[tokio::test]
async fn the_one_shot_baseline_answers_each_message_of_a_burst_with_history_every_time() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain_with("captain-a", &[("CLANKIE_CAPTAIN_ONE_SHOT", "true".into())]).await;
    for _ in 0..3 {
        rig.standin.script(Script::any(Reply::Text {
            text: "An answer.".into(),
            chunk_chars: 2,
            chunk_delay_ms: 40,
            first_delay_ms: 0,
            tail_delay_ms: 0,
        }));
    }
    let first = rig.say("ada", "@Clankie is the deadlock lobby up?", true).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = rig.say("ada", "@Clankie the one for tonight", true).await;
    let third = rig.say("ada", "@Clankie and can I bring a friend?", true).await;
    rig.wait_outcomes(&[first, second, third]).await;
    assert_eq!(rig.replies().len(), 3, "the old design answers every message");
    let turns: Vec<String> = sqlx::query_scalar("SELECT mode FROM turns").fetch_all(rig.store.pool()).await.unwrap();
    assert_eq!(turns, ["one_shot", "one_shot", "one_shot"]);
    // Nothing came before the first message; every later one-shot turn is sent the room's history again.
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests[1..] {
        assert_eq!(request.count(clankie_captain::prompt::HISTORY_OPEN), 1, "every one-shot turn is sent the history");
        assert_eq!(request.count("is the deadlock lobby up?"), 1);
    }
    assert!(rig.outcomes.all().iter().all(|o| kind(o) == v1::OutcomeKind::Replied));
}

/// A second copy of a delivery the captain is still answering (JetStream redelivers it when
/// in-progress acks were lost with a NATS node; here it is published again under another
/// dedup id) joins nothing: the run does not hear it twice and it gets one outcome.
#[tokio::test]
async fn a_copy_of_a_held_delivery_is_not_answered_twice() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    rig.standin.script(Script::any(Reply::Text {
        text: "Writing slowly, ".into(),
        chunk_chars: 2,
        chunk_delay_ms: 150,
        first_delay_ms: 100,
        tail_delay_ms: 0,
    }));
    rig.standin.script(Script::any(Reply::text("Answered once.")));
    let id = rig.say("ada", "@Clankie is the xylophone lobby up?", true).await;
    rig.standin.wait_for_requests(1, Duration::from_secs(10)).await;
    let copy = v1::Ingress {
        delivery_id: id.to_string(),
        guild_id: Some(super::GUILD),
        channel_id: super::CHANNEL,
        author_id: super::author_id("ada"),
        author_name: "ada".into(),
        content: "@Clankie is the xylophone lobby up?".into(),
        mentions_him: true,
        received_at_ms: clankie_bus::now_ms(),
        ..Default::default()
    };
    let subject = clankie_proto::Subject::ingress_text(Some(super::GUILD), super::CHANNEL);
    rig.bus.publish(&subject, &copy, Some(&clankie_bus::MsgId::new("a-second-copy"))).await.unwrap();
    rig.wait_outcomes(&[id]).await;
    // A sentinel through the same lane: anything the copy could still cause comes before it.
    rig.standin.script(Script::any(Reply::text("Sentinel.")));
    let sentinel = rig.say("bob", "@Clankie sentinel", true).await;
    rig.wait_outcomes(&[sentinel]).await;
    super::until("the sentinel's receipt", Duration::from_secs(5), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.outcome" && r.delivery_id == sentinel.to_string())
    })
    .await;
    let replies: Vec<_> = rig.replies().into_iter().filter(|r| r.delivery_id == id.to_string()).collect();
    assert_eq!(replies.len(), 1, "{replies:?}");
    let settled = rig.receipts.all().into_iter().filter(|r| r.kind == "captain.outcome" && r.delivery_id == id.to_string()).count();
    assert_eq!(settled, 1, "the copy was settled too");
    for request in rig.standin.requests() {
        assert!(request.count("xylophone") <= 1, "the run heard the message twice");
    }
}
