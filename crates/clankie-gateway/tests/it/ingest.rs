use std::time::Duration;

use clankie_bus::now_ms;
use clankie_discord_loopback::{NewAttachment, NewMessage};
use clankie_proto::{Family, Subject, v1};

use super::{GENERAL, GUILD, Rig, VOICE_CHAT, record, until};

#[tokio::test]
async fn a_user_message_becomes_exactly_one_ingress() {
    let rig = Rig::new().await;
    let ingress = record::<v1::Ingress>(&rig.bus, Family::IngressText).await;
    let (_gateway, _task) = rig.gateway().await;
    let id = rig.say(GENERAL, "ada", "@Clankie is the lobby up?");
    // The gateway publishes in dispatch order: once a later message is in, any second copy would be too.
    let sentinel = rig.say(GENERAL, "bob", "sentinel");
    until("the sentinel's ingress", Duration::from_secs(10), || ingress.all().iter().any(|i| i.delivery_id == sentinel.to_string())).await;
    let got = ingress.all();
    let ids: Vec<&str> = got.iter().map(|i| i.delivery_id.as_str()).collect();
    assert_eq!(ids, [id.to_string(), sentinel.to_string()], "one ingress for the message");
    let i = &got[0];
    assert_eq!(i.delivery_id, id.to_string());
    assert_eq!((i.guild_id, i.channel_id), (Some(GUILD), GENERAL));
    assert!(i.mentions_him);
    assert_eq!(i.author_name, "ada");
    assert!(!i.author_is_bot);
    assert_eq!(rig.stream_count("CLANKIE_INGRESS").await, 2);
}

#[tokio::test]
async fn a_forced_resume_that_replays_the_message_still_yields_one_ingress() {
    let rig = Rig::new().await;
    let receipts = record::<v1::Receipt>(&rig.bus, Family::Receipt).await;
    let (_gateway, _task) = rig.gateway().await;
    rig.say(GENERAL, "ada", "@Clankie hello");
    until("the first ingress", Duration::from_secs(10), || receipts.all().iter().any(|r| r.kind == "gateway.ingress")).await;
    let resumes = rig.discord.resumes();
    rig.discord.drop_and_replay(1);
    // twilight waits at least a second before reconnecting.
    until("the resume", Duration::from_secs(15), || rig.discord.resumes() > resumes).await;
    until("the replayed message", Duration::from_secs(10), || receipts.all().iter().filter(|r| r.kind == "gateway.ingress").count() == 2)
        .await;
    let ingress: Vec<_> = receipts.all().into_iter().filter(|r| r.kind == "gateway.ingress").collect();
    assert_eq!(ingress.iter().filter(|r| r.flags["duplicate"]).count(), 1, "the replay reached JetStream as a duplicate");
    assert_eq!(rig.stream_count("CLANKIE_INGRESS").await, 1, "one ingress stored");
    assert_eq!(rig.discord.identifies(), 1, "a resume, not a new session");
}

#[tokio::test]
async fn a_restarted_gateway_resumes_its_saved_session() {
    let rig = Rig::new().await;
    let (_gateway, task) = rig.gateway().await;
    rig.say(GENERAL, "ada", "before the restart");
    until("the session file", Duration::from_secs(10), || rig.dir.path().join("gateway/shard-0.json").exists()).await;
    task.abort();
    let _ = task.await;
    rig.discord.drop_connections();
    let resumes = rig.discord.resumes();
    let (_gateway, _task) = rig.gateway().await;
    until("the resume", Duration::from_secs(15), || rig.discord.resumes() > resumes).await;
    assert_eq!(rig.discord.identifies(), 1, "the restart re-identified instead of resuming");
}

