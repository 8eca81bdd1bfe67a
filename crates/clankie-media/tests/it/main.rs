//! Media with real NATS, the loopback Discord serving attachments, and the real attachment root.

use std::time::Duration;

use clankie_bus::{Bus, MsgId};
use clankie_discord_loopback::{Loopback, NewAttachment, NewMessage};
use clankie_media::{Media, MediaConfig};
use clankie_proto::{Family, Subject, v1};
use clankie_settings::{Settings, attachment_root};
use clankie_testkit::{TestDir, TestNats};
use futures::StreamExt;

fn settings(nats: &TestNats, state: &TestDir, root: Option<&std::path::Path>) -> Settings {
    let vars: Vec<(&str, String)> = vec![
        ("CLANKIE_NATS_URL", nats.url()),
        ("CLANKIE_STATE_DIR", state.path().display().to_string()),
        ("CLANKIE_DISCORD_ATTACHMENT_ROOT", root.map(|r| r.display().to_string()).unwrap_or_default()),
    ];
    Settings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap()
}

/// Media is the one service that opens the attachment root; the gateway and the captain only
/// ever receive bytes from it (and `invariants.rs` keeps any other crate from deriving a path).
/// So the root is checked where it is really derived: the `clankie-media` binary, configured
/// from its environment as a deployment configures it, stores and resolves under the root the
/// settings name, with and without the override.
#[tokio::test]
async fn every_service_resolves_the_same_root_with_and_without_the_override() {
    let (nats, state, elsewhere) = (TestNats::start().unwrap(), TestDir::new(), TestDir::new());
    let s = settings(&nats, &state, None);
    let bus = Bus::connect(&s, "test").await.unwrap();
    bus.ensure_streams().await.unwrap();
    for (round, root) in [None, Some(elsewhere.path())].into_iter().enumerate() {
        let expected = root.map(|r| r.to_path_buf()).unwrap_or_else(|| state.path().join("attachments"));
        assert_eq!(attachment_root(&settings(&nats, &state, root)), expected);
        let mut media = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie-media"))
            .env("CLANKIE_NATS_URL", nats.url())
            .env("CLANKIE_STATE_DIR", state.path())
            .envs(root.map(|r| ("CLANKIE_DISCORD_ATTACHMENT_ROOT", r.display().to_string())))
            .env("CLANKIE_LOG", "info,clankie_media=debug,clankie_bus=debug")
            .stderr(std::fs::File::create(state.path().join(format!("media-{round}.log"))).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log = || std::fs::read_to_string(state.path().join(format!("media-{round}.log"))).unwrap_or_default();
        let data = format!("artifact of round {round}").into_bytes();
        let request = v1::MediaRegisterRequest {
            data: data.clone(),
            filename: "map.png".into(),
            content_type: "image/png".into(),
            ..Default::default()
        };
        // Asked just after the last round's process was killed, the server may still hold that
        // process's subscription (it has not yet read the closed socket) and hand it the request,
        // which nobody then answers. Storage is by content, so asking again is safe; a fresh
        // process on a busy machine gets a minute in all.
        let mut attempt = 0;
        let registered: v1::MediaRegisterReply = loop {
            attempt += 1;
            match bus.request(&Subject::RpcMediaRegister, &request, Duration::from_secs(10)).await {
                Ok(reply) => break reply,
                Err(e) if attempt < 6 => eprintln!("round {round}: attempt {attempt}: {e}; asking again"),
                Err(e) => panic!("round {round}: {e}, {attempt} times; the media process said:\n{}", log()),
            }
        };
        if attempt > 1 {
            println!("media: round {round} was answered on attempt {attempt}; its process said:\n{}", log());
        }
        let id = registered.artifact.expect("registered").id;
        let resolved: v1::MediaResolveReply = bus
            .request(&Subject::RpcMediaResolve, &v1::MediaResolveRequest { artifact_id: id, want_bytes: false }, Duration::from_secs(5))
            .await
            .unwrap();
        let path = std::path::PathBuf::from(&resolved.path);
        assert!(path.starts_with(&expected), "{} is not under {}", path.display(), expected.display());
        assert_eq!(std::fs::read(&path).unwrap(), data, "the bytes are on disk under the root");
        media.start_kill().unwrap();
        media.wait().await.unwrap();
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

/// One stored attachment and its ingress, as the gateway would publish it.
fn attached(discord: &Loopback) -> (u64, v1::Ingress) {
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
    (a.id, ingress)
}

/// An attachment costs a download only when a lane asks for it: media reads no ingress, so a
/// message no lane admits is never fetched; two lanes asking at once share one download.
#[tokio::test]
async fn ingest_concurrency_an_attachment_is_fetched_only_when_a_lane_asks_and_only_once() {
    let (_nats, _state, discord, bus, media) = rig().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    let (attachment, ingress) = attached(&discord);
    bus.publish(&Subject::ingress_text(Some(100), 200), &ingress, Some(&MsgId::new(&ingress.delivery_id))).await.unwrap();
    let stream = bus.jetstream().get_stream("CLANKIE_INGRESS").await.unwrap();
    let readers: Vec<String> = stream.consumer_names().filter_map(|n| async move { n.ok() }).collect().await;
    assert!(readers.is_empty(), "media reads no ingress: {readers:?}");
    assert_eq!(discord.downloads(attachment), 0, "nobody asked yet");

    let request = v1::MediaAttachmentRequest { attachment: ingress.attachments.first().cloned(), delivery_id: ingress.delivery_id.clone() };
    let ask = || bus.request::<_, v1::MediaResolveReply>(&Subject::RpcMediaAttachment, &request, Duration::from_secs(20));
    let (first, second) = tokio::join!(ask(), ask());
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!((first.error.as_str(), second.error.as_str()), ("", ""));
    assert_eq!(first.path, second.path, "both asks see one artifact");
    assert_eq!((&first.data[..], &second.data[..]), (&b"not really a png"[..], &b"not really a png"[..]));
    assert_eq!(discord.downloads(attachment), 1, "two asks at once downloaded once");
    assert_eq!(blobs(media.root().dir()), 1);
    assert_eq!(&ask().await.unwrap().data[..], b"not really a png");
    assert_eq!(discord.downloads(attachment), 1, "a later ask is served from the root");
    let stored = receipts.all().into_iter().filter(|r| r.kind == "media.stored" && r.delivery_id == ingress.delivery_id).count();
    assert_eq!(stored, 1, "one store receipt for the attachment");
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
                ..Default::default()
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

/// Every request runs on a task of its own: an attachment whose download hangs does not hold up
/// another lane's resolve or a tool's register.
#[tokio::test]
async fn ingest_concurrency_a_hanging_download_does_not_hold_up_other_requests() {
    let (_nats, _state, _discord, bus, _media) = rig().await;
    let pages =
        clankie_testkit::pages::TestPages::start("127.0.0.1", vec![("/slow.png", clankie_testkit::pages::Answer::Hang)]).await.unwrap();
    let hanging = v1::MediaAttachmentRequest {
        delivery_id: "1".into(),
        attachment: Some(v1::Attachment {
            id: 77,
            filename: "slow.png".into(),
            content_type: "image/png".into(),
            size_bytes: 10,
            url: pages.url("/slow.png"),
        }),
    };
    let asking = bus.clone();
    let hung = tokio::spawn(async move {
        asking.request::<_, v1::MediaResolveReply>(&Subject::RpcMediaAttachment, &hanging, Duration::from_secs(60)).await
    });
    clankie_testkit::until("the download started", Duration::from_secs(10), || pages.hits("/slow.png") == 1).await;

    let registered: v1::MediaRegisterReply = bus
        .request(
            &Subject::RpcMediaRegister,
            &v1::MediaRegisterRequest {
                data: b"rendered".to_vec(),
                filename: "chart.png".into(),
                content_type: "image/png".into(),
                ..Default::default()
            },
            Duration::from_secs(5),
        )
        .await
        .expect("a register answered while a download hangs");
    let id = registered.artifact.expect("registered").id;
    let resolved: v1::MediaResolveReply = bus
        .request(&Subject::RpcMediaResolve, &v1::MediaResolveRequest { artifact_id: id, want_bytes: true }, Duration::from_secs(5))
        .await
        .expect("a resolve answered while a download hangs");
    assert_eq!(resolved.data, b"rendered");
    assert!(!hung.is_finished(), "the hanging download was answered first");
    hung.abort();
}
