//! The bench's own rig, beside the sandbox's: a bare captain (or several) over a nats-server and
//! database of its own with the model stand-in, for the parts that drive the captain alone.

use anyhow::Result;

/// One captain replica over a nats-server and database of its own, with the model stand-in.
pub(crate) struct BareCaptain {
    _nats: clankie_testkit::TestNats,
    _db: clankie_testkit::TestDb,
    _dir: clankie_testkit::TestDir,
    /// The model stand-in every replica asks, answering at once.
    pub(crate) standin: clankie_model_standin::StandIn,
    /// A connection of the bench's own, to publish ingress as the gateway would.
    pub(crate) bus: clankie_bus::Bus,
    /// The store the replicas share, to read their receipts.
    pub(crate) store: clankie_store::Store,
    /// The first replica, to read its warm lanes.
    pub(crate) captain: clankie_captain::Captain,
    /// Every replica's task, aborted when the part ends so it does not compete with the next one.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for BareCaptain {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One bare captain replica: the parts that measure a single captain.
pub(crate) async fn bare_captain() -> Result<BareCaptain> {
    bare_captains(1).await
}

/// Like [`bare_captain`], with `replicas` captains sharing the bus and the store.
pub(crate) async fn bare_captains(replicas: usize) -> Result<BareCaptain> {
    let (nats, db, dir) = (clankie_testkit::TestNats::start()?, clankie_testkit::TestDb::create().await, clankie_testkit::TestDir::new());
    let standin = clankie_model_standin::StandIn::start().await?;
    let vars: Vec<(&str, String)> = vec![
        ("CLANKIE_NATS_URL", nats.url()),
        ("CLANKIE_DATABASE_URL", db.url().to_owned()),
        ("CLANKIE_STATE_DIR", dir.path().display().to_string()),
        ("CLANKIE_MODEL_BASE_URL", standin.base_url()),
        // No body answers history here; cold lanes skip it rather than wait for one.
        ("CLANKIE_HISTORY_LIMIT", "0".into()),
        // One author writes everything; the flood guard would stop her at twenty a minute.
        ("CLANKIE_FLOOD_ADMISSIONS_PER_MINUTE", "0".into()),
    ];
    let settings = clankie_settings::Settings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))?;
    let bus = clankie_bus::Bus::connect(&settings, "bench").await?;
    bus.ensure_streams().await?;
    let store = clankie_store::Store::connect(db.url()).await?;
    store.migrate().await?;
    let agent = clankie_agent::Agent::new(clankie_agent::model_from_settings(&settings)?, clankie_agent::config_from_settings(&settings));
    let (mut captains, mut tasks) = (Vec::new(), Vec::new());
    for replica in 0..replicas.max(1) {
        let config = clankie_captain::CaptainConfig {
            replica: format!("bench-{replica}"),
            ..clankie_captain::CaptainConfig::from_settings(&settings)
        };
        let captain =
            clankie_captain::Captain::new(clankie_bus::Bus::connect(&settings, "captain").await?, store.clone(), agent.clone(), config);
        let running = captain.clone();
        tasks.push(tokio::spawn(async move {
            let _ = running.run().await;
        }));
        captains.push(captain);
    }
    let captain = captains.swap_remove(0);
    Ok(BareCaptain { _nats: nats, _db: db, _dir: dir, standin, bus, store, captain, tasks })
}

/// The version of the nats-server the benches run against, as the running server reports it.
pub(crate) async fn nats_server_version() -> Result<String> {
    let (nats, dir) = (clankie_testkit::TestNats::start()?, clankie_testkit::TestDir::new());
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), "postgres://unused@127.0.0.1:1/x", dir.path())?;
    let bus = clankie_bus::Bus::connect(&settings, "bench").await?;
    Ok(bus.client().server_info().version)
}
