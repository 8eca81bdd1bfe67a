use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::{LaneKey, v1};

use super::{CHANNEL, GUILD, Rig, kind, until};

#[tokio::test]
async fn a_silent_turn_never_lights_the_room_and_lets_it_age_out() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    let lane = LaneKey::Room { guild: GUILD, channel: CHANNEL };

    rig.standin.script(Script::any(Reply::text("hey ada")));
    let hello = rig.say("ada", "@Clankie hi", true).await;
    rig.wait_outcomes(&[hello]).await;
    let settled = rig.store.exchange(&lane).await.unwrap().expect("a reply refreshes the exchange");

    // Inside the window an unaddressed message is admitted; he declines it.
    rig.standin.script(Script::any(Reply::Text {
        text: "[[stay-silent]]".into(),
        chunk_chars: 1,
        chunk_delay_ms: 5,
        first_delay_ms: 0,
        tail_delay_ms: 0,
    }));
    let typing_before = rig.typing.all().len();
    let aside = rig.say("bob", "lol same", false).await;
    rig.wait_outcomes(&[aside]).await;
    assert_eq!(rig.outcome_of(aside).iter().map(kind).collect::<Vec<_>>(), [v1::OutcomeKind::Silent]);
    assert_eq!(rig.typing.all().len(), typing_before, "a silent turn lit the room");
    assert_eq!(rig.replies().len(), 1);
    assert_eq!(rig.store.exchange(&lane).await.unwrap(), Some(settled), "silence refreshed the exchange");

    // Once the window has passed, unaddressed messages are no longer his.
    let window = Duration::from_millis(1500);
    let store = rig.store.clone();
    let mut live = true;
    let deadline = tokio::time::Instant::now() + window * 4;
    while live {
        assert!(tokio::time::Instant::now() < deadline, "the exchange never aged out");
        live = store.exchange_live(&lane, window).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let requests_before = rig.standin.requests().len();
    let late = rig.say("bob", "anyone around?", false).await;
    until("a not-admitted receipt", Duration::from_secs(10), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.not_admitted" && r.delivery_id == late.to_string())
    })
    .await;
    let refused = rig.receipts.all().into_iter().find(|r| r.delivery_id == late.to_string()).unwrap();
    assert_eq!(refused.codes, vec!["not_addressed".to_owned()]);
    assert!(rig.outcome_of(late).is_empty());
    assert_eq!(rig.standin.requests().len(), requests_before, "no model call for a message that is not his");
}
