//! Media with real NATS, the loopback Discord serving attachments, and the real attachment root.

use std::time::Duration;

use clankie_bus::{Bus, MsgId};
use clankie_discord_loopback::{Loopback, NewAttachment, NewMessage};
use clankie_media::{Media, MediaConfig};
use clankie_proto::{Subject, v1};
use clankie_settings::{Settings, attachment_root};
use clankie_testkit::{TestDir, TestNats};

fn settings(nats: &TestNats, state: &TestDir, root: Option<&std::path::Path>) -> Settings {
    let vars: Vec<(&str, String)> = vec![
        ("CLANKIE_NATS_URL", nats.url()),
        ("CLANKIE_STATE_DIR", state.path().display().to_string()),
        ("CLANKIE_DISCORD_ATTACHMENT_ROOT", root.map(|r| r.display().to_string()).unwrap_or_default()),
    ];
    Settings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap()
}

#[tokio::test]
async fn every_service_resolves_the_same_root_with_and_without_the_override() {
    let (nats, state, elsewhere) = (TestNats::start().unwrap(), TestDir::new(), TestDir::new());
    for root in [None, Some(elsewhere.path())] {
        // Each service builds its settings from the same environment; media opens the root they all derive.
        let per_service: Vec<Settings> = (0..4).map(|_| settings(&nats, &state, root)).collect();
        let expected = root.map(|r| r.to_path_buf()).unwrap_or_else(|| state.path().join("attachments"));
        for s in &per_service {
            assert_eq!(attachment_root(s), expected);
        }
        let bus = Bus::connect(&per_service[0], "media").await.unwrap();
        let media = Media::new(bus, &per_service[3], MediaConfig::from_settings(&per_service[3])).unwrap();
        assert_eq!(media.root().dir(), expected.as_path());
    }
}

async fn rig() -> (TestNats, TestDir, Loopback, Bus, std::sync::Arc<Media>) {
    let (nats, state) = (TestNats::start().unwrap(), TestDir::new());
    let s = settings(&nats, &state, None);
    let bus = Bus::connect(&s, "test").await.unwrap();
    bus.ensure_streams().await.unwrap();
    let media = std::sync::Arc::new(Media::new(Bus::connect(&s, "media").await.unwrap(), &s, MediaConfig::from_settings(&s)).unwrap());
    let running = media.clone();
    tokio::spawn(async move {
        let _ = running.run().await;
    });
    let discord = Loopback::start().await.unwrap();
    (nats, state, discord, bus, media)
}

fn blobs(root: &std::path::Path) -> usize {
    std::fs::read_dir(root.join("sha256"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten())
        .count()
}

#[tokio::test]
async fn an_inbound_attachment_is_stored_once_even_when_its_ingress_is_redelivered() {
    let (_nats, _state, discord, bus, media) = rig().await;
    let id = discord.user_message(NewMessage {
        channel_id: 200,
        author: "ada".into(),
        content: "look".into(),
        attachments: vec![NewAttachment {
            filename: "map.png".into(),
            content_type: "image/png".into(),
            text: Some("not really a png".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    let stored = discord.messages(200).into_iter().find(|m| m.id == id).unwrap();
    let a = &stored.attachments[0];
    let ingress = v1::Ingress {
        delivery_id: id.to_string(),
        guild_id: Some(100),
        channel_id: 200,
        attachments: vec![v1::Attachment {
            id: a.id,
            filename: a.filename.clone(),
            content_type: a.content_type.clone(),
            size_bytes: a.size,
            url: format!("{}/attachments/{}/{}", discord.url(), a.id, a.filename),
        }],
        ..Default::default()
    };
    // Two copies that JetStream does not deduplicate, as a redelivery after a crash would be.
    for copy in ["one", "two"] {
        bus.publish(&Subject::ingress_text(Some(100), 200), &ingress, Some(&MsgId::new(copy))).await.unwrap();
    }
    let root = media.root().dir().to_path_buf();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while media.root().attachment(a.id).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the attachment was never stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Both copies consumed: a resolve round-trip after them shows the stream has moved past both.
    let reply: v1::MediaResolveReply = bus
        .request(
            &Subject::RpcMediaAttachment,
            &v1::MediaAttachmentRequest { attachment: ingress.attachments.first().cloned(), delivery_id: id.to_string() },
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(reply.data, b"not really a png");
    let mut consumer = bus
        .jetstream()
        .get_stream("CLANKIE_INGRESS")
        .await
        .unwrap()
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("media-inbound")
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = consumer.info().await.unwrap();
        if info.num_ack_pending == 0 && info.num_pending == 0 && info.delivered.stream_sequence >= 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(blobs(&root), 1);
}

#[tokio::test]
async fn hostile_names_are_refused_and_the_next_request_is_served() {
    let (_nats, _state, _discord, bus, media) = rig().await;
    // A tool registers what it rendered; the path in its name is dropped.
    let registered: v1::MediaRegisterReply = bus
        .request(
            &Subject::RpcMediaRegister,
            &v1::MediaRegisterRequest {
                data: b"artifact bytes".to_vec(),
                filename: "../../bracket.png".into(),
                content_type: "image/png".into(),
            },
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let good = registered.artifact.expect("registered").id;
    for hostile in ["sha256:../../../etc/passwd", "/etc/passwd", "../x", "sha256:ABC"] {
        let reply: v1::MediaResolveReply = bus
            .request(
                &Subject::RpcMediaResolve,
                &v1::MediaResolveRequest { artifact_id: hostile.into(), want_bytes: true },
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert_eq!(reply.error, "bad_id", "{hostile}");
        assert!(reply.data.is_empty());
    }
    // A symlink planted inside the root that leads out of it is refused too.
    let root = media.root().dir();
    std::os::unix::fs::symlink("/etc", root.join("sha256").join("ee")).unwrap();
    assert!(matches!(media.root().safe_path("sha256/ee/passwd"), Err(clankie_media::MediaError::OutsideRoot(_))));
    let escaped = format!("sha256:ee{}", "0".repeat(62));
    let reply: v1::MediaResolveReply = bus
        .request(&Subject::RpcMediaResolve, &v1::MediaResolveRequest { artifact_id: escaped, want_bytes: true }, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(reply.error, "outside_root");
    // And the service goes on serving.
    let reply: v1::MediaResolveReply = bus
        .request(&Subject::RpcMediaResolve, &v1::MediaResolveRequest { artifact_id: good, want_bytes: true }, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(reply.error, "");
    assert_eq!(reply.data, b"artifact bytes");
    assert_eq!(reply.filename, "bracket.png");
}
