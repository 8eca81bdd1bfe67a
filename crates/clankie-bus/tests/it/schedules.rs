//! Reminders that nats-server fires by itself (JetStream message schedules), against the
//! pinned nats-server: its clock cannot be moved, so every test schedules a few seconds ahead
//! and measures how late each firing came.
//!
//! A test that asserts something did not fire waits on a sentinel: a second reminder due after
//! the time in question, published by the same scheduler into the same stream, so by the time
//! it arrives any firing before it has arrived too.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clankie_bus::{Bus, BusError, Firing, Next, SCHEDULES_STREAM, Schedule};
use clankie_proto::{Subject, v1};
use clankie_testkit::{TestDir, TestNats, TestNatsCluster};
use futures::TryStreamExt;
use tokio::sync::mpsc;

/// A bus on `urls` with the streams at `replicas`; a cluster takes a moment to elect its
/// JetStream leader, so the streams are asked for until they are made.
async fn connect(urls: &str, replicas: usize, dir: &TestDir) -> Bus {
    let dir = dir.path().display().to_string();
    let vars = [("CLANKIE_NATS_URL", urls.to_owned()), ("CLANKIE_STREAM_REPLICAS", replicas.to_string()), ("CLANKIE_STATE_DIR", dir)];
    let settings = clankie_settings::Settings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
    let bus = Bus::connect(&settings, "test").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = bus.ensure_streams().await {
        assert!(Instant::now() < deadline, "the streams were never made: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bus
}

fn reminder(id: u64, text: &str) -> v1::Reminder {
    v1::Reminder {
        reminder_id: id,
        guild_id: Some(10),
        channel_id: 20,
        asker_id: 30,
        asker_name: "ada".into(),
        text: text.into(),
        created_at_ms: clankie_bus::now_ms(),
        delivery_id: "555".into(),
        ..Default::default()
    }
}

fn ns(at: SystemTime) -> i128 {
    at.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128
}

/// Seconds from `due` to `at_ns`, signed.
fn late_s(due: SystemTime, at_ns: i128) -> f64 {
    (at_ns - ns(due)) as f64 / 1e9
}

/// One firing as a consumer received it.
#[derive(Debug)]
struct Got {
    replica: usize,
    event: v1::Reminder,
    firing: Firing,
    ttl: Option<String>,
    received_ns: i128,
}

/// Consumes due reminders through the durable `durable` on each bus (replicas sharing it),
/// acking each, and hands every one on.
async fn consume(buses: &[&Bus], durable: &str) -> mpsc::UnboundedReceiver<Got> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (replica, bus) in buses.iter().enumerate() {
        let mut consumer = bus.due_reminders(durable).await.unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                let Ok(delivery) = consumer.next().await else { return };
                let received_ns = ns(SystemTime::now());
                let got = Got {
                    replica,
                    event: delivery.event.clone(),
                    firing: delivery.firing(),
                    ttl: delivery.header("Nats-TTL").map(str::to_owned),
                    received_ns,
                };
                if tx.send(got).is_err() {
                    return;
                }
                delivery.ack().await.unwrap();
            }
        });
    }
    rx
}

/// Every firing received until the sentinel reminder `sentinel` has arrived and the durable
/// `captain` holds nothing more, delivered or not (within `within`): replicas consume in
/// parallel, so a firing stored before the sentinel may still reach its replica after it.
async fn until_sentinel(bus: &Bus, rx: &mut mpsc::UnboundedReceiver<Got>, sentinel: u64, within: Duration) -> (Vec<Got>, Got) {
    let deadline = tokio::time::Instant::now() + within;
    let mut got = Vec::new();
    let mut seen = None;
    loop {
        match tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
            Ok(Some(next)) if next.firing.reminder == sentinel => seen = Some(next),
            Ok(Some(next)) => got.push(next),
            Ok(None) => panic!("the consumers stopped"),
            Err(_) => {}
        }
        if seen.is_some() && settled(bus).await {
            // Each replica hands a firing on before it acks it: settled, everything is here.
            while let Ok(next) = rx.try_recv() {
                got.push(next);
            }
            if let Some(sentinel) = seen {
                return (got, sentinel);
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "the sentinel reminder and all before it consumed within {within:?}: {got:?}");
    }
}

