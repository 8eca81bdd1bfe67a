//! `chaos_`: a service killed at an exact place, with everything else real and in its own
//! process (`clankie gateway`, `clankie captain`), against the loopback Discord.

use std::process::Stdio;
use std::time::Duration;

use clankie_discord_loopback::{Loopback, LoopbackConfig, NewMessage};
use clankie_model_standin::{Reply, Script, StandIn};
use clankie_testkit::{TestDb, TestDir, TestNats, until};
use tokio::process::{Child, Command};

pub(crate) const GENERAL: u64 = 200;

/// What the services under test run against: a `nats-server` and a database of the test's own
/// (migrated, streams declared), the loopback Discord and the model stand-in.
pub(crate) struct Cast {
    pub(crate) nats: Nats,
    pub(crate) db: TestDb,
    pub(crate) dir: TestDir,
    pub(crate) discord: Loopback,
    pub(crate) standin: StandIn,
    pub(crate) store: clankie_store::Store,
    pub(crate) bus: clankie_bus::Bus,
}

/// The cast's nats-server: one, or a cluster whose streams are replicated on every node.
pub(crate) enum Nats {
    One(TestNats),
    Cluster(clankie_testkit::TestNatsCluster),
}

impl Nats {
    /// Where a service connects: every node, comma-separated, for a cluster.
    pub(crate) fn url(&self) -> String {
        match self {
            Nats::One(nats) => nats.url(),
            Nats::Cluster(cluster) => cluster.urls(),
        }
    }

    /// How many replicas each stream keeps.
    pub(crate) fn replicas(&self) -> usize {
        match self {
            Nats::One(_) => 1,
            Nats::Cluster(_) => 3,
        }
    }
}

impl Cast {
    pub(crate) async fn start(discord: LoopbackConfig) -> Cast {
        Cast::on(Nats::One(TestNats::start().unwrap()), discord).await
    }

    /// A cast over a 3-node cluster, every stream replicated on each node.
    pub(crate) async fn on_a_cluster(discord: LoopbackConfig) -> Cast {
        Cast::on(Nats::Cluster(clankie_testkit::TestNatsCluster::start(3).unwrap()), discord).await
    }

