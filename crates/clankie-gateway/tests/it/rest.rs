//! Posting under Discord's limits with several gateway replicas: one REST budget for the bot,
//! replies that resume where a dead poster stopped, and channels that never wait for each other.

use std::collections::HashMap;
use std::time::Duration;

use clankie_discord_loopback::{ChannelSpec, LoopbackConfig};
use clankie_proto::{Family, Subject, v1};

use super::{Rig, gateway_process, outbound_reply, record, until};

fn reply(channel: u64, key: &str, text: &str) -> v1::OutboundMessage {
    outbound_reply(channel, None, key, text)
}

/// A reply of exactly `pieces` Discord messages, each a line that starts `[piece NN]`.
fn numbered_reply(pieces: usize) -> String {
    (1..=pieces).map(|n| format!("[piece {n:02}] {}", "and the bracket goes on ".repeat(75).trim_end())).collect::<Vec<_>>().join("\n")
}

/// The piece numbers posted in `channel`, in the order Discord holds them.
fn piece_numbers(rig: &Rig, channel: u64) -> Vec<usize> {
    rig.discord.posts(channel).iter().filter_map(|p| p.content.strip_prefix("[piece ")?.get(..2)?.parse().ok()).collect()
}

fn sigkill(child: &tokio::process::Child) {
    let pid = child.id().expect("a running gateway").to_string();
    assert!(std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
}

/// The replica that holds the REST lease, once one does.
async fn rest_owner(rig: &Rig) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(owner) = rig.rest_owner().await {
            return owner;
        }
        assert!(tokio::time::Instant::now() < deadline, "no replica took the REST lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two gateway replicas that hold each posted piece 300 ms (long replies allowed), and the
/// one that took the REST lease.
async fn two_slow_posters(rig: &Rig) -> (HashMap<String, tokio::process::Child>, String) {
    let extra = [("CLANKIE_REPLY_MAX_PIECES", "40"), ("CLANKIE_FAULT_HOLD", "gateway.after_piece=300")];
    let mut replicas = HashMap::new();
    for name in ["gateway-a", "gateway-b"] {
        replicas.insert(name.to_owned(), gateway_process(rig, name, &extra));
    }
    let owner = rest_owner(rig).await;
    (replicas, owner)
}

#[tokio::test]
async fn long_reply_a_40_piece_reply_whose_poster_is_sigkilled_after_piece_10_posts_each_piece_once_in_order() {
    let rig = Rig::new().await;
    let receipts = record::<v1::Receipt>(&rig.bus, Family::Receipt).await;
    // Each piece is held a moment after it is posted and remembered: the kill lands there.
    let (replicas, owner) = two_slow_posters(&rig).await;
    let channel = super::GENERAL;
    rig.bus.publish(&Subject::BodySend { channel }, &reply(channel, "reply:forty", &numbered_reply(40)), None).await.unwrap();
    // Killed in the hold after the tenth piece was posted and remembered (the hold is logged
    // after the progress is written): Discord showing a piece is not yet its poster knowing it.
    let holds = || {
        std::fs::read_to_string(rig.dir.path().join(format!("{owner}.log")))
            .unwrap_or_default()
            .matches("fault injected at gateway.after_piece: holding")
            .count()
    };
    until("ten pieces posted and remembered", Duration::from_secs(60), || holds() >= 10).await;
    sigkill(&replicas[&owner]);
    let at_kill = rig.discord.posts(channel).len();
    let killed = tokio::time::Instant::now();
    until("all forty pieces", Duration::from_secs(120), || rig.discord.posts(channel).len() >= 40).await;
    let successor = rest_owner(&rig).await;
    // A barrier: a later reply in the channel is posted after anything still owed of the first.
    rig.bus.publish(&Subject::BodySend { channel }, &reply(channel, "reply:after", "that was all"), None).await.unwrap();
    until("the later reply", Duration::from_secs(30), || rig.discord.posts(channel).iter().any(|p| p.content == "that was all")).await;

    let numbers = piece_numbers(&rig, channel);
    assert_eq!(numbers, (1..=40).collect::<Vec<_>>(), "each piece once and in order");
    let resumed: Vec<i64> = receipts
        .all()
        .iter()
        .filter(|r| r.kind == "gateway.posted" && r.ids.get("key").is_some_and(|k| k == "reply:forty"))
        .map(|r| r.counts["pieces_resumed"])
        .collect();
    let limits = rig.discord.limit_counts();
    println!(
        "long reply: {owner} killed with {at_kill} pieces out; {successor} posted the rest in {:.1} s, resuming at piece {}; \
         loopback: {} user 429s, {} global 429s, {} invalid requests",
        killed.elapsed().as_secs_f64(),
        resumed.first().map_or(0, |r| r + 1),
        limits.rate_limited_user,
        limits.rate_limited_global,
        limits.invalid_total
    );
    assert_ne!(owner, successor, "the other replica took over");
    assert_eq!(resumed.len(), 1, "one poster finished the reply: {resumed:?}");
    assert!(resumed[0] as usize >= 10 && resumed[0] as usize <= at_kill, "resumed after the pieces already out: {resumed:?}");
    assert_eq!((limits.rate_limited_global, limits.invalid_total), (0, 0), "{limits:?}");
}

/// The REST holder dies after Discord accepted a reply and before it remembered posting it:
/// the next holder posts it again under the same enforced nonce, and Discord keeps one message.
#[tokio::test]
async fn chaos_a_poster_killed_between_discord_accepting_a_reply_and_recording_it_leaves_one_message() {
    let rig = Rig::new().await;
    let receipts = record::<v1::Receipt>(&rig.bus, Family::Receipt).await;
    let mut dying = gateway_process(&rig, "gateway-a", &[("CLANKIE_FAULT", "gateway.after_accept")]);
    assert_eq!(rest_owner(&rig).await, "gateway-a");
    let _next = gateway_process(&rig, "gateway-b", &[]);
    let channel = super::GENERAL;
    rig.bus.publish(&Subject::BodySend { channel }, &reply(channel, "reply:accepted", "posted before the crash"), None).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), dying.wait()).await.expect("the fault fired").unwrap();
    assert_eq!(status.code(), Some(clankie_settings::fault::EXIT_CODE), "gateway-a died after Discord accepted the reply");
    assert_eq!(rig.discord.posts(channel).len(), 1, "Discord accepted the reply before the crash");
    // gateway-a died before its receipt: the one `gateway.posted` is the next holder's repeat.
    let reposted = || receipts.all().iter().any(|r| r.kind == "gateway.posted" && r.ids.get("key").is_some_and(|k| k == "reply:accepted"));
    until("the next holder's repeat", Duration::from_secs(60), reposted).await;
    let posted: Vec<String> = rig.discord.posts(channel).iter().map(|p| p.content.clone()).collect();
    println!("accepted then killed: the channel holds {posted:?}");
    assert_eq!(posted, ["posted before the crash"], "the repeat was kept once by its nonce");
}

