//! The agent runtime through the real HTTP client against the model stand-in,
//! with sessions in real PostgreSQL and durations compressed.

mod anthropic;
mod failures;
mod rehearsal;
mod sessions;
mod silence;
mod stall;
mod steering;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clankie_agent::{
    Agent, AgentConfig, AgentEvent, Model, OpenAiClient, OpenAiConfig, RetryPolicy, Run, RunResult, Session, StallPolicy, UserMessage,
};
use clankie_model_standin::StandIn;
use clankie_proto::LaneKey;
use clankie_store::Store;
use clankie_testkit::TestDb;

/// A stand-in, a migrated database and a leased session tree.
pub struct Rig {
    pub standin: StandIn,
    pub store: Store,
    pub lane: LaneKey,
    _db: TestDb,
}

pub const TREE: &str = "rooms/room:1:2";

impl Rig {
    pub async fn new() -> Rig {
        let db = TestDb::create().await;
        let store = Store::connect(db.url()).await.unwrap();
        store.migrate().await.unwrap();
        Rig { standin: StandIn::start().await.unwrap(), store, lane: LaneKey::Room { guild: 1, channel: 2 }, _db: db }
    }

    pub fn model(&self) -> Model {
        Model::OpenAi(
            OpenAiClient::new(OpenAiConfig {
                base_url: self.standin.base_url(),
                model: "standin".into(),
                api_key: Some("sk-test-key".into()),
                response_timeout: clankie_agent::DEFAULT_RESPONSE_TIMEOUT,
            })
            .unwrap(),
        )
    }

    pub fn agent(&self, config: AgentConfig) -> Agent {
        Agent::new(self.model(), config)
    }

    pub async fn session(&self) -> Session {
        let lease = match self.store.lane(&self.lane).await.unwrap() {
            Some(row) if row.lease_owner.is_some() => clankie_store::Lease {
                lane: self.lane,
                owner: row.lease_owner.unwrap(),
                epoch: row.epoch,
                expires_at_ms: row.lease_expires_at_ms.unwrap_or(0),
            },
            _ => self.store.acquire_lease(&self.lane, "test", Duration::from_secs(600)).await.unwrap().unwrap(),
        };
        Session::open(self.store.clone(), lease, TREE).await.unwrap()
    }
}

/// Compressed durations: a 400 ms silence checked every 50 ms, fast retries.
pub fn fast() -> AgentConfig {
    AgentConfig {
        stall: StallPolicy { silence: Duration::from_millis(400), tick: Duration::from_millis(50) },
        retry: RetryPolicy { max_retries: 2, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(200) },
        ..AgentConfig::default()
    }
}

pub fn user(delivery_id: &str, text: &str) -> UserMessage {
    UserMessage::new("ada", delivery_id, text)
}

/// Reads every event of a run with the moment it arrived, then its result.
pub async fn drain(mut run: Run) -> (Vec<(Instant, AgentEvent)>, RunResult) {
    let mut events = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(30), run.next_event()).await.expect("run went quiet for 30 s") {
        events.push((Instant::now(), e));
    }
    (events, run.finish().await.unwrap())
}

pub fn kinds(events: &[(Instant, AgentEvent)]) -> Vec<&AgentEvent> {
    events.iter().map(|(_, e)| e).collect()
}

pub fn arc<T: clankie_agent::Tool>(t: T) -> Arc<dyn clankie_agent::Tool> {
    Arc::new(t)
}