    async fn on(nats: Nats, discord: LoopbackConfig) -> Cast {
        let (db, dir) = (TestDb::create().await, TestDir::new());
        let discord = Loopback::serve("127.0.0.1:0".parse().unwrap(), discord).await.unwrap();
        let standin = StandIn::start().await.unwrap();
        let vars = [
            ("CLANKIE_NATS_URL", nats.url()),
            ("CLANKIE_STREAM_REPLICAS", nats.replicas().to_string()),
            ("CLANKIE_DATABASE_URL", db.url().to_owned()),
            ("CLANKIE_STATE_DIR", dir.path().display().to_string()),
        ];
        let settings = clankie_settings::Settings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
        let store = clankie_store::Store::connect(db.url()).await.unwrap();
        store.migrate().await.unwrap();
        let bus = clankie_bus::Bus::connect(&settings, "test").await.unwrap();
        // A cluster takes a moment to elect its JetStream leader.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while let Err(e) = bus.ensure_streams().await {
            assert!(tokio::time::Instant::now() < deadline, "the streams were never made: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Cast { nats, db, dir, discord, standin, store, bus }
    }

    /// Waits until the gateway's outcome and outbound consumers hold nothing undelivered and
    /// nothing unacknowledged: the last round's work is done, so a fault point armed next is
    /// reached by the next round's work and not by a leftover redelivered to it.
    pub(crate) async fn gateway_settled(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        for (family, consumer) in
            [(clankie_proto::Family::LaneOutcome, "gateway-outcomes"), (clankie_proto::Family::BodySend, "gateway-body")]
        {
            let name = clankie_bus::stream_for(family).unwrap().name;
            let stream = self.bus.jetstream().get_stream(name).await.unwrap();
            loop {
                let info = stream.consumer_info(consumer).await.unwrap();
                if (info.num_pending, info.num_ack_pending) == (0, 0) {
                    break;
                }
                assert!(tokio::time::Instant::now() < deadline, "{consumer} still holds work after {within:?}: {info:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// `clankie <which>` as replica `replica`, with a fault point and extra settings.
    pub(crate) fn service(&self, which: &str, replica: &str, fault: Option<&str>, extra: &[(&str, &str)]) -> Child {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_clankie"));
        cmd.arg(which)
            .env("CLANKIE_NATS_URL", self.nats.url())
            .env("CLANKIE_STREAM_REPLICAS", self.nats.replicas().to_string())
            .env("CLANKIE_DATABASE_URL", self.db.url())
            .env("CLANKIE_STATE_DIR", self.dir.path())
            .env("CLANKIE_REPLICA_ID", replica)
            .env("CLANKIE_DISCORD_TOKEN", &self.discord.config().token)
            .env("CLANKIE_DISCORD_API", self.discord.addr().to_string())
            .env("CLANKIE_DISCORD_GATEWAY_URL", self.discord.gateway_url())
            .env("CLANKIE_MODEL_BASE_URL", self.standin.base_url())
            .env("CLANKIE_OUTCOME_REACTIONS", "true")
            .env("CLANKIE_TYPING_HOLD_MS", "0")
            .env("CLANKIE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join(format!("{replica}.log"))).unwrap())
            .kill_on_drop(true);
        if let Some(point) = fault {
            cmd.env("CLANKIE_FAULT", point);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    }

    /// `clankie trail <delivery>` against the cast's bus and database, as an operator runs it.
    pub(crate) async fn trail(&self, delivery: &str) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_clankie"))
            .args(["trail", delivery])
            .env("CLANKIE_NATS_URL", self.nats.url())
            .env("CLANKIE_DATABASE_URL", self.db.url())
            .env("CLANKIE_STATE_DIR", self.dir.path())
            .output()
            .await
            .unwrap()
    }

    /// `author` addresses him in the general channel; the message's id.
    pub(crate) fn mention(&self, author: &str, content: &str) -> u64 {
        self.say(author, content, true)
    }

    /// `author` writes in the general channel, mentioning him or not; the message's id.
    pub(crate) fn say(&self, author: &str, content: &str, mention: bool) -> u64 {
        self.discord.user_message(NewMessage {
            channel_id: GENERAL,
            author: author.into(),
            content: content.into(),
            mention,
            ..Default::default()
        })
    }
}

/// SIGKILL, and waits for the process to be gone: no drain, no ack, no close of anything it holds.
pub(crate) async fn sigkill(child: &mut Child) {
    let pid = child.id().unwrap();
    assert!(std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
    child.wait().await.unwrap();
}

/// One answer streamed in 64-character pieces after the model thinks `first_delay_ms`.
fn thinking(text: String, first_delay_ms: u64) -> Reply {
    Reply::Text { text, chunk_chars: 64, chunk_delay_ms: 0, first_delay_ms, tail_delay_ms: 0 }
}

#[tokio::test]
async fn chaos_gateway_killed_after_receiving_before_publishing_resumes_and_replies_once() {
    let cast = Cast::start(LoopbackConfig { heartbeat_interval_ms: 5_000, ..Default::default() }).await;
    let (discord, standin) = (&cast.discord, &cast.standin);
    standin.script(Script::any(Reply::text("Hello, only once.")));
    standin.script(Script::any(Reply::text("And hello again.")));
    let _captain = cast.service("captain", "captain", None, &[]);

    // The first gateway dies between receiving a message and storing it in JetStream.
    let mut doomed = cast.service("gateway", "gateway", Some("gateway.before_publish"), &[]);
    assert!(discord.wait_for_session(Duration::from_secs(20)).await, "the first gateway never attached");
    let id = cast.mention("ada", "@Clankie hi");
    let status = tokio::time::timeout(Duration::from_secs(20), doomed.wait()).await.expect("the fault fired").unwrap();
    assert_eq!(status.code(), Some(clankie_settings::fault::EXIT_CODE), "it died at the fault point");
    assert!(discord.posts(GENERAL).is_empty());

    // Its successor resumes the saved session; Discord replays the message; it is answered once.
    let resumes = discord.resumes();
    let _gateway = cast.service("gateway", "gateway", None, &[]);
    until("the resume", Duration::from_secs(20), || discord.resumes() > resumes).await;
    until("the reply", Duration::from_secs(30), || !discord.posts(GENERAL).is_empty()).await;
    // A later message is the barrier: once it is answered, a second answer to the first would be in.
    let later = cast.mention("bob", "@Clankie me too");
    until("the later reply", Duration::from_secs(30), || discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(later))).await;
    let to_first = discord.posts(GENERAL).iter().filter(|p| p.reply_to == Some(id)).count();
    println!(
        "chaos gateway before publish: rounds 1, deliveries 2, replies to the first {to_first}, resumes {}",
        discord.resumes() - resumes
    );
    assert_eq!(to_first, 1, "the replayed message was answered exactly once");
    assert_eq!(discord.identifies(), 1, "the successor resumed rather than identifying afresh");
}

/// A loopback Discord of `shards` shards (`max_concurrency` may identify per 5 s) with a guild on
/// each: shard k's guild has text channel `700 + k`. Discord routes guild g to shard (g >> 22) % shards.
pub(crate) fn a_guild_per_shard(shards: u32, max_concurrency: u32) -> LoopbackConfig {
    let mut config = LoopbackConfig { shards, max_concurrency, heartbeat_interval_ms: 5_000, ..Default::default() };
    for k in 0..u64::from(shards) {
        config.channels.push(clankie_discord_loopback::ChannelSpec {
            id: 700 + k,
            name: format!("shard-{k}"),
            voice: false,
            guild: Some((k + 4) << 22),
            overwrites: vec![],
            ..Default::default()
        });
    }
    config
}

/// Every shard's claim owner, in shard order (`None` for a shard nobody holds unexpired).
pub(crate) async fn shard_owners(leases: &clankie_gateway::leases::ShardLeases, shards: u32) -> Vec<Option<String>> {
    let mut owners = Vec::new();
    for shard in 0..shards {
        let held = leases.read(shard).await.unwrap();
        owners.push(held.filter(|h| h.claim.expires_ms > clankie_bus::now_ms()).map(|h| h.claim.owner));
    }
    owners
}

/// Two `clankie gateway` processes over a loopback Discord of four shards (two may identify
/// per 5 s); one is killed with SIGKILL and a message sent at once to a guild on one of its
/// shards. Its shards pass to the survivor, which resumes their sessions and so receives the
/// message; the captain answers it once.
#[tokio::test]
async fn shard_lease_a_gateway_killed_hands_its_shards_to_the_other_which_answers_once() {
    const SHARDS: u32 = 4;
    const TTL_MS: u64 = 3_000;
    let cast = Cast::start(a_guild_per_shard(SHARDS, 2)).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway-a", "gateway-b"]);
    let (discord, standin) = (&cast.discord, &cast.standin);
    standin.script(Script::any(Reply::text("Heard you, once.")));
    standin.script(Script::any(Reply::text("And you.")));
    let _captain = cast.service("captain", "captain", None, &[]);
    let ttl = TTL_MS.to_string();
    let lease = [("CLANKIE_SHARD_LEASE_TTL_MS", ttl.as_str())];
    let _a = cast.service("gateway", "gateway-a", None, &lease);
    let mut b = cast.service("gateway", "gateway-b", None, &lease);

    let settings = clankie_settings::Settings::for_endpoints(&cast.nats.url(), cast.db.url(), cast.dir.path()).unwrap();
    let bus = clankie_bus::Bus::connect(&settings, "test").await.unwrap();
    let kv = bus.key_value(clankie_gateway::leases::SHARDS_BUCKET, Duration::from_secs(3600)).await.unwrap();
    let leases = clankie_gateway::leases::ShardLeases::new(kv, "probe", Duration::from_millis(TTL_MS));
    let split = |owners: &[Option<String>]| {
        let count = |who: &str| owners.iter().filter(|o| o.as_deref() == Some(who)).count();
        (count("gateway-a"), count("gateway-b"))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let owners = shard_owners(&leases, SHARDS).await;
        if split(&owners) == (2, 2) && discord.attached_shards() == [0, 1, 2, 3] {
            println!("shard lease: settled as {owners:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replicas never settled at two shards each: {owners:?}, attached {:?}",
            discord.attached_shards()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // SIGKILL: no hand-over, no close frame; its claims run out.
    let owners = shard_owners(&leases, SHARDS).await;
    let doomed_shard = owners.iter().position(|o| o.as_deref() == Some("gateway-b")).unwrap() as u64;
    b.start_kill().unwrap();
    b.wait().await.unwrap();
    let killed = tokio::time::Instant::now();
    let channel = 700 + doomed_shard;
    let id = discord.user_message(NewMessage {
        channel_id: channel,
        author: "ada".into(),
        content: "@Clankie are you still there".into(),
        mention: true,
        ..Default::default()
    });
    let limit = Duration::from_millis(TTL_MS) + Duration::from_secs(5);
    loop {
        let owners = shard_owners(&leases, SHARDS).await;
        if split(&owners) == (4, 0) && discord.attached_shards() == [0, 1, 2, 3] {
            break;
        }
        assert!(
            killed.elapsed() < limit,
            "the survivor did not hold all four within TTL + 5 s: {owners:?}, attached {:?}",
            discord.attached_shards()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = killed.elapsed();
    until("the reply", Duration::from_secs(30), || discord.posts(channel).iter().any(|p| p.reply_to == Some(id))).await;
    // A later message on the same shard is the barrier: once it is answered, a second answer to the first would be in.
    let later = discord.user_message(NewMessage {
        channel_id: channel,
        author: "bob".into(),
        content: "@Clankie me too".into(),
        mention: true,
        ..Default::default()
    });
    until("the later reply", Duration::from_secs(30), || discord.posts(channel).iter().any(|p| p.reply_to == Some(later))).await;
    let to_first = discord.posts(channel).iter().filter(|p| p.reply_to == Some(id)).count();
    println!(
        "shard lease: survivor held 4 of 4 {} ms after the SIGKILL (TTL {TTL_MS} ms); replies to the message sent meanwhile {to_first}; identifies {}, resumes {}, identifies too fast {}",
        took.as_millis(),
        discord.identifies(),
        discord.resumes(),
        discord.identifies_too_fast()
    );
    assert_eq!(to_first, 1, "the message sent meanwhile was answered exactly once");
    assert_eq!(discord.identifies_too_fast(), 0, "identifies kept max_concurrency per 5 s across both replicas");
}

/// A small deterministic generator, so a failing round can be replayed from its printed seed.
pub(crate) struct Rounds(u64);

impl Rounds {
    /// The rounds to run (`CLANKIE_CHAOS_ROUNDS`, else `ci_rounds`) and a generator seeded from
    /// `CLANKIE_CHAOS_SEED` or the clock; the seed is printed under `what`.
    pub(crate) fn from_env(what: &str, ci_rounds: usize) -> (usize, Rounds) {
        let rounds = std::env::var("CLANKIE_CHAOS_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(ci_rounds);
        let seed = std::env::var("CLANKIE_CHAOS_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1);
        println!("{what}: seed {seed}");
        (rounds, Rounds(seed))
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The incident, compressed: two captain processes, a three-message burst (at 0, 0.8 and
/// 2 s; the model thinks 4 s), and the captain that owns the lane killed with SIGKILL at a
/// random moment of the run. Every settled outcome must become its reaction in the room within
/// [`OUTCOME_SHOWN_WITHIN`]. `CLANKIE_CHAOS_ROUNDS` sets the rounds (3 in CI; 20 for the long
/// mode) and `CLANKIE_CHAOS_SEED` replays a run.
#[tokio::test]
async fn chaos_outcomes_the_lane_owner_killed_at_a_random_point_of_a_burst_answers_it_once_and_shows_every_outcome() {
    let (rounds, mut random) = Rounds::from_env("chaos owner kill", 3);
    let cast = Cast::start(LoopbackConfig::default()).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain-a", "captain-b", "gateway"]);
    let (discord, standin, store) = (&cast.discord, &cast.standin, &cast.store);
    let fast = [
        // The dead owner's deliveries come back after the ack wait, later than its lease lapses:
        // the burst's last message takes the lane first, as in the incident.
        ("CLANKIE_LANE_LEASE_TTL_MS", "1500"),
        ("CLANKIE_INGRESS_ACK_WAIT_MS", "5000"),
        ("CLANKIE_OUTBOX_RELAY_MS", "1000"),
        ("CLANKIE_LOG", "warn,clankie_captain=debug"),
    ];
    let captain = |name: &str| cast.service("captain", name, None, &fast);
    let mut captains = [("captain-a", captain("captain-a")), ("captain-b", captain("captain-b"))];
    let _gateway = cast.service("gateway", "gateway", None, &[]);
    assert!(discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    let lane = clankie_proto::LaneKey::Room { guild: discord.config().guild_id, channel: GENERAL }.to_string();

    let mut bursts: Vec<[u64; 3]> = Vec::new();
    let mut killed_before_last = 0;
    for round in 0..rounds {
        for _ in 0..3 {
            // Thinking outlasts the burst by 2 s, so a loaded machine still lands the whole burst in one run.
            standin.script(Script::any(thinking(format!("Round {round}, answered."), 4_000)));
        }
        let asked = standin.requests().len();
        // Someone new each round, as in a busy room: one person's 60 messages would meet the flood guard.
        let player = format!("player{round}");
        let say = |content: String, mention: bool| cast.say(&player, &content, mention);
        let started = std::time::Instant::now();
        let first = say(format!("@Clankie round {round}: is the lobby up?"), true);
        standin.wait_for_requests(asked + 1, Duration::from_secs(30)).await;
        let kill_at = Duration::from_millis(random.below(3_000));
        let (mut second, mut third, mut killed) = (None, None, None);
        while second.is_none() || third.is_none() || killed.is_none() {
            let now = started.elapsed();
            if second.is_none() && now >= Duration::from_millis(800) {
                second = Some(say("the one for tonight".into(), false));
            }
            if third.is_none() && now >= Duration::from_millis(2_000) {
                third = Some(say("can I bring a friend?".into(), false));
                if killed.is_some() {
                    killed_before_last += 1;
                }
            }
            if killed.is_none() && now >= kill_at {
                let owner: Option<String> = sqlx::query_scalar("SELECT lease_owner FROM lanes WHERE lane = $1")
                    .bind(&lane)
                    .fetch_optional(store.pool())
                    .await
                    .unwrap()
                    .flatten();
                let victim = captains.iter().position(|(n, _)| Some(*n) == owner.as_deref()).unwrap_or(0);
                let (name, child) = &mut captains[victim];
                // No drain, no ack, no lease release.
                sigkill(child).await;
                println!("round {round}: killed {name} (owner {owner:?}) at {kill_at:?}");
                let name = *name;
                captains[victim].1 = captain(name);
                killed = Some(kill_at);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let ids = [first, second.unwrap(), third.unwrap()];
        let settled = |store: &clankie_store::Store| {
            let store = store.clone();
            async move {
                let mut n = 0;
                for id in ids {
                    n += usize::from(store.outcome(&id.to_string()).await.unwrap().is_some());
                }
                n
            }
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while settled(store).await < 3 {
            if std::time::Instant::now() > deadline {
                for id in ids {
                    let admitted = store.admission(&id.to_string()).await.unwrap();
                    let outcome = store.outcome(&id.to_string()).await.unwrap();
                    let receipts: Vec<(String, String, Vec<String>)> =
                        sqlx::query_as("SELECT kind, service, codes FROM receipts WHERE delivery_id = $1 ORDER BY at")
                            .bind(id.to_string())
                            .fetch_all(store.pool())
                            .await
                            .unwrap();
                    println!("round {round}: {id} admitted {admitted:?} outcome {outcome:?} receipts {receipts:?}");
                }
                panic!("round {round}: a delivery never got its outcome");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        until("the round's reply", Duration::from_secs(30), || {
            discord.posts(GENERAL).iter().any(|p| p.reply_to.is_some_and(|r| ids.contains(&r)))
        })
        .await;
        let unshown = unshown_outcomes(&cast, &ids, OUTCOME_SHOWN_WITHIN).await;
        assert!(unshown.is_empty(), "round {round}: settled outcomes never shown in the room: {unshown:?}");
        bursts.push(ids);
    }
    // A last message is the barrier: once it is answered, any doubled reply to a burst would be in.
    let sentinel = cast.mention("bob", "@Clankie sentinel");
    until("the sentinel's reply", Duration::from_secs(60), || discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(sentinel))).await;

    let posts = discord.posts(GENERAL);
    let (mut outcomes, mut replies, mut lost, mut doubled) = (0, 0, 0, 0);
    for (round, ids) in bursts.iter().enumerate() {
        let mut kinds = Vec::new();
        for id in ids {
            match store.outcome(&id.to_string()).await.unwrap() {
                Some(o) => {
                    outcomes += 1;
                    kinds.push(o.kind.code());
                }
                None => lost += 1,
            }
        }
        let answered = posts.iter().filter(|p| p.reply_to.is_some_and(|r| ids.contains(&r))).count();
        let replied = kinds.iter().filter(|k| **k == "replied").count();
        replies += answered;
        doubled += answered.saturating_sub(1);
        println!("round {round}: outcomes {kinds:?}, replies {answered}");
        assert_eq!(answered, replied, "round {round}: a message was answered twice");
        assert_eq!(answered, 1, "round {round}: the burst got {answered} replies");
    }
    println!(
        "chaos owner kill: rounds {rounds}, deliveries {}, outcomes {outcomes}, replies {replies}, lost {lost}, doubled {doubled}, killed before the last message {killed_before_last}",
        bursts.len() * 3
    );
    assert_eq!((lost, doubled), (0, 0));
    let audit = store.audit(Duration::from_secs(1)).await.unwrap();
    assert_eq!((audit.without_outcome, audit.replies_posted_twice, audit.outbox_unsent), (0, 0, 0), "{audit:?}");
}

/// A three-message burst each round (one addressed, two not, the model thinking 2 s), and the
/// gateway killed while the turn's outcomes are in flight, then started again. The rounds take
/// turns at how it dies: SIGKILL at a random moment around the settle, an exit at the fault
/// point just before or just after its first reaction's REST call (holding that outcome and the
/// ones pulled behind it unacked), or one just before it posts the reply. Every outcome becomes
/// its reaction within [`OUTCOME_SHOWN_WITHIN`] of the gateway's death, the reply follows
/// within 15 s of that, and no message is answered twice.
#[tokio::test]
async fn chaos_outcomes_the_gateway_killed_while_outcomes_are_in_flight_shows_every_outcome() {
    const DEATHS: [Option<&str>; 4] = [None, Some("gateway.before_reaction"), Some("gateway.after_reaction"), Some("gateway.before_post")];
    let (rounds, mut random) = Rounds::from_env("chaos outcomes gateway kill", DEATHS.len());
    let cast = Cast::start(LoopbackConfig { heartbeat_interval_ms: 5_000, ..Default::default() }).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway"]);
    let (discord, standin, store) = (&cast.discord, &cast.standin, &cast.store);
    let _captain = cast.service("captain", "captain", None, &[("CLANKIE_OUTBOX_RELAY_MS", "1000")]);
    let mut gateway = cast.service("gateway", "gateway", None, &[]);
    assert!(discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");

    let (mut outcomes, mut replies, mut slowest) = (0, 0, Duration::ZERO);
    for round in 0..rounds {
        let death = DEATHS[round % DEATHS.len()];
        // This round's gateway carries the fault point (or, for the SIGKILL, holds each reaction
        // on its way to the room, so the kill finds one in flight): the one before it stops first.
        let (resumes, identifies) = (discord.resumes(), discord.identifies());
        gateway.start_kill().unwrap();
        gateway.wait().await.unwrap();
        gateway = match death {
            Some(point) => cast.service("gateway", "gateway", Some(point), &[]),
            None => cast.service("gateway", "gateway", None, &[("CLANKIE_FAULT_HOLD", "gateway.before_reaction=60000")]),
        };
        // It resumes the session the one before saved, or identifies if that one saved none yet.
        until("this round's gateway attached", Duration::from_secs(20), || {
            discord.resumes() > resumes || discord.identifies() > identifies
        })
        .await;
        let holds = || {
            std::fs::read_to_string(cast.dir.path().join("gateway.log"))
                .unwrap_or_default()
                .matches("fault injected at gateway.before_reaction: holding")
                .count()
        };
        let held_before = holds();
        standin.script(Script::any(thinking(format!("Round {round}, heard you all."), 2_000)));
        let asked = standin.requests().len();
        let guest = format!("guest{round}");
        let say = |content: &str, mention: bool| cast.say(&guest, content, mention);
        let first = say("@Clankie who is coming tonight?", true);
        standin.wait_for_requests(asked + 1, Duration::from_secs(30)).await;
        let ids = [first, say("I can bring snacks", false), say("and a lamp", false)];
        let how = match death {
            None => {
                // Killed while an outcome is on its way: settled in the store, taken by the
                // gateway, not yet shown in the room. A moment later, so others may be too.
                until("an outcome held on its way to the room", Duration::from_secs(30), || holds() > held_before).await;
                tokio::time::sleep(Duration::from_millis(random.below(300))).await;
                let in_flight = unshown_outcomes(&cast, &ids, Duration::ZERO).await.iter().filter(|(_, stored)| *stored != "none").count();
                assert!(in_flight >= 1, "round {round}: no outcome was in flight when the gateway was killed");
                sigkill(&mut gateway).await;
                format!("SIGKILL with {in_flight} outcome(s) settled and not yet shown")
            }
            Some(point) => {
                let status = tokio::time::timeout(Duration::from_secs(30), gateway.wait()).await.expect("the fault fired").unwrap();
                assert_eq!(status.code(), Some(clankie_settings::fault::EXIT_CODE), "it died at {point}");
                format!("exit at {point}")
            }
        };
        let died = std::time::Instant::now();
        gateway = cast.service("gateway", "gateway", None, &[]);
        let unshown = unshown_outcomes(&cast, &ids, OUTCOME_SHOWN_WITHIN).await;
        let took = died.elapsed();
        println!("round {round}: gateway {how}; every outcome shown {took:?} after it died");
        assert!(unshown.is_empty(), "round {round}: outcomes not shown in the room within {OUTCOME_SHOWN_WITHIN:?}: {unshown:?}");
        slowest = slowest.max(took);
        outcomes += ids.len();
        let mut replied = 0;
        for id in ids {
            let kind = store.outcome(&id.to_string()).await.unwrap().map(|o| o.kind);
            replied += usize::from(kind == Some(clankie_proto::v1::OutcomeKind::Replied));
        }
        // A reaction may land before its reply, which waits its turn in the channel's message bucket.
        wait_for_replies(discord, &ids, replied).await;
        println!("round {round}: the reply posted {:?} after the gateway died", died.elapsed());
        let answered = discord.posts(GENERAL).iter().filter(|p| p.reply_to.is_some_and(|r| ids.contains(&r))).count();
        assert_eq!(answered, replied, "round {round}: each replied delivery has exactly one reply");
        replies += answered;
        // The reply's progress and acknowledgement land a moment after Discord shows it; a kill
        // before then would hand the reply to the next round's gateway and its fault point.
        cast.gateway_settled(Duration::from_secs(15)).await;
    }
    println!(
        "chaos outcomes gateway kill: rounds {rounds}, outcomes {outcomes}, shown {outcomes}, slowest shown {slowest:?} after the death, replies {replies}"
    );
}

/// Waits until `n` posts in the general channel answer one of `ids` (a burst's reply threads
/// onto whichever of its messages the turn answered).
pub(crate) async fn wait_for_replies(discord: &Loopback, ids: &[u64], n: usize) {
    let answering = || discord.posts(GENERAL).iter().filter(|p| p.reply_to.is_some_and(|r| ids.contains(&r))).count();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while answering() < n {
        let posts: Vec<(u64, Option<u64>)> = discord.posts(GENERAL).iter().map(|p| (p.id, p.reply_to)).collect();
        assert!(tokio::time::Instant::now() < deadline, "fewer than {n} replies to {ids:?}; posts (id, reply to): {posts:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long a settled outcome may take to become its reaction in the room: the relay's pass,
/// the body's consumer and one REST call, with a gateway restart's redelivery inside it.
const OUTCOME_SHOWN_WITHIN: Duration = Duration::from_secs(10);

/// Waits up to `within` for each delivery's stored outcome to be its message's reaction in the
/// loopback; those still not shown, with the outcome the store holds (`none` if unsettled).
async fn unshown_outcomes(cast: &Cast, ids: &[u64], within: Duration) -> Vec<(u64, &'static str)> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let messages = cast.discord.messages(GENERAL);
        let mut unshown = Vec::new();
        for id in ids {
            let stored = cast.store.outcome(&id.to_string()).await.unwrap().map(|o| o.kind);
            let shown = messages
                .iter()
                .find(|m| m.id == *id)
                .and_then(|m| m.reactions.iter().find_map(|r| clankie_proto::v1::OutcomeKind::from_reaction(r)));
            if stored.is_none() || shown != stored {
                unshown.push((*id, stored.map_or("none", |k| k.code())));
            }
        }
        if unshown.is_empty() || tokio::time::Instant::now() >= deadline {
            return unshown;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Prints the services' logs when the test fails, so a failed round explains itself.
pub(crate) struct DumpLogsOnPanic(pub(crate) std::path::PathBuf, pub(crate) &'static [&'static str]);

impl Drop for DumpLogsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for name in self.1 {
                let log = std::fs::read_to_string(self.0.join(format!("{name}.log"))).unwrap_or_default();
                eprintln!("===== {name} =====\n{log}");
            }
        }
    }
}

/// A picture's fetch held for 40 s by media, with the lease TTL and ack wait at 10 s and a second
/// captain ready to take over: the run's lease and its delivery are kept alive by tasks of their
/// own, so the lane is never taken over, the picture reaches the model and the reply is posted once.
#[tokio::test]
async fn chaos_media_held_40_s_with_a_10_s_lease_keeps_the_lane_and_replies_once() {
    use clankie_discord_loopback::NewAttachment;
    let cast = Cast::start(LoopbackConfig::default()).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain-a", "captain-b", "media", "gateway"]);
    let (discord, standin, store) = (&cast.discord, &cast.standin, &cast.store);
    standin.script(Script::any(Reply::text("A map of the lobby.")));
    let slow =
        [("CLANKIE_LANE_LEASE_TTL_MS", "10000"), ("CLANKIE_INGRESS_ACK_WAIT_MS", "10000"), ("CLANKIE_FAULT_HOLD", "media.fetch=40000")];
    let _a = cast.service("captain", "captain-a", None, &slow);
    let _b = cast.service("captain", "captain-b", None, &slow);
    let _media = cast.service("media", "media", None, &slow);
    let _gateway = cast.service("gateway", "gateway", None, &[]);
    assert!(discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");

    let asked = discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: "@Clankie what is this?".into(),
        mention: true,
        attachments: vec![NewAttachment {
            filename: "map.png".into(),
            content_type: "image/png".into(),
            text: Some("pixels".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    let started = std::time::Instant::now();
    until("the reply", Duration::from_secs(90), || discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(asked))).await;
    let took = started.elapsed();
    // A barrier: a takeover would have answered the message again by now.
    standin.script(Script::any(Reply::text("Later.")));
    let later = cast.mention("bob", "@Clankie later");
    until("the later reply", Duration::from_secs(60), || discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(later))).await;
    let replies = discord.posts(GENERAL).iter().filter(|p| p.reply_to == Some(asked)).count();
    let lane = clankie_proto::LaneKey::Room { guild: discord.config().guild_id, channel: GENERAL };
    let fenced: i64 =
        sqlx::query_scalar("SELECT count(*) FROM receipts WHERE kind = 'captain.fenced'").fetch_one(store.pool()).await.unwrap();
    let turns: i64 = sqlx::query_scalar("SELECT count(*) FROM turns WHERE owner_delivery_id = $1")
        .bind(asked.to_string())
        .fetch_one(store.pool())
        .await
        .unwrap();
    let first_epoch: i64 = sqlx::query_scalar("SELECT epoch FROM turns WHERE owner_delivery_id = $1")
        .bind(asked.to_string())
        .fetch_one(store.pool())
        .await
        .unwrap();
    let request = &standin.requests()[0];
    let images = request.messages().iter().filter_map(|m| m["content"].as_array()).flatten().filter(|p| p["type"] == "image_url").count();
    println!(
        "chaos media hold: rounds 1, deliveries 1, replies {replies}, turns {turns}, fenced {fenced}, answered after {took:?}, lane {lane}"
    );
    assert!(took >= Duration::from_secs(40), "the fetch was held: {took:?}");
    assert_eq!((replies, turns, fenced, first_epoch), (1, 1, 0, 1), "one run, never taken over");
    assert_eq!(images, 1, "the held picture reached the model");
}
