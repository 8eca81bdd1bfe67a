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

/// Whether any entry of `tree` mentions `needle`.
async fn tree_mentions(rig: &Rig, tree: &str, needle: &str) -> bool {
    rig.store.entries(tree).await.unwrap().iter().any(|e| e.body.to_string().contains(needle))
}

async fn trust(rig: &Rig, rooms: Vec<u64>) {
    let settings = clankie_store::OwnerSettings {
        owner_id: Some(author_id("root")),
        grants: vec![author_id("root")],
        trusted_rooms: rooms,
        ..Default::default()
    };
    rig.store.set_owner_settings(&settings).await.unwrap();
}

#[tokio::test]
async fn console_system_lane_in_a_trusted_room_two_privileged_requests_share_one_session_and_the_social_lane_holds_neither() {
    let rig = Rig::new().await;
    trust(&rig, vec![CHANNEL]).await;
    let (_captain, _task) = rig.captain("captain-a").await;
    let lane = LaneKey::Room { guild: GUILD, channel: CHANNEL };

    rig.standin.script(Script::any(Reply::text("hi bob")));
    let hello = rig.say("bob", "@Clankie hello", true).await;
    rig.wait_outcomes(&[hello]).await;
    rig.standin.script(Script::any(Reply::text("Noted.")));
    let first = rig.say("root", "@Clankie the vault code is zircon", true).await;
    rig.wait_outcomes(&[first]).await;
    rig.standin.script(Script::any(Reply::text("It was zircon.")));
    let second = rig.say("root", "@Clankie which vault code did I give you", true).await;
    rig.wait_outcomes(&[second]).await;
    for id in [first, second] {
        assert_eq!(kind(&rig.outcome_of(id)[0]), v1::OutcomeKind::Replied);
    }

    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].count("the vault code is zircon"), 1, "the second request holds the first: one system session");
    assert!(
        requests[2]
            .messages()
            .iter()
            .filter(|m| m["role"] != "system")
            .all(|m| !m["content"].to_string().contains("untrusted_channel_history")),
        "the system lane's session carried the first request, not the room's history"
    );
    assert_eq!(requests[2].count("hello"), 0, "the system lane holds none of the room's conversation");
    let system = format!("system:{lane}");
    assert!(tree_mentions(&rig, &system, "zircon").await && tree_mentions(&rig, &system, "which vault code").await);
    let social = format!("rooms/{lane}");
    assert!(tree_mentions(&rig, &social, "hello").await);
    assert!(!tree_mentions(&rig, &social, "zircon").await, "the social session holds the first request");
    assert!(!tree_mentions(&rig, &social, "which vault code").await, "the social session holds the second request");
    let modes: Vec<String> = sqlx::query_scalar("SELECT mode FROM turns ORDER BY started_at").fetch_all(rig.store.pool()).await.unwrap();
    assert_eq!(modes, ["durable", "durable", "durable"]);

    // The room's next social turn hears nothing of the operator's work.
    rig.standin.script(Script::any(Reply::text("all quiet")));
    let again = rig.say("bob", "@Clankie anything new?", true).await;
    rig.wait_outcomes(&[again]).await;
    let last = rig.standin.requests().pop().unwrap();
    assert_eq!(last.count("hello"), 1, "the social session goes on");
    assert_eq!(last.count("zircon") + last.count("which vault code"), 0, "the social lane was told the operator's requests");
    assert!(!tree_mentions(&rig, &social, "zircon").await);
}

#[tokio::test]
async fn console_system_lane_an_untrusted_room_keeps_the_one_shot() {
    let rig = Rig::new().await;
    trust(&rig, vec![CHANNEL + 1]).await;
    let (_captain, _task) = rig.captain("captain-a").await;
    let lane = LaneKey::Room { guild: GUILD, channel: CHANNEL };

    rig.standin.script(Script::any(Reply::text("Noted.")));
    let first = rig.say("root", "@Clankie the vault code is zircon", true).await;
    rig.wait_outcomes(&[first]).await;
    rig.standin.script(Script::any(Reply::text("I do not know.")));
    let second = rig.say("root", "@Clankie which vault code did I give you", true).await;
    rig.wait_outcomes(&[second]).await;

    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    // A one-shot turn keeps no session: the first request reaches the second only as the room's
    // untrusted history, as before.
    let carrying: Vec<String> = requests[1]
        .messages()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| m["content"].to_string())
        .filter(|c| c.contains("zircon"))
        .collect();
    assert!(!carrying.is_empty(), "the first message reaches the second turn as the room's history");
    assert!(carrying.iter().all(|c| c.contains("untrusted_channel_history")), "a one-shot turn held a session: {carrying:?}");
    assert!(rig.store.entries(&format!("system:{lane}")).await.unwrap().is_empty());
    assert!(tree_mentions(&rig, &format!("turns/{lane}~{first}"), "zircon").await);
    assert!(tree_mentions(&rig, &format!("turns/{lane}~{second}"), "which vault code").await);
    let modes: Vec<String> = sqlx::query_scalar("SELECT mode FROM turns").fetch_all(rig.store.pool()).await.unwrap();
    assert_eq!(modes, ["one_shot", "one_shot"]);
}