/// Whether the durable `captain` has nothing pending or unacked.
async fn settled(bus: &Bus) -> bool {
    let Ok(stream) = bus.jetstream().get_stream(SCHEDULES_STREAM).await else { return false };
    let Ok(mut consumer) = stream.get_consumer::<async_nats::jetstream::consumer::pull::Config>("captain").await else { return false };
    consumer.info().await.is_ok_and(|i| i.num_pending == 0 && i.num_ack_pending == 0)
}

/// How many messages the schedules stream holds on `subject`.
async fn stored_on(bus: &Bus, subject: &Subject) -> usize {
    let stream = bus.jetstream().get_stream(SCHEDULES_STREAM).await.unwrap();
    let subject = subject.to_string();
    let counts: Vec<(String, usize)> = stream.info_with_subjects(&subject).await.unwrap().try_collect().await.unwrap();
    counts.into_iter().filter(|(s, _)| *s == subject).map(|(_, n)| n).sum()
}

#[tokio::test]
async fn schedule_at_fires_once_near_its_time_and_one_replica_consumes_it() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let (a, b) = (connect(&nats.url(), 1, &dir).await, connect(&nats.url(), 1, &dir).await);
    let mut rx = consume(&[&a, &b], "captain").await;

    let due = SystemTime::now() + Duration::from_secs(3);
    let sentinel_due = due + Duration::from_secs(2);
    let asked = reminder(1, "stretch your legs");
    a.schedule_once(1, due, &asked).await.unwrap();
    a.schedule_once(2, sentinel_due, &reminder(2, "sentinel")).await.unwrap();
    let def = Subject::ScheduleDef { reminder: 1 };
    let stored = a.jetstream().get_stream(SCHEDULES_STREAM).await.unwrap().get_last_raw_message_by_subject(&def.to_string()).await.unwrap();
    let mut def_headers: Vec<String> = stored.headers.iter().map(|(k, v)| format!("{k}: {}", v[0].as_str())).collect();
    def_headers.sort();

    let (fired, sentinel) = until_sentinel(&a, &mut rx, 2, Duration::from_secs(12)).await;
    assert_eq!(fired.len(), 1, "one firing: {fired:?}");
    let got = &fired[0];
    let (fire_late, receive_late) = (late_s(due, got.firing.fired_ns), late_s(due, got.received_ns));
    println!(
        "schedule_at: fired {fire_late:+.3} s from its time, received {receive_late:+.3} s (replica {}), sentinel fired {:+.3} s; \
         firing headers: scheduler {:?}, next {:?}, TTL {:?}, revision {:?}; the definition as stored: {def_headers:?}",
        got.replica,
        late_s(sentinel_due, sentinel.firing.fired_ns),
        got.firing.scheduler,
        got.firing.next,
        got.ttl,
        got.firing.revision,
    );
    assert!(fire_late.abs() <= 2.0, "fired {fire_late:+.3} s from its time");
    assert_eq!(got.event, asked, "the body as defined");
    assert_eq!(got.firing.scheduler.as_deref(), Some(def.to_string().as_str()));
    assert_eq!(got.firing.next, Next::Done);
    assert!(got.firing.revision.is_some(), "the definition's own headers travel with the firing");
    assert_eq!(got.ttl.as_deref(), Some(format!("{}s", clankie_bus::FIRING_TTL.as_secs()).as_str()));

    // The server stores the firing in the stream once and removes the one-off definition.
    assert_eq!(stored_on(&a, &Subject::ScheduleDue { reminder: 1 }).await, 1);
    assert_eq!(stored_on(&a, &def).await, 0, "a one-off's definition goes when it fires");
    assert_eq!(a.cancel_schedule(1).await.unwrap(), 0, "nothing left to cancel");
    let stream = a.jetstream().get_stream(SCHEDULES_STREAM).await.unwrap();
    let mut consumer = stream.get_consumer::<async_nats::jetstream::consumer::pull::Config>("captain").await.unwrap();
    let info = consumer.info().await.unwrap();
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0), "each firing consumed and acked once");
}

