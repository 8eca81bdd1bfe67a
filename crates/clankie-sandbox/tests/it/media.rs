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

/// Bytes that look like nothing in particular, so no layer can shrink them.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x9e37_79b9;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn big_pictures_a_25_mb_attachment_reaches_the_model_as_an_image() {
    use base64::Engine as _;
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::text("A very large map.")));
    let picture = noise(25_000_000);
    let encoded = base64::engine::general_purpose::STANDARD.encode(&picture);
    let asked = rig.sandbox.discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: "@Clankie what is this?".into(),
        attachments: vec![NewAttachment {
            filename: "phone.png".into(),
            content_type: "image/png".into(),
            base64: Some(encoded.clone()),
            ..Default::default()
        }],
        ..Default::default()
    });
    rig.wait_outcomes(GENERAL, &[asked]).await;
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"));
    let request = &rig.standin.requests()[0];
    let images: Vec<String> = request
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|p| p["type"] == "image_url")
        .filter_map(|p| p["image_url"]["url"].as_str().map(str::to_owned))
        .collect();
    println!(
        "big pictures: attachment {} bytes, image parts {}, data url {} chars",
        picture.len(),
        images.len(),
        images.first().map_or(0, String::len)
    );
    assert_eq!(images.len(), 1, "the picture reached the model as an image part");
    assert_eq!(images[0], format!("data:image/png;base64,{encoded}"), "every byte of it");
}

#[tokio::test]
async fn big_pictures_a_10_mb_artifact_is_saved_and_posted() {
    let rig = Rig::new().await;
    let bus = bus(&rig).await;
    let picture = noise(10_000_000);
    // As the captain's tools save a picture: too big for one message, it goes as a blob.
    let (data, blob) = bus.hand_over("render.png", picture.clone()).await.unwrap();
    assert!(data.is_empty() && !blob.is_empty(), "10 MB does not go inline");
    let request = v1::MediaRegisterRequest { data, filename: "render.png".into(), content_type: "image/png".into(), blob };
    let saved: v1::MediaRegisterReply = bus.request(&Subject::RpcMediaRegister, &request, Duration::from_secs(30)).await.unwrap();
    assert!(saved.error.is_empty(), "{}", saved.error);
    let artifact = saved.artifact.unwrap();
    let asked = rig.say(GENERAL, "ada", "hello");
    let mut out = reply_with(asked, "reply:big", &artifact.id);
    out.artifacts[0].filename = "render.png".into();
    bus.publish(&Subject::BodySend { channel: GENERAL }, &out, None).await.unwrap();
    until("the post", Duration::from_secs(30), || !rig.sandbox.discord.posts(GENERAL).is_empty()).await;
    let post = &rig.sandbox.discord.posts(GENERAL)[0];
    let stored = rig.sandbox.discord.messages(GENERAL).into_iter().find(|m| m.id == post.id).unwrap();
    let sizes: Vec<u64> = stored.attachments.iter().map(|a| a.size).collect();
    println!("big pictures: artifact {} bytes, posted attachments {sizes:?}", picture.len());
    assert_eq!(post.attachments, ["render.png"]);
    assert_eq!(sizes, [10_000_000]);
    let posted = rig.sandbox.discord.attachment_bytes(stored.attachments[0].id).expect("the posted attachment is stored");
    assert!(
        posted == picture,
        "the posted picture is not the one saved: {} bytes differ",
        posted.iter().zip(&picture).filter(|(a, b)| a != b).count()
    );
}