#[tokio::test]
async fn long_reply_a_long_reply_in_one_channel_does_not_delay_a_one_line_reply_in_another_by_more_than_1_s() {
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway_with(clankie_gateway::GatewayConfig { reply_max_pieces: 40, ..rig.gateway_config() }).await;
    let (busy, other) = (super::GENERAL, 201);
    rig.bus.publish(&Subject::BodySend { channel: busy }, &reply(busy, "reply:long", &numbered_reply(40)), None).await.unwrap();
    // Past the channel's first five: its bucket now holds every further piece for a second.
    until("the long reply under way", Duration::from_secs(30), || rig.discord.posts(busy).len() >= 6).await;
    let sent = clankie_bus::now_ms();
    rig.bus.publish(&Subject::BodySend { channel: other }, &reply(other, "reply:short", "lobby four opens at eight"), None).await.unwrap();
    until("the one-line reply", Duration::from_secs(30), || !rig.discord.posts(other).is_empty()).await;
    let delay = rig.discord.posts(other)[0].at_ms - sent;
    let busy_posted = rig.discord.posts(busy).len();
    println!(
        "long reply: a one-line reply in another channel posted {delay} ms after it was sent, the long one at piece {busy_posted} of 40"
    );
    assert!(busy_posted < 40, "the long reply was still under way");
    assert!(delay <= 1_000, "the one-line reply waited {delay} ms behind another channel's long reply");
}