#[tokio::test]
async fn schedule_published_again_before_due_replaces_the_definition() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let bus = connect(&nats.url(), 1, &dir).await;
    let mut rx = consume(&[&bus], "captain").await;

    let first_due = SystemTime::now() + Duration::from_secs(3);
    let due = first_due + Duration::from_secs(1);
    bus.schedule_once(1, first_due, &reminder(1, "old words")).await.unwrap();
    bus.schedule_once(1, due, &reminder(1, "new words")).await.unwrap();
    let def = Subject::ScheduleDef { reminder: 1 };
    assert_eq!(stored_on(&bus, &def).await, 1, "the second definition rolled the first up");
    let sentinel_due = due + Duration::from_millis(1500);
    bus.schedule_once(2, sentinel_due, &reminder(2, "sentinel")).await.unwrap();

    let (fired, sentinel) = until_sentinel(&bus, &mut rx, 2, Duration::from_secs(12)).await;
    assert_eq!(fired.len(), 1, "one firing: {fired:?}");
    let fire_late = late_s(due, fired[0].firing.fired_ns);
    println!(
        "schedule_replace: one firing, {fire_late:+.3} s from the new time ({:+.3} s from the replaced one), body {:?}; sentinel {:+.3} s",
        late_s(first_due, fired[0].firing.fired_ns),
        fired[0].event.text,
        late_s(sentinel_due, sentinel.firing.fired_ns)
    );
    assert_eq!(fired[0].event.text, "new words");
    assert!(fire_late.abs() <= 2.0, "fired {fire_late:+.3} s from the new time");
    assert_eq!(stored_on(&bus, &Subject::ScheduleDue { reminder: 1 }).await, 1);
}