#[tokio::test]
async fn text_in_the_live_voice_chat_is_room_input_unless_it_carries_an_image() {
    let rig = Rig::new().await;
    let text = record::<v1::Ingress>(&rig.bus, Family::IngressText).await;
    let room = record::<v1::RoomInput>(&rig.bus, Family::IngressRoom).await;
    let (gateway, _task) = rig.gateway().await;

    // No live voice session: the text lane owns it.
    let first = rig.say(VOICE_CHAT, "ada", "anyone in vc?");
    until("text ingress", Duration::from_secs(10), || text.all().iter().any(|i| i.delivery_id == first.to_string())).await;

    // The voice floor announces the live session.
    let session = v1::VoiceSession {
        guild_id: GUILD,
        channel_id: Some(VOICE_CHAT),
        session_id: "vs1".into(),
        updated_at_ms: now_ms(),
        live_until_ms: 0,
    };
    rig.bus.publish(&Subject::VoiceSession { guild: GUILD }, &session, None).await.unwrap();
    until("the live session", Duration::from_secs(10), || gateway.live_voice_channel(GUILD) == Some(VOICE_CHAT)).await;

    let typed = rig.say(VOICE_CHAT, "ada", "say something in vc clankie");
    until("room input", Duration::from_secs(10), || room.all().iter().any(|r| r.delivery_id == typed.to_string())).await;
    let input = room.all().into_iter().find(|r| r.delivery_id == typed.to_string()).unwrap();
    assert_eq!(input.source, v1::RoomInputSource::Text as i32);
    assert_eq!(input.text, "say something in vc clankie");

    let picture = rig.discord.user_message(NewMessage {
        channel_id: VOICE_CHAT,
        author: "ada".into(),
        content: "look at this".into(),
        attachments: vec![NewAttachment {
            filename: "map.png".into(),
            content_type: "image/png".into(),
            text: Some("png".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    until("the picture as text ingress", Duration::from_secs(10), || text.all().iter().any(|i| i.delivery_id == picture.to_string())).await;

    // Elsewhere in the guild nothing changes.
    let general = rig.say(GENERAL, "ada", "meanwhile");
    until("general ingress", Duration::from_secs(10), || text.all().iter().any(|i| i.delivery_id == general.to_string())).await;

    let typed_as_text = text.all().iter().any(|i| i.delivery_id == typed.to_string());
    let picture_as_room = room.all().iter().any(|r| r.delivery_id == picture.to_string());
    assert!(!typed_as_text, "typed voice-chat text also became a text-lane ingress");
    assert!(!picture_as_room, "a picture went to the voice room");
    assert_eq!(room.all().len(), 1);
}

#[tokio::test]
async fn messages_from_guilds_not_admitted_are_dropped_with_a_receipt() {
    let rig = Rig::new().await;
    let text = record::<v1::Ingress>(&rig.bus, Family::IngressText).await;
    let receipts = record::<v1::Receipt>(&rig.bus, Family::Receipt).await;
    let mut config = rig.gateway_config();
    config.guilds = vec![999];
    let (_gateway, _task) = rig.gateway_with(config).await;
    let id = rig.say(GENERAL, "ada", "@Clankie clandestine plans");
    until("the rejection", Duration::from_secs(10), || receipts.all().iter().any(|r| r.kind == "gateway.rejected")).await;
    let r = receipts.all().into_iter().find(|r| r.kind == "gateway.rejected").unwrap();
    assert_eq!(r.delivery_id, id.to_string());
    assert_eq!(r.codes, ["guild_not_admitted"]);
    assert!(!format!("{r:?}").contains("clandestine"));
    assert!(text.all().is_empty());
}

#[tokio::test]
async fn chaos_nats_away_at_the_gateway_a_message_is_replayed_on_resume_not_dropped() {
    let mut rig = Rig::new().await;
    let mut config = rig.gateway_config();
    config.publish_patience = Duration::from_millis(1_500);
    let (_gateway, _task) = rig.gateway_with(config).await;

    // The bus goes away; a message arrives and cannot be stored.
    rig.nats.stop();
    let lost_while_away = rig.say(GENERAL, "ada", "sent while the bus is away");
    let resumes = rig.discord.resumes();
    // The shard gives the message back: it closes and resumes from before it (again while the bus is away).
    until("the shard resuming", Duration::from_secs(20), || rig.discord.resumes() > resumes).await;
    rig.nats.restart().unwrap();

    // Back: the replayed message is stored once, and the next message goes through as usual.
    let stored = |rig: &Rig| {
        let rig_bus = rig.bus.clone();
        async move { rig_bus.jetstream().get_stream("CLANKIE_INGRESS").await.ok()?.info().await.ok().map(|i| i.state.messages) }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while stored(&rig).await != Some(1) {
        assert!(tokio::time::Instant::now() < deadline, "the message sent while the bus was away was never stored");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let next = rig.say(GENERAL, "bob", "and now");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while stored(&rig).await != Some(2) {
        assert!(tokio::time::Instant::now() < deadline, "the next message was not stored");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stream = rig.bus.jetstream().get_stream("CLANKIE_INGRESS").await.unwrap();
    let mut ids = Vec::new();
    for seq in 1..=2 {
        let message = stream.get_raw_message(seq).await.unwrap();
        ids.push(<v1::Ingress as prost::Message>::decode(message.payload).unwrap().delivery_id);
    }
    println!(
        "chaos nats away at the gateway: rounds 1, deliveries 2, stored {}, lost 0, doubled 0, resumes {}",
        ids.len(),
        rig.discord.resumes() - resumes
    );
    assert_eq!(ids, vec![lost_while_away.to_string(), next.to_string()], "each message stored once, in order");
}

/// Ingest never waits on a message's context: a reply whose chain goes one further up and a
/// link are published at once, marked `context_pending`, with no fetch made (the loopback's
/// slow answer is never met); the lane's context request gathers them, bounded in time: with
/// Discord slow to answer (30 s) or refusing, the answer comes within the gathering's patience
/// with what could be found; with the fault gone the same shapes carry their quotes.
#[tokio::test]
async fn context_gathering_slow_or_refused_fetches_hold_no_message_past_its_patience() {
    use clankie_discord_loopback::FetchFault;
    const LOBBIES: u64 = 201;
    let rig = Rig::new().await;
    let ingress = record::<v1::Ingress>(&rig.bus, Family::IngressText).await;
    let (_gateway, _task) = rig.gateway().await;
    let linked = rig.say(LOBBIES, "cy", "the server password rotates on monday");
    let first = rig.say(GENERAL, "bob", "who hosts tonight?");
    let second = rig.discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "cy".into(),
        content: "I think ada does".into(),
        reply_to: Some(first),
        ..Default::default()
    });
    until("the chain's messages in", Duration::from_secs(10), || ingress.all().iter().any(|i| i.delivery_id == second.to_string())).await;
    // One message of each shape: a reply whose chain goes one further up, and a link.
    let ask = |text: &str| {
        let reply = rig.discord.user_message(NewMessage {
            channel_id: GENERAL,
            author: "ada".into(),
            content: format!("@Clankie {text}, is that right?"),
            reply_to: Some(second),
            ..Default::default()
        });
        let link = rig.say(GENERAL, "ada", &format!("@Clankie {text}: https://discord.com/channels/{GUILD}/{LOBBIES}/{linked}"));
        (reply, link)
    };
    let published = |ids: (u64, u64), started: tokio::time::Instant, what: &'static str| {
        let ingress = &ingress;
        async move {
            let wanted = [ids.0.to_string(), ids.1.to_string()];
            let deadline = started + Duration::from_secs(30);
            loop {
                let got: Vec<v1::Ingress> = ingress.all().into_iter().filter(|i| wanted.contains(&i.delivery_id)).collect();
                if got.len() == 2 {
                    let took = started.elapsed();
                    println!("context_gathering: {what}: both published {} ms after they were sent", took.as_millis());
                    assert!(took < Duration::from_secs(1), "{what}: the messages waited {} ms on their context", took.as_millis());
                    assert!(got.iter().all(|i| i.context_pending), "{what}: what is left to fetch is not marked: {got:?}");
                    return got;
                }
                assert!(tokio::time::Instant::now() < deadline, "{what}: the messages were never published");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // What a lane asks before its turn, timed.
    let context = |id: u64| {
        let bus = &rig.bus;
        async move {
            let request = v1::ContextRequest { guild_id: Some(GUILD), channel_id: GENERAL, message_id: id, reply_chain_depth: 3 };
            let started = tokio::time::Instant::now();
            let reply: v1::ContextReply =
                bus.request(&Subject::RpcContext { channel: GENERAL }, &request, Duration::from_secs(30)).await.unwrap();
            (reply, started.elapsed())
        }
    };
    let has = |reply: &v1::ContextReply, kind: v1::QuotedKind| reply.quoted.iter().any(|q| q.kind == kind as i32);
    let bound = clankie_gateway::GATHER_PATIENCE + Duration::from_secs(1);

    // Discord slow: each fetch answers after 30 s. Ingest fetches nothing, so meets none.
    rig.discord.set_fetch_fault(Some(FetchFault::Slow(Duration::from_secs(30))));
    let got = published(ask("slow"), tokio::time::Instant::now(), "with every fetch answering after 30 s").await;
    assert!(got.iter().all(|i| !i.quoted.iter().any(|q| q.kind() == v1::QuotedKind::ReplyChain || q.kind() == v1::QuotedKind::Linked)));
    assert!(
        got.iter().any(|i| i.quoted.iter().any(|q| q.kind() == v1::QuotedKind::RepliedTo)),
        "what Discord sent with the message is kept"
    );
    assert_eq!(rig.discord.fetches_faulted(), 0, "ingest fetched context for a message nobody has admitted yet");
    for id in got.iter().map(|i| i.delivery_id.parse::<u64>().unwrap()) {
        let (reply, took) = context(id).await;
        println!("context_gathering: slow: answered in {} ms ({:?})", took.as_millis(), reply.error);
        assert!(took < bound, "the context request waited {} ms (bound {} ms)", took.as_millis(), bound.as_millis());
        assert!(
            !has(&reply, v1::QuotedKind::ReplyChain) && !has(&reply, v1::QuotedKind::Linked),
            "a slow answer was waited for: {reply:?}"
        );
    }
    assert!(rig.discord.fetches_faulted() >= 1, "no fetch met the slow answer, so nothing was bounded");

    // Discord refusing: 403 Missing Access on each fetch.
    let met = rig.discord.fetches_faulted();
    rig.discord.set_fetch_fault(Some(FetchFault::Refused));
    let got = published(ask("refused"), tokio::time::Instant::now(), "with every fetch refused").await;
    for id in got.iter().map(|i| i.delivery_id.parse::<u64>().unwrap()) {
        let (reply, took) = context(id).await;
        assert!(took < bound, "the refused context request waited {} ms", took.as_millis());
        assert!(!has(&reply, v1::QuotedKind::ReplyChain) && !has(&reply, v1::QuotedKind::Linked), "{reply:?}");
    }
    assert!(rig.discord.fetches_faulted() > met, "no fetch was refused");

    // The fault gone: the same shapes carry the chain and the link.
    rig.discord.set_fetch_fault(None);
    let (reply, link) =
        published(ask("answered"), tokio::time::Instant::now(), "with Discord answering").await.iter().fold((0, 0), |ids, i| {
            if i.content.contains("is that right") {
                (i.delivery_id.parse().unwrap(), ids.1)
            } else {
                (ids.0, i.delivery_id.parse().unwrap())
            }
        });
    assert!(has(&context(reply).await.0, v1::QuotedKind::ReplyChain), "the chain above the reply was not fetched");
    assert!(has(&context(link).await.0, v1::QuotedKind::Linked), "the linked message was not fetched");
}
