//! `slash_` across replicas: three `clankie gateway` processes and a `clankie captain`
//! against a loopback Discord with three shards.

use std::collections::BTreeMap;
use std::time::Duration;

use clankie_discord_loopback::interactions::RunCommand;
use clankie_store::OwnerSettings;
use clankie_testkit::until;

use crate::chaos::{Cast, DumpLogsOnPanic, a_guild_per_shard, shard_owners};

#[tokio::test]
async fn slash_with_3_gateway_replicas_the_command_set_is_registered_once_and_every_shard_answers() {
    const SHARDS: u32 = 3;
    let cast = Cast::start(a_guild_per_shard(SHARDS, 3)).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway-a", "gateway-b", "gateway-c"]);
    let ada = clankie_discord_loopback::Loopback::user_id("ada");
    let settings = OwnerSettings { owner_id: Some(ada), ..cast.store.owner_settings().await.unwrap() };
    cast.store.set_owner_settings(&settings).await.unwrap();
    let _captain = cast.service("captain", "captain", None, &[]);
    let _replicas: Vec<_> = ["gateway-a", "gateway-b", "gateway-c"].iter().map(|r| cast.service("gateway", r, None, &[])).collect();

    let bus_settings = clankie_settings::Settings::for_endpoints(&cast.nats.url(), cast.db.url(), cast.dir.path()).unwrap();
    let bus = clankie_bus::Bus::connect(&bus_settings, "test").await.unwrap();
    let kv = bus.key_value(clankie_gateway::leases::SHARDS_BUCKET, Duration::from_secs(3600)).await.unwrap();
    let leases = clankie_gateway::leases::ShardLeases::new(kv, "probe", Duration::from_secs(15));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let owners = shard_owners(&leases, SHARDS).await;
        if owners.iter().all(Option::is_some) && cast.discord.attached_shards().len() == SHARDS as usize {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not every shard attached: {owners:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    until("the command set registered", Duration::from_secs(20), || cast.discord.registered_commands().0 > 0).await;

    for k in 0..u64::from(SHARDS) {
        // A captain process still starting on a loaded machine is not listening yet: the command
        // is then answered at once with the error (as when the captain is down), and run again.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let run = RunCommand { channel_id: 700 + k, author: "ada".into(), subcommand: "status".into(), options: BTreeMap::new() };
            let started = cast.discord.run_command(run).unwrap();
            until("the answer edited in", Duration::from_secs(60), || {
                cast.discord.interaction(started.id).is_some_and(|r| !r.content.is_empty())
            })
            .await;
            let answer = cast.discord.interaction(started.id).unwrap();
            assert!(answer.answered_after_ms < 3_000 && answer.refused_answers == 0, "shard {k}: {answer:?}");
            if answer.content.starts_with("Running:") {
                break;
            }
            assert!(answer.content.contains("can't do that right now"), "shard {k}: {answer:?}");
            assert!(tokio::time::Instant::now() < deadline, "no captain answered on shard {k}: {answer:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let (overwrites, sets) = cast.discord.registered_commands();
    assert_eq!(overwrites, 1, "three replicas started and the set was registered {overwrites} times");
    assert_eq!(sets.get(&None).map(Vec::len), Some(1));
}

/// The captain is killed while the gateway runs: a command is still deferred within Discord's
/// 3 s and an error is edited in (not "thinking…" forever); once a captain is back, the next
/// command is answered.
#[tokio::test]
async fn slash_with_the_captain_down_the_deferral_is_within_3_s_and_an_error_is_edited_in() {
    let cast = Cast::start(a_guild_per_shard(1, 1)).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway-a"]);
    let ada = clankie_discord_loopback::Loopback::user_id("ada");
    let settings = OwnerSettings { owner_id: Some(ada), ..cast.store.owner_settings().await.unwrap() };
    cast.store.set_owner_settings(&settings).await.unwrap();
    let mut captain = cast.service("captain", "captain", None, &[]);
    let _gateway = cast.service("gateway", "gateway-a", None, &[]);
    until("the shard attached", Duration::from_secs(60), || cast.discord.attached_shards().len() == 1).await;
    let status = || RunCommand { channel_id: 700, author: "ada".into(), subcommand: "status".into(), options: BTreeMap::new() };
    let answered = |id: u64, what: &'static str| {
        let discord = &cast.discord;
        async move {
            until(what, Duration::from_secs(60), || discord.interaction(id).is_some_and(|r| !r.content.is_empty())).await;
            discord.interaction(id).unwrap()
        }
    };
    let first = answered(cast.discord.run_command(status()).unwrap().id, "the first answer").await;
    assert!(first.content.starts_with("Running:"), "{first:?}");

    captain.start_kill().unwrap();
    captain.wait().await.unwrap();
    // Down from the moment NATS stops routing commands to it: until the server has read the
    // killed connection's end (late on a loaded machine), a request still goes to its
    // subscription and is lost, which is the 60 s answer wait's to bound, not this test's.
    let probe = clankie_proto::v1::CommandRequest { interaction_id: "probe".into(), ..Default::default() };
    let dropped = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let asked = cast
            .bus
            .request_within::<_, clankie_proto::v1::CommandReply>(
                &clankie_proto::Subject::RpcCommand,
                &probe,
                Duration::from_millis(500),
                Duration::ZERO,
            )
            .await;
        if matches!(&asked, Err(clankie_bus::BusError::Request { detail, .. }) if detail.contains("no responders")) {
            break;
        }
        assert!(tokio::time::Instant::now() < dropped, "NATS still routes commands to the killed captain: {asked:?}");
    }
    let asked = tokio::time::Instant::now();
    let down = answered(cast.discord.run_command(status()).unwrap().id, "the error edited in").await;
    println!(
        "captain down: deferred after {} ms, the error edited in after {} ms, answer {:?}",
        down.answered_after_ms,
        asked.elapsed().as_millis(),
        down.content
    );
    assert!(down.answered_after_ms < 3_000 && down.refused_answers == 0, "{down:?}");
    assert!(down.content.contains("can't do that right now"), "{down:?}");
    assert!(asked.elapsed() < Duration::from_secs(20), "the error took {:?}: \"thinking…\" for most of a minute", asked.elapsed());

    let _back = cast.service("captain", "captain-b", None, &[]);
    // Until the new captain listens, each command gets the error at once; then the answer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let again = answered(cast.discord.run_command(status()).unwrap().id, "an answer").await;
        if again.content.starts_with("Running:") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no captain answered again: {again:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