#[tokio::test]
async fn schedule_cancelled_before_due_never_fires() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let bus = connect(&nats.url(), 1, &dir).await;
    let mut rx = consume(&[&bus], "captain").await;

    let due = SystemTime::now() + Duration::from_secs(3);
    bus.schedule_once(1, due, &reminder(1, "never")).await.unwrap();
    assert_eq!(bus.cancel_schedule(1).await.unwrap(), 1, "the definition was purged");
    assert_eq!(bus.cancel_schedule(1).await.unwrap(), 0, "cancelling again finds nothing");
    let sentinel_due = due + Duration::from_millis(1500);
    bus.schedule_once(2, sentinel_due, &reminder(2, "sentinel")).await.unwrap();

    let (fired, sentinel) = until_sentinel(&bus, &mut rx, 2, Duration::from_secs(12)).await;
    let waited_past = late_s(due, sentinel.received_ns);
    println!(
        "schedule_cancel: nothing fired; the sentinel arrived {waited_past:+.3} s after the cancelled time ({} firings before it)",
        fired.len()
    );
    assert!(fired.is_empty(), "a cancelled reminder fired: {fired:?}");
    assert!(waited_past >= 1.0, "the check ran past the cancelled time by {waited_past:.3} s only");
    assert_eq!(stored_on(&bus, &Subject::ScheduleDue { reminder: 1 }).await, 0);
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)` to Unix nanoseconds.
fn parse_rfc3339(s: &str) -> Option<i128> {
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (n(0..4)?, n(5..7)?, n(8..10)?, n(11..13)?, n(14..16)?, n(17..19)?);
    let mut rest = &s[19..];
    let mut frac_ns = 0i128;
    if let Some(f) = rest.strip_prefix('.') {
        let digits = f.find(|c: char| !c.is_ascii_digit()).unwrap_or(f.len());
        frac_ns = format!("{:0<9}", &f[..digits])[..9].parse().ok()?;
        rest = &f[digits..];
    }
    let offset_s = match rest {
        "Z" => 0,
        _ => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (rest.get(1..3)?.parse::<i64>().ok()? * 3600 + rest.get(4..6)?.parse::<i64>().ok()? * 60)
        }
    };
    // Howard Hinnant's days-from-civil.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + mi * 60 + se - offset_s) as i128) * 1_000_000_000 + frac_ns)
}

#[tokio::test]
async fn schedule_cron_with_seconds_fires_at_each_due_time_and_stops_when_cancelled() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let bus = connect(&nats.url(), 1, &dir).await;
    let mut rx = consume(&[&bus], "captain").await;

    // Six fields, seconds first: every even second, in a zone with a whole-hour offset.
    let defined_ns = ns(SystemTime::now());
    bus.schedule_cron(1, "*/2 * * * * *", Some("America/New_York"), &reminder(1, "drink water")).await.unwrap();
    let mut fired: Vec<Got> = Vec::new();
    while fired.len() < 3 {
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("the next firing within 5 s").unwrap();
        assert_eq!(got.firing.reminder, 1);
        fired.push(got);
    }
    let cancelled_ns = ns(SystemTime::now());
    assert_eq!(bus.cancel_schedule(1).await.unwrap(), 1, "a repeating definition stays until cancelled");

    // Each firing is due on an even second; each says when the next is due, and the next came then.
    let mut figures = Vec::new();
    for (i, got) in fired.iter().enumerate() {
        let Next::At(next) = &got.firing.next else { panic!("a repeating firing names its next time: {:?}", got.firing) };
        let next_ns = parse_rfc3339(next).unwrap_or_else(|| panic!("{next:?} is RFC 3339"));
        assert_eq!(next_ns % 2_000_000_000, 0, "{next} is an even second");
        assert!(next.ends_with("-04:00") || next.ends_with("-05:00"), "{next} is in New York's time");
        let due_ns = if i == 0 {
            (defined_ns / 2_000_000_000 + 1) * 2_000_000_000
        } else {
            parse_rfc3339(match &fired[i - 1].firing.next {
                Next::At(n) => n,
                _ => unreachable!(),
            })
            .unwrap()
        };
        let late = (got.firing.fired_ns - due_ns) as f64 / 1e9;
        figures.push(format!("#{} {late:+.3} s (next {next})", i + 1));
        assert!(late.abs() <= 2.0, "firing {} came {late:+.3} s from its time", i + 1);
        assert!(i == 0 || got.firing.fired_ns > fired[i - 1].firing.fired_ns);
    }
    let keys: std::collections::BTreeSet<String> = fired.iter().map(|g| g.firing.key()).collect();
    assert_eq!(keys.len(), 3, "each firing has a key of its own");

    // After the cancel, nothing more: a sentinel due past the next two even seconds.
    let sentinel_due = SystemTime::now() + Duration::from_secs(3);
    bus.schedule_once(2, sentinel_due, &reminder(2, "sentinel")).await.unwrap();
    let (after, sentinel) = until_sentinel(&bus, &mut rx, 2, Duration::from_secs(8)).await;
    let late_ones: Vec<&Got> = after.iter().filter(|g| g.firing.fired_ns > cancelled_ns).collect();
    println!(
        "schedule_cron `*/2 * * * * *` in America/New_York: {}; {} firing(s) in flight at the cancel; none after it, checked {:.3} s past the cancel",
        figures.join(", "),
        after.len(),
        (sentinel.received_ns - cancelled_ns) as f64 / 1e9
    );
    assert!(late_ones.is_empty(), "fired after the cancel: {late_ones:?}");
}

#[tokio::test]
async fn schedule_every_interval_repeats_on_it() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let bus = connect(&nats.url(), 1, &dir).await;
    let mut rx = consume(&[&bus], "captain").await;
    let defined_ns = ns(SystemTime::now());
    bus.schedule(1, &Schedule::Every(Duration::from_secs(2)), &reminder(1, "tick")).await.unwrap();
    let mut at = Vec::new();
    while at.len() < 2 {
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("the next firing within 5 s").unwrap();
        assert!(matches!(got.firing.next, Next::At(_)));
        at.push(got.firing.fired_ns);
    }
    bus.cancel_schedule(1).await.unwrap();
    let (first, gap) = ((at[0] - defined_ns) as f64 / 1e9, (at[1] - at[0]) as f64 / 1e9);
    println!("schedule_every 2s: first {first:.3} s after the definition, then {gap:.3} s apart");
    assert!((1.0..=4.0).contains(&first) && (1.0..=3.0).contains(&gap));
}

#[tokio::test]
async fn schedule_bad_definitions_are_refused_with_typed_errors() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let bus = connect(&nats.url(), 1, &dir).await;
    let r = reminder(1, "x");
    let past = bus.schedule_once(1, SystemTime::now() - Duration::from_secs(1), &r).await;
    assert!(matches!(past, Err(BusError::ScheduleInPast { reminder: 1, .. })), "{past:?}");
    let five = bus.schedule_cron(1, "*/2 * * * *", None, &r).await;
    assert!(matches!(five, Err(BusError::ScheduleRefused { reminder: 1, .. })), "{five:?}");
    let short = bus.schedule(1, &Schedule::Every(Duration::from_millis(500)), &r).await;
    assert!(matches!(short, Err(BusError::ScheduleRefused { .. })), "{short:?}");
    // What only the server can tell: a value out of range, a zone it does not know.
    let range = bus.schedule_cron(1, "61 * * * * *", None, &r).await;
    let zone = bus.schedule_cron(1, "0 0 9 * * *", Some("Mars/Olympus_Mons"), &r).await;
    println!("schedule_refused: out of range: {range:?}; unknown zone: {zone:?}; past: {past:?}");
    assert!(matches!(range, Err(BusError::ScheduleRefused { .. })), "{range:?}");
    assert!(matches!(zone, Err(BusError::ScheduleRefused { .. })), "{zone:?}");
    let plain = bus.publish(&Subject::ScheduleDef { reminder: 1 }, &r, None).await;
    assert!(plain.is_err(), "a definition without its schedule was published");
    assert_eq!(stored_on(&bus, &Subject::ScheduleDef { reminder: 1 }).await, 0, "nothing refused was stored");
}

/// The stream's leader as JetStream reports it.
async fn schedules_leader(bus: &Bus) -> Option<String> {
    let mut stream = bus.jetstream().get_stream(SCHEDULES_STREAM).await.ok()?;
    stream.info().await.ok()?.cluster.clone()?.leader
}

#[tokio::test]
async fn schedule_survives_losing_the_streams_leader_in_a_three_node_cluster_and_fires_once() {
    let mut cluster = TestNatsCluster::start(3).unwrap();
    let dir = TestDir::new();
    let bus = connect(&cluster.urls(), 3, &dir).await;
    let (a, b) = (bus.clone(), connect(&cluster.urls(), 3, &dir).await);
    let mut rx = consume(&[&a, &b], "captain").await;

    let due = SystemTime::now() + Duration::from_secs(4);
    let sentinel_due = due + Duration::from_secs(2);
    bus.schedule_once(1, due, &reminder(1, "the lobby opens")).await.unwrap();
    bus.schedule_once(2, sentinel_due, &reminder(2, "sentinel")).await.unwrap();
    let leader = schedules_leader(&bus).await.expect("the stream has a leader");
    let node = cluster.node_named(&leader).expect("the leader is one of ours");
    let killed_at = SystemTime::now();
    cluster.kill(node);
    println!(
        "schedule_cluster: killed {leader}, the schedules stream's leader, {:.3} s before the reminder was due",
        ns(due).saturating_sub(ns(killed_at)) as f64 / 1e9
    );

    let (fired, sentinel) = until_sentinel(&bus, &mut rx, 2, Duration::from_secs(20)).await;
    let new_leader = schedules_leader(&bus).await;
    let fire_late = fired.first().map(|g| late_s(due, g.firing.fired_ns));
    println!(
        "schedule_cluster: {} firing(s) of the reminder, fired {:+.3} s from its time, received {:+.3} s; sentinel fired {:+.3} s; new leader {new_leader:?}",
        fired.len(),
        fire_late.unwrap_or(f64::NAN),
        fired.first().map_or(f64::NAN, |g| late_s(due, g.received_ns)),
        late_s(sentinel_due, sentinel.firing.fired_ns),
    );
    assert_eq!(fired.len(), 1, "one firing across the leader's death: {fired:?}");
    // Late, not lost: a firing due while the stream has no leader comes when the new one's
    // scheduler takes over (measured 0.25 to 5 s late with the leader killed 4 s before).
    assert!(fire_late.is_some_and(|late| (-2.0..=12.0).contains(&late)), "fired {fire_late:?} s from its time");
    assert_ne!(new_leader.as_deref(), Some(leader.as_str()));
    assert_eq!(stored_on(&bus, &Subject::ScheduleDue { reminder: 1 }).await, 1, "stored once");
}
