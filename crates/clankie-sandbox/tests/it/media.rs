use std::time::Duration;

use clankie_discord_loopback::{NewAttachment, NewMessage};
use clankie_model_standin::{Reply, Script};
use clankie_proto::{LaneKey, Subject, v1};

use super::{GENERAL, Rig, until};

async fn bus(rig: &Rig) -> clankie_bus::Bus {
    let settings =
        clankie_settings::Settings::for_endpoints(&rig.nats_url, "postgres://unused@127.0.0.1:1/x", std::path::Path::new("/tmp")).unwrap();
    clankie_bus::Bus::connect(&settings, "test").await.unwrap()
}

fn reply_with(to: u64, key: &str, artifact: &str) -> v1::OutboundMessage {
    v1::OutboundMessage {
        idempotency_key: key.into(),
        kind: v1::OutboundKind::Reply as i32,
        guild_id: Some(100),
        channel_id: GENERAL,
        reply_to_message_id: Some(to),
        text: "Here's the bracket.".into(),
        artifacts: vec![v1::ArtifactRef { id: artifact.into(), filename: "bracket.png".into(), content_type: "image/png".into() }],
        lane: LaneKey::Room { guild: 100, channel: GENERAL }.to_string(),
        delivery_id: to.to_string(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_picture_media_cannot_resolve_costs_the_picture_and_the_words_go_out() {
    let rig = Rig::new().await;
    let bus = bus(&rig).await;
    let asked = rig.say(GENERAL, "ada", "hello");
    let missing = format!("sha256:{}", "ab".repeat(32));
    bus.publish(&Subject::BodySend { channel: GENERAL }, &reply_with(asked, "reply:lost", &missing), None).await.unwrap();
    until("the post", Duration::from_secs(15), || !rig.sandbox.discord.posts(GENERAL).is_empty()).await;
    let post = &rig.sandbox.discord.posts(GENERAL)[0];
    assert!(post.content.starts_with("Here's the bracket."));
    assert!(post.content.contains("couldn't attach bracket.png"));
    assert!(post.attachments.is_empty());
}

#[tokio::test]
async fn a_picture_media_resolves_is_posted_with_the_words() {
    let rig = Rig::new().await;
    let bus = bus(&rig).await;
    let root = clankie_media::Root::open(rig.attachment_root.clone()).unwrap();
    let (artifact, _) = root.store(b"\x89PNG fake", "bracket.png", "image/png").unwrap();
    let asked = rig.say(GENERAL, "ada", "hello");
    bus.publish(&Subject::BodySend { channel: GENERAL }, &reply_with(asked, "reply:pic", &artifact), None).await.unwrap();
    until("the post", Duration::from_secs(15), || !rig.sandbox.discord.posts(GENERAL).is_empty()).await;
    let post = &rig.sandbox.discord.posts(GENERAL)[0];
    assert_eq!(post.content, "Here's the bracket.");
    assert_eq!(post.attachments, ["bracket.png"]);
}

#[tokio::test]
async fn the_text_lane_perceives_a_picture_it_is_shown() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::text("That's the lobby map.")));
    let asked = rig.sandbox.discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: "@Clankie what is this?".into(),
        attachments: vec![NewAttachment {
            filename: "map.png".into(),
            content_type: "image/png".into(),
            text: Some("pixels".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let request = &rig.standin.requests()[0];
    let parts = request.messages().iter().filter_map(|m| m["content"].as_array()).flatten().filter(|p| p["type"] == "image_url").count();
    assert_eq!(parts, 1, "the picture reached the model as an image part");
    let url = request.body.to_string();
    assert!(url.contains("data:image/png;base64,cGl4ZWxz"), "the image part carries the stored bytes");
}
