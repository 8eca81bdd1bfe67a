//! A gateway resume replays the message Clankie is answering. It is still answered once.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::{Family, v1};
use clankie_sandbox::rig::{GENERAL, Rig, until};

#[tokio::test]
async fn gateway_redelivery_after_a_resume_gets_one_answer() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(Reply::Text {
        text: "Lobby 4, at eight.".into(),
        chunk_chars: 2,
        chunk_delay_ms: 120,
        first_delay_ms: 200,
        tail_delay_ms: 0,
    }));
    let id = rig.say(GENERAL, "ada", "@Clankie which lobby?");
    rig.standin.wait_for_requests(1, Duration::from_secs(20)).await;
    // Mid-answer the connection drops and the resume replays the question.
    rig.sandbox.discord.drop_and_replay(1);
    until("the replayed ingress", Duration::from_secs(20), || {
        receipts.all().iter().filter(|r| r.kind == "gateway.ingress" && r.delivery_id == id.to_string()).count() == 2
    })
    .await;
    rig.wait_outcomes(GENERAL, &[id]).await;
    // A sentinel in the same lane runs after anything the replay could still cause, and its reply is posted after theirs.
    rig.standin.script(Script::any(Reply::text("Sentinel answered.")));
    let sentinel = rig.say(GENERAL, "bob", "@Clankie sentinel");
    rig.wait_outcomes(GENERAL, &[sentinel]).await;
    until("the sentinel's reply", Duration::from_secs(20), || {
        rig.sandbox.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(sentinel))
    })
    .await;
    let posts = rig.sandbox.discord.posts(GENERAL);
    let answered: Vec<Option<u64>> = posts.iter().map(|p| p.reply_to).collect();
    assert_eq!(answered, [Some(id), Some(sentinel)], "{posts:?}");
    assert_eq!(rig.standin.requests().len(), 2, "one turn for the question, one for the sentinel");
    let replay = receipts.all().into_iter().filter(|r| r.kind == "gateway.ingress" && r.delivery_id == id.to_string()).collect::<Vec<_>>();
    assert_eq!(replay.iter().filter(|r| r.flags["duplicate"]).count(), 1);
}
