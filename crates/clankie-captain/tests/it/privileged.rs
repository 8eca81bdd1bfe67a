use clankie_model_standin::{Reply, Script};
use clankie_proto::{LaneKey, v1};

use super::{CHANNEL, GUILD, Rig, author_id, kind};

fn tool_names(request: &clankie_model_standin::RecordedRequest) -> Vec<String> {
    request.body["tools"].as_array().into_iter().flatten().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn a_granted_operator_gets_a_one_shot_turn_and_the_grant_ends_with_it() {
    let rig = Rig::new().await;
    let grants = [("CLANKIE_OPERATOR_GRANTS", author_id("root").to_string())];
    let (_captain, _task) = rig.captain_with("captain-a", &grants).await;
    let lane = LaneKey::Room { guild: GUILD, channel: CHANNEL };

    rig.standin.script(Script::any(Reply::tool("describe_runtime", serde_json::json!({}))));
    rig.standin.script(Script::any(Reply::text("Running on captain-a.")));
    let op = rig.say("root", "@Clankie which replica are you on?", true).await;
    rig.wait_outcomes(&[op]).await;
    assert_eq!(kind(&rig.outcome_of(op)[0]), v1::OutcomeKind::Replied);
    let requests = rig.standin.requests();
    assert!(tool_names(&requests[0]).contains(&"describe_runtime".to_owned()));
    assert_eq!(requests[1].count("replica captain-a"), 1, "the elevated tool ran");

    let one_shot = format!("turns/{lane}~{op}");
    assert!(!rig.store.entries(&one_shot).await.unwrap().is_empty(), "the turn's evidence tree is {one_shot}");
    assert!(
        rig.store.entries(&format!("rooms/{lane}")).await.unwrap().is_empty(),
        "a privileged turn never writes the room's durable tree"
    );
    let mode: String = sqlx::query_scalar("SELECT mode FROM turns").fetch_one(rig.store.pool()).await.unwrap();
    assert_eq!(mode, "one_shot");

    // The next speaker, not granted, gets an ordinary durable turn without the elevated tool.
    rig.standin.script(Script::any(Reply::text("hi bob")));
    let next = rig.say("bob", "@Clankie hello", true).await;
    rig.wait_outcomes(&[next]).await;
    let last = rig.standin.requests().pop().unwrap();
    assert!(!tool_names(&last).contains(&"describe_runtime".to_owned()), "the grant outlived its turn");
    assert!(!rig.store.entries(&format!("rooms/{lane}")).await.unwrap().is_empty());
}