/// 60 channels of the main guild, for the flood.
fn flood_config() -> LoopbackConfig {
    let mut config = LoopbackConfig { heartbeat_interval_ms: 5_000, ..LoopbackConfig::default() };
    config.channels.extend((0..60).map(|n| ChannelSpec {
        id: 1_000 + n,
        name: format!("room-{n}"),
        voice: false,
        guild: None,
        overwrites: vec![],
        ..Default::default()
    }));
    config
}

/// Seconds of the flood: 4 by default, `CLANKIE_REST_BUDGET_SECS` (20 in the long mode) to change.
fn flood_seconds() -> u64 {
    std::env::var("CLANKIE_REST_BUDGET_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(4)
}

/// The most of `sorted` (ms, ascending) that fall within any `span` ms: a sliding window.
fn most_within(sorted: &[i64], span: i64) -> usize {
    densest_window(sorted, span).0
}

/// The most of `sorted` inside any `span` ms (a sliding window), and when that window starts.
fn densest_window(sorted: &[i64], span: i64) -> (usize, i64) {
    let mut first = 0;
    let (mut best, mut at) = (0, 0);
    for last in 0..sorted.len() {
        while sorted[last] - sorted[first] >= span {
            first += 1;
        }
        if last - first + 1 > best {
            (best, at) = (last - first + 1, sorted[first]);
        }
    }
    (best, at)
}

/// The arrivals around the densest `span` ms of `sorted`, counted per 100 ms: whether they came
/// bunched after a gap (a process held up) or evenly too fast.
fn densest(sorted: &[i64], span: i64) -> String {
    let (_, at) = densest_window(sorted, span);
    let per_100ms: Vec<usize> =
        (-10..20).map(|k| sorted.iter().filter(|t| (at + k * 100..at + (k + 1) * 100).contains(*t)).count()).collect();
    format!("per 100 ms from 1 s before the densest second to 1 s after it: {per_100ms:?}")
}

fn percentile(sorted: &[i64], q: f64) -> i64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

#[tokio::test]
async fn rest_budget_three_gateways_posting_150_replies_a_second_into_60_channels_stay_inside_discords_limits() {
    let rig = Rig::with(flood_config()).await;
    let replicas: Vec<_> = ["gateway-a", "gateway-b", "gateway-c"].iter().map(|name| gateway_process(&rig, name, &[])).collect();
    let owner = rest_owner(&rig).await;
    // Every replica is up (each announces itself) before the flood, so all three could post.
    let kv = rig.bus.key_value(clankie_gateway::leases::SHARDS_BUCKET, Duration::from_secs(3600)).await.unwrap();
    let probe = clankie_gateway::leases::ShardLeases::new(kv, "probe", Duration::from_secs(1));
    until_async_replicas(&probe, 3).await;

    let (seconds, per_second) = (flood_seconds(), 150u64);
    let mut sent_at = HashMap::new();
    let started = tokio::time::Instant::now();
    for n in 0..seconds * per_second {
        // Paced, not burst: reply n goes out at n / 150 s.
        tokio::time::sleep_until(started + Duration::from_micros(n * 1_000_000 / per_second)).await;
        let channel = 1_000 + n % 60;
        let key = format!("reply:flood:{n}");
        sent_at.insert(format!("flood {n}"), clankie_bus::now_ms());
        rig.bus.publish(&Subject::BodySend { channel }, &reply(channel, &key, &format!("flood {n}")), None).await.unwrap();
    }
    let offered = started.elapsed();
    let total = sent_at.len();
    let posted = || (0..60).map(|n| rig.discord.posts(1_000 + n)).flatten().collect::<Vec<_>>();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds * 5 + 60);
    while posted().len() < total {
        if tokio::time::Instant::now() > deadline {
            let logs: String = ["gateway-a", "gateway-b", "gateway-c"]
                .iter()
                .map(|r| std::fs::read_to_string(rig.dir.path().join(format!("{r}.log"))).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n----\n");
            let tail: String = logs.lines().rev().take(200).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
            panic!("{} of {total} replies posted; loopback {:?}\n{tail}", posted().len(), rig.discord.limit_counts());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained = started.elapsed();

    let posts = posted();
    let mut seen = HashMap::new();
    for p in &posts {
        *seen.entry(p.content.clone()).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    let mut delays: Vec<i64> = posts.iter().filter_map(|p| Some(p.at_ms - sent_at.get(&p.content)?)).collect();
    delays.sort_unstable();
    let limits = rig.discord.limit_counts();
    // Discord's limits from what arrived, in sliding windows, whatever the loopback's own
    // windows counted: the most create requests one channel took in any 5 s, the most requests
    // in any second.
    let creates_in_5s = (0..60).map(|n| most_within(&rig.discord.create_requests(1_000 + n), 5_000)).max().unwrap_or(0);
    let requests_in_1s = most_within(&rig.discord.request_arrivals(), 1_000);
    println!(
        "rest budget: {total} replies offered over {:.1} s by 3 gateways (REST owner {owner}) into 60 channels, \
         all posted after {:.1} s ({:.1} a second); delay p50 {} ms, p99 {} ms; most creates in one channel in any 5 s \
         {creates_in_5s}, most requests in any second {requests_in_1s}; loopback: {} user 429s, {} global 429s, {} invalid requests",
        offered.as_secs_f64(),
        drained.as_secs_f64(),
        total as f64 / drained.as_secs_f64(),
        percentile(&delays, 0.50),
        percentile(&delays, 0.99),
        limits.rate_limited_user,
        limits.rate_limited_global,
        limits.invalid_total
    );
    // Who spoke REST when: a tenure that changed hands mid-flood shows here.
    let tenures: Vec<String> = ["gateway-a", "gateway-b", "gateway-c"]
        .iter()
        .flat_map(|r| {
            let log = std::fs::read_to_string(rig.dir.path().join(format!("{r}.log"))).unwrap_or_default();
            log.lines()
                .filter(|l| l.contains("speaks Discord's REST API now") || l.contains("the REST lease was lost"))
                .map(|l| format!("{r}: {}", l.chars().take(120).collect::<String>()))
                .collect::<Vec<_>>()
        })
        .collect();
    println!("rest budget: REST tenures {tenures:#?}");
    assert!(twice.is_empty(), "replies posted twice: {twice:?}");
    assert_eq!(seen.len(), total, "every reply posted");
    assert!(creates_in_5s <= 5, "a channel took {creates_in_5s} creates within 5 s; REST tenures {tenures:#?}");
    assert!(
        requests_in_1s <= 50,
        "{requests_in_1s} requests arrived within one second: {}",
        densest(&rig.discord.request_arrivals(), 1_000)
    );
    assert_eq!((limits.rate_limited_user, limits.rate_limited_global, limits.invalid_total), (0, 0, 0), "{limits:?}");
    drop(replicas);
}

/// The REST holder posts five replies into one channel, filling Discord's window there, and is
/// stopped by `stop`; five more replies come after, which its successor posts as soon as it
/// holds the lease (none waits on a dead holder's ack). What arrived at Discord in that
/// channel: the most creates in any 5 s, and the successor's first create's distance from the
/// first of the five.
async fn successor_after(stop: fn(&tokio::process::Child), how: &str) -> (usize, i64) {
    let rig = Rig::new().await;
    let mut replicas: HashMap<_, _> = ["gateway-a", "gateway-b"].iter().map(|n| (n.to_string(), gateway_process(&rig, n, &[]))).collect();
    let owner = rest_owner(&rig).await;
    let kv = rig.bus.key_value(clankie_gateway::leases::SHARDS_BUCKET, Duration::from_secs(3600)).await.unwrap();
    let probe = clankie_gateway::leases::ShardLeases::new(kv, "probe", Duration::from_secs(1));
    until_async_replicas(&probe, 2).await;
    let channel = super::GENERAL;
    let publish = |range: std::ops::Range<u32>| {
        let bus = rig.bus.clone();
        async move {
            for n in range {
                let out = reply(channel, &format!("reply:window:{n}"), &format!("window {n}"));
                bus.publish(&Subject::BodySend { channel }, &out, None).await.unwrap();
            }
        }
    };
    publish(0..5).await;
    until("the holder's five creates", Duration::from_secs(20), || rig.discord.posts(channel).len() >= 5).await;
    stop(&replicas[&owner]);
    publish(5..10).await;
    until("all ten replies", Duration::from_secs(60), || rig.discord.posts(channel).len() >= 10).await;
    let creates = rig.discord.create_requests(channel);
    let most = most_within(&creates, 5_000);
    let gap = creates.get(5).map_or(0, |sixth| sixth - creates[0]);
    let successor = rig.rest_owner().await.unwrap_or_default();
    println!(
        "rest budget: {owner} {how} after five creates; {successor} sent the sixth {gap} ms after the first; most creates in any 5 s {most} ({} requests in all)",
        creates.len()
    );
    replicas.clear();
    (most, gap)
}

#[tokio::test]
async fn rest_budget_a_successor_counts_the_creates_its_predecessor_handed_over_on_stopping() {
    let (most, gap) = successor_after(sigterm, "stopped (SIGTERM)").await;
    assert!(most <= 5, "a channel took {most} creates within 5 s across the handover");
    assert!(gap >= 5_000, "the successor's first create came {gap} ms after the predecessor's first");
}

#[tokio::test]
async fn rest_budget_a_successor_counts_the_creates_of_a_predecessor_killed_without_handing_over() {
    let (most, gap) = successor_after(sigkill, "killed (SIGKILL)").await;
    assert!(most <= 5, "a channel took {most} creates within 5 s across the handover");
    assert!(gap >= 5_000, "the successor's first create came {gap} ms after the predecessor's first");
}

async fn until_async_replicas(probe: &clankie_gateway::leases::ShardLeases, count: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while probe.replicas_alive().await.unwrap() < count {
        assert!(tokio::time::Instant::now() < deadline, "fewer than {count} replicas announced themselves");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn sigterm(child: &tokio::process::Child) {
    let pid = child.id().expect("a running gateway").to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
}

/// A tool card step of turn `t9` in `channel`.
fn tool_card(channel: u64, op: v1::ToolCardOp, step: &str) -> v1::OutboundMessage {
    v1::OutboundMessage {
        idempotency_key: format!("card:t9:{step}"),
        kind: v1::OutboundKind::ToolCard as i32,
        guild_id: Some(super::GUILD),
        channel_id: channel,
        tool_card_op: op as i32,
        tool_names: vec!["read_page".into()],
        delivery_id: format!("card-{step}"),
        ..Default::default()
    }
}

#[tokio::test]
async fn handover_a_rest_holder_stopped_mid_reply_hands_its_messages_back_in_order_and_the_next_posts_within_1_s() {
    let rig = Rig::new().await;
    // Each piece is held a moment after it is posted, so the stop lands inside R1.
    let (replicas, owner) = two_slow_posters(&rig).await;
    let channel = super::GENERAL;
    let send = Subject::BodySend { channel };
    rig.bus.publish(&send, &tool_card(channel, v1::ToolCardOp::Post, "post"), None).await.unwrap();
    rig.bus.publish(&send, &reply(channel, "reply:r1", &numbered_reply(8)), None).await.unwrap();
    rig.bus.publish(&send, &tool_card(channel, v1::ToolCardOp::Remove, "remove"), None).await.unwrap();
    rig.bus.publish(&send, &reply(channel, "reply:r2", "R2 comes after R1"), None).await.unwrap();
    until("R1's second piece", Duration::from_secs(30), || piece_numbers(&rig, channel).len() >= 2).await;
    sigterm(&replicas[&owner]);
    // The successor's tenure, as the lease shows it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (successor, took_ms) = loop {
        if let Some(now) = rig.rest_owner().await.filter(|o| *o != owner) {
            break (now, clankie_bus::now_ms());
        }
        assert!(tokio::time::Instant::now() < deadline, "nobody took the REST lease after {owner} stopped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    until("R2", Duration::from_secs(30), || rig.discord.posts(channel).iter().any(|p| p.content == "R2 comes after R1")).await;

    let posts = rig.discord.posts(channel);
    assert_eq!(piece_numbers(&rig, channel), (1..=8).collect::<Vec<_>>(), "each piece of R1 once and in order");
    let last_piece = posts.iter().rposition(|p| p.content.starts_with("[piece 08]")).expect("R1's last piece");
    let r2 = posts.iter().position(|p| p.content == "R2 comes after R1").expect("R2");
    assert!(last_piece < r2, "R1 posted before R2");
    let cards: Vec<_> = posts.iter().filter(|p| p.content.starts_with("🔧")).collect();
    assert!(!cards.is_empty(), "the card was posted");
    assert!(cards.iter().all(|c| c.deleted), "a tool card remains: {cards:?}");
    let first_after = posts.iter().filter(|p| p.at_ms >= took_ms).map(|p| p.at_ms).min().expect("the successor posted");
    let gap = first_after - took_ms;
    println!(
        "handover: {owner} stopped with {} pieces of R1 out; {successor} took the lease and posted {gap} ms later",
        posts.iter().filter(|p| p.at_ms < took_ms && p.content.starts_with("[piece")).count()
    );
    assert!(gap < 1_000, "the successor began posting {gap} ms after taking the lease (the ack wait is 10 s)");
}

/// The REST holder is SIGSTOPped on its way to post a reply (past its last lease check before
/// the pacing), loses the lease while stopped, and is resumed after its successor posted the
/// reply: it sends nothing (no create request reaches Discord after the resume), and says why.
#[tokio::test]
async fn handover_a_rest_holder_sigstopped_past_its_lease_and_resumed_sends_nothing() {
    let rig = Rig::new().await;
    let channel = super::GENERAL;
    let holder = gateway_process(&rig, "gateway-a", &[("CLANKIE_FAULT_HOLD", "gateway.before_post=1500")]);
    assert_eq!(rest_owner(&rig).await, "gateway-a");
    let _successor = gateway_process(&rig, "gateway-b", &[]);
    let kv = rig.bus.key_value(clankie_gateway::leases::SHARDS_BUCKET, Duration::from_secs(3600)).await.unwrap();
    let probe = clankie_gateway::leases::ShardLeases::new(kv, "probe", Duration::from_secs(1));
    until_async_replicas(&probe, 2).await;
    let log = || std::fs::read_to_string(rig.dir.path().join("gateway-a.log")).unwrap_or_default();

    rig.bus.publish(&Subject::BodySend { channel }, &reply(channel, "reply:stopped", "posted once, by the successor"), None).await.unwrap();
    until("the holder on its way to post", Duration::from_secs(20), || log().contains("fault injected at gateway.before_post: holding"))
        .await;
    let pid = holder.id().expect("the holder runs").to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let stopped = clankie_bus::now_ms();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while rig.rest_owner().await.as_deref() != Some("gateway-b") {
        assert!(tokio::time::Instant::now() < deadline, "the successor never took the REST lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until("the reply posted by the successor", Duration::from_secs(30), || {
        rig.discord.posts(channel).iter().any(|p| p.content == "posted once, by the successor")
    })
    .await;
    let resumed = clankie_bus::now_ms();
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    // On waking, its hold and its lease keeping are both due at once: either the last check
    // before the request (the fence) or the lease keeping finds the lease gone, and each says so;
    // or the request goes out.
    let (fenced, lost) = ("the REST lease ran out before a request went out", "the REST lease was lost");
    let creates_after = || rig.discord.create_requests(channel).into_iter().filter(|at| *at >= resumed).count();
    until("the resumed holder's next step", Duration::from_secs(20), || {
        log().contains(fenced) || log().contains(lost) || creates_after() > 0
    })
    .await;
    // Either line is a verdict some path reached, not proof that none other sends: watch past
    // the hold's own length twice over (a request the woken post path sent would be at the
    // loopback by then) for any create from the resumed holder.
    let window = tokio::time::Instant::now() + Duration::from_millis(2 * 1_500 + 1_000);
    while tokio::time::Instant::now() < window {
        assert_eq!(creates_after(), 0, "the resumed holder sent a create after losing the lease:\n{}", log());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let posts = rig.discord.posts(channel);
    println!(
        "handover: the holder stopped {} ms on its way to post; after its resume: {} create requests, stopped by {}",
        resumed - stopped,
        creates_after(),
        if log().contains(fenced) { "the fence" } else { "its lease keeping" }
    );
    assert_eq!(creates_after(), 0, "the resumed holder sent a create after losing the lease");
    assert_eq!(posts.iter().filter(|p| p.content == "posted once, by the successor").count(), 1);
}
