//! The whole stack on a three-node JetStream cluster with every stream at three replicas:
//! losing a node, or the ingress stream's leader, in the middle of a burst loses and
//! doubles nothing, and a restarted node catches up.

use std::time::{Duration, Instant};

use clankie_model_standin::{Reply, Script};
use clankie_testkit::TestNatsCluster;

use super::{GENERAL, Rig, until};

/// Waits until the cluster has a JetStream leader and takes the streams at three replicas.
async fn streams_on(urls: &str) {
    let vars = [("CLANKIE_NATS_URL", urls), ("CLANKIE_STREAM_REPLICAS", "3"), ("CLANKIE_STATE_DIR", "/tmp")];
    let settings = clankie_settings::Settings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).unwrap();
    let bus = clankie_bus::Bus::connect(&settings, "test").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = bus.ensure_streams().await {
        assert!(Instant::now() < deadline, "the cluster never took the streams: {e}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The ingress stream's replicas as JetStream reports them: (leader, [(name, current, lag)]).
async fn ingress_replicas(rig: &Rig) -> Option<(String, Vec<(String, bool, u64)>)> {
    let bus = rig.bus().await;
    let mut stream = bus.jetstream().get_stream("CLANKIE_INGRESS").await.ok()?;
    let info = stream.info().await.ok()?;
    let cluster = info.cluster.clone()?;
    let peers = cluster.replicas.iter().map(|p| (p.name.clone(), p.current && !p.offline, p.lag.unwrap_or(0))).collect();
    Some((cluster.leader?, peers))
}

/// Figures of one burst.
#[derive(Debug)]
struct Counts {
    deliveries: usize,
    outcomes: usize,
    replies: usize,
    kinds: Vec<String>,
}

/// A three-message burst during which `fault` strikes, right after the first message started a run.
async fn burst(rig: &Rig, fault: impl FnOnce()) -> Counts {
    rig.standin.script(Script::any(Reply::Text {
        text: "Lobbies open at eight, ".into(),
        chunk_chars: 2,
        // About 14 s of writing: longer than the stalls a dead node costs the clients that were
        // connected to it (an in-flight JetStream request waits out its 5 s timeout), so the
        // whole burst still lands inside the one run.
        chunk_delay_ms: 1_200,
        first_delay_ms: 100,
        tail_delay_ms: 0,
    }));
    rig.standin.script(Script::any(Reply::text("Lobby 4 at 20:00, bring your friend.")));
    let asked_before = rig.standin.requests().len();
    let first = rig.say(GENERAL, "ada", "@Clankie is the lobby up?");
    rig.standin.wait_for_requests(asked_before + 1, Duration::from_secs(30)).await;
    let struck = Instant::now();
    let struck_ms = clankie_bus::now_ms();
    let receipts = clankie_testkit::record::<clankie_proto::v1::Receipt>(&rig.bus().await, clankie_proto::Family::Receipt).await;
    fault();
    let second = rig.say(GENERAL, "ada", "the one for tonight");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third = rig.say(GENERAL, "ada", "can I bring a friend?");
    let ids = [first, second, third];
    until("every delivery's outcome", Duration::from_secs(60), || ids.iter().all(|id| rig.outcome(GENERAL, *id).is_some())).await;
    eprintln!("outcomes {:?} after the fault; requests {}", struck.elapsed(), rig.standin.requests().len() - asked_before);
    for r in receipts.all() {
        if ids.iter().any(|id| r.delivery_id == id.to_string()) {
            eprintln!("  {:>6} ms {} {} {:?}", r.at_ms - struck_ms, r.delivery_id, r.kind, r.codes);
        }
    }
    // The reply is posted before its outcome reaction; wait for it, then a sentinel in the
    // same lane proves nothing else for the burst is still on its way.
    until("the reply", Duration::from_secs(20), || {
        rig.sandbox.discord.posts(GENERAL).iter().any(|p| ids.contains(&p.reply_to.unwrap_or(0)))
    })
    .await;
    rig.standin.script(Script::any(Reply::text("Sentinel.")));
    let sentinel = rig.say(GENERAL, "bob", "@Clankie sentinel");
    until("the sentinel's reply", Duration::from_secs(60), || {
        rig.sandbox.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(sentinel))
    })
    .await;
    let posts = rig.sandbox.discord.posts(GENERAL);
    Counts {
        deliveries: ids.len(),
        outcomes: ids.iter().filter(|id| rig.outcome(GENERAL, **id).is_some()).count(),
        replies: posts.iter().filter(|p| p.reply_to.is_some_and(|r| ids.contains(&r))).count(),
        kinds: ids.iter().map(|id| rig.outcome(GENERAL, *id).unwrap_or_default()).collect(),
    }
}

#[tokio::test]
async fn nats_cluster_losing_a_node_or_the_stream_leader_mid_burst_loses_and_doubles_nothing() {
    // Shown only when the test fails: what each consumer and publisher went through.
    let _traces = clankie_http::init_tracing("warn,clankie_bus=info", "test");
    let mut cluster = TestNatsCluster::start(3).unwrap();
    let urls = cluster.urls();
    streams_on(&urls).await;
    let rig = Rig::with(&[("CLANKIE_NATS_URL", &urls), ("CLANKIE_STREAM_REPLICAS", "3")]).await;
    let (_, peers) = ingress_replicas(&rig).await.expect("a clustered stream");
    assert_eq!(peers.len(), 2, "three replicas: a leader and two followers");

    // A follower dies mid-burst.
    let (leader, _) = ingress_replicas(&rig).await.unwrap();
    let follower = (0..3).find(|i| cluster.node_named(&leader) != Some(*i)).unwrap();
    let cluster_ref = std::sync::Mutex::new(&mut cluster);
    let counts = burst(&rig, || cluster_ref.lock().unwrap().kill(follower)).await;
    eprintln!("nats_cluster follower killed: {counts:?}");
    assert_eq!((counts.deliveries, counts.outcomes, counts.replies), (3, 3, 1), "nothing lost, nothing doubled: {counts:?}");
    assert_eq!(counts.kinds, ["replied", "absorbed", "absorbed"], "one turn for the burst");

    // Back, it catches up: every replica current, none lagging.
    let restarted_at = Instant::now();
    cluster.restart(follower).unwrap();
    loop {
        let caught_up = ingress_replicas(&rig)
            .await
            .is_some_and(|(_, peers)| peers.len() == 2 && peers.iter().all(|(_, current, lag)| *current && *lag == 0));
        if caught_up {
            break;
        }
        assert!(restarted_at.elapsed() < Duration::from_secs(60), "the restarted node never caught up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("nats_cluster restarted node caught up in {:?}", restarted_at.elapsed());

    // The stream's leader dies mid-burst.
    let (leader, _) = ingress_replicas(&rig).await.unwrap();
    let leader = cluster.node_named(&leader).expect("the leader is one of ours");
    let cluster_ref = std::sync::Mutex::new(&mut cluster);
    let counts = burst(&rig, || cluster_ref.lock().unwrap().kill(leader)).await;
    eprintln!("nats_cluster leader killed: {counts:?}");
    assert_eq!((counts.deliveries, counts.outcomes, counts.replies), (3, 3, 1), "nothing lost, nothing doubled: {counts:?}");
    assert_eq!(counts.kinds, ["replied", "absorbed", "absorbed"], "one turn for the burst");
    let (new_leader, _) = ingress_replicas(&rig).await.expect("a new leader");
    assert_ne!(cluster.node_named(&new_leader), Some(leader));
}

#[tokio::test]
async fn chaos_nats_server_killed_mid_burst_and_restarted_after_5_s_loses_and_doubles_nothing() {
    use clankie_model_standin::{Reply, Script};
    let mut rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::Text {
        text: "One answer for the whole burst.".into(),
        chunk_chars: 4,
        chunk_delay_ms: 150,
        first_delay_ms: 500,
        tail_delay_ms: 0,
    }));
    for _ in 0..4 {
        rig.standin.script(Script::any(Reply::text("Answered.")));
    }
    let first = rig.say(super::GENERAL, "ada", "@Clankie first of three");
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let second = rig.say(super::GENERAL, "ada", "second");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    rig.stop_nats();
    let third = rig.say(super::GENERAL, "ada", "third, while the bus is away");
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    rig.restart_nats();
    let ids = [first, second, third];
    rig.wait_outcomes(super::GENERAL, &ids).await;
    // A later message is the barrier: once it is answered, any doubled reply would be in.
    let later = rig.say(super::GENERAL, "bob", "@Clankie and me");
    rig.wait_outcomes(super::GENERAL, &[later]).await;
    let outcomes: Vec<Option<String>> = ids.iter().map(|id| rig.outcome(super::GENERAL, *id)).collect();
    let posts = rig.sandbox.discord.posts(super::GENERAL);
    let burst_replies = posts.iter().filter(|p| p.reply_to.is_some_and(|r| ids.contains(&r))).count();
    println!("chaos nats restart: rounds 1, deliveries 3, outcomes {outcomes:?}, replies to the burst {burst_replies}");
    assert!(outcomes.iter().all(Option::is_some), "a delivery was lost: {outcomes:?}");
    assert!(burst_replies >= 1, "the burst got no answer");
    for id in ids {
        let replies = posts.iter().filter(|p| p.reply_to == Some(id)).count();
        assert!(replies <= 1, "a message was answered {replies} times");
    }
}
