use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;

use super::{Rig, kind};

#[tokio::test]
async fn a_600_character_update_posts_once_threaded_and_the_turn_goes_on() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    let note = "n".repeat(600);
    rig.standin.script(Script::any(Reply::tool("send_text_update", serde_json::json!({ "text": note }))));
    rig.standin.script(Script::any(Reply::text("Here is the bracket.")));
    let id = rig.say("ada", "@Clankie look up the whole bracket please", true).await;
    rig.wait_outcomes(&[id]).await;

    let sent = rig.sent.all();
    let updates: Vec<_> = sent.iter().filter(|m| m.kind == v1::OutboundKind::TextUpdate as i32).collect();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].text, note);
    assert_eq!(updates[0].reply_to_message_id, Some(id));
    assert!(updates[0].artifacts.is_empty());
    let replies = rig.replies();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].text, "Here is the bracket.");
    assert_eq!(kind(&rig.outcome_of(id)[0]), v1::OutcomeKind::Replied);
    let order: Vec<i32> = sent.iter().map(|m| m.kind).collect();
    assert_eq!(order, [v1::OutboundKind::TextUpdate as i32, v1::OutboundKind::Reply as i32]);
    super::until("the update receipt", std::time::Duration::from_secs(5), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.text_update")
    })
    .await;
    let receipt = rig.receipts.all().into_iter().find(|r| r.kind == "captain.text_update").unwrap();
    assert_eq!(receipt.counts["chars"], 600);
    assert!(!format!("{receipt:?}").contains("nnnn"), "the receipt carried the words");
}

#[tokio::test]
async fn a_601_character_update_is_a_tool_error_and_posts_nothing() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    rig.standin.script(Script::any(Reply::tool("send_text_update", serde_json::json!({ "text": "n".repeat(601) }))));
    rig.standin.script(Script::any(Reply::text("Sorry, here it is in one go.")));
    let id = rig.say("ada", "@Clankie look it up", true).await;
    rig.wait_outcomes(&[id]).await;
    assert!(rig.sent.all().iter().all(|m| m.kind != v1::OutboundKind::TextUpdate as i32), "an over-long update was posted");
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].count("at most 600 characters; this one has 601"), 1, "the model was told why");
    assert_eq!(rig.replies().len(), 1);
}

#[tokio::test]
async fn an_update_aimed_at_another_room_is_refused() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    rig.standin.script(Script::any(Reply::tool("send_text_update", serde_json::json!({ "text": "hi", "channel_id": "999" }))));
    rig.standin.script(Script::any(Reply::text("done")));
    let id = rig.say("ada", "@Clankie go", true).await;
    rig.wait_outcomes(&[id]).await;
    assert!(rig.sent.all().iter().all(|m| m.kind != v1::OutboundKind::TextUpdate as i32));
    assert_eq!(rig.standin.requests()[1].count("posts only to the room this turn is in"), 1);
}

#[tokio::test]
async fn a_tool_only_phase_shows_the_tool_card_not_typing() {
    let rig = Rig::new().await;
    let page = clankie_model_standin::StandIn::start().await.unwrap();
    // The page is a loopback stand-in, which the egress guard lets through only on the allow list.
    let (_captain, _task) = rig.captain_with("captain-a", &[("CLANKIE_EGRESS_ALLOW", page.addr().to_string())]).await;
    // A page that takes longer than the card delay to read: the loopback stand-in serves nothing at this path, slowly enough.
    rig.standin.script(Script::any(Reply::tool("read_page", serde_json::json!({ "url": format!("http://{}/nowhere", page.addr()) }))));
    rig.standin.script(Script::any(Reply::Text {
        text: "Couldn't read it.".into(),
        chunk_chars: 64,
        chunk_delay_ms: 0,
        first_delay_ms: 400,
        tail_delay_ms: 0,
    }));
    let body = body_actions(&rig.bus).await;
    let id = rig.say("ada", "@Clankie read this", true).await;
    rig.wait_outcomes(&[id]).await;
    // One subscription over both body subjects keeps the captain's publish order.
    let actions = body.lock().unwrap().clone();
    let card = actions.iter().position(|a| a == "card:post").unwrap_or_else(|| panic!("no card in {actions:?}"));
    let typing = actions.iter().position(|a| a == "typing:start").unwrap_or_else(|| panic!("the words never lit typing: {actions:?}"));
    assert!(card < typing, "typing lit during the tool-only phase: {actions:?}");
    assert_eq!(card, 0, "the card is the first thing the room sees: {actions:?}");
    let cards: Vec<_> = rig.sent.all().into_iter().filter(|m| m.kind == v1::OutboundKind::ToolCard as i32).collect();
    let ops: Vec<i32> = cards.iter().map(|c| c.tool_card_op).collect();
    assert_eq!(ops, [v1::ToolCardOp::Post as i32, v1::ToolCardOp::Remove as i32], "{cards:?}");
    assert_eq!(cards[0].tool_names, vec!["read_page".to_owned()]);
    assert!(cards[0].text.is_empty(), "a tool card carries tool names only");
    assert_eq!(rig.standin.requests()[1].count("the page answered HTTP 404"), 1, "an unreachable page fails cleanly");
}

/// Typing and tool-card actions in the order the captain published them, as short labels.
async fn body_actions(bus: &clankie_bus::Bus) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use futures::StreamExt;
    use prost::Message as _;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut sub = bus.client().subscribe("clankie.body.>").await.unwrap();
    let sink = seen.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let label = if msg.subject.starts_with("clankie.body.typing.") {
                let Ok(t) = v1::TypingAction::decode(msg.payload) else { continue };
                format!("typing:{}", if t.op == v1::TypingOp::Start as i32 { "start" } else { "stop" })
            } else {
                let Ok(m) = v1::OutboundMessage::decode(msg.payload) else { continue };
                match (v1::OutboundKind::try_from(m.kind), v1::ToolCardOp::try_from(m.tool_card_op)) {
                    (Ok(v1::OutboundKind::ToolCard), Ok(v1::ToolCardOp::Post)) => "card:post".into(),
                    (Ok(v1::OutboundKind::ToolCard), _) => "card:other".into(),
                    _ => "send".into(),
                }
            };
            sink.lock().unwrap().push(label);
        }
    });
    bus.barrier().await.unwrap();
    seen
}
