//! `chaos_model_server_`: the model server killed with SIGKILL and started again on the same
//! port, with the captain, gateway and loopback Discord real and in processes of their own.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clankie_discord_loopback::LoopbackConfig;
use clankie_model_standin::{RecordedRequest, Reply, Script};
use clankie_proto::v1::{FailureCode, OutcomeKind};
use tokio::process::{Child, Command};

use crate::chaos::{Cast, DumpLogsOnPanic, GENERAL, Rounds};

/// The model stand-in as a process of its own on a fixed port, so that killing it closes its
/// listener and every connection it holds, as a crashed server's would.
struct ModelServer {
    child: Child,
    addr: SocketAddr,
    http: reqwest::Client,
}

impl ModelServer {
    async fn start(addr: SocketAddr, log: &std::path::Path) -> ModelServer {
        let child = Command::new(env!("CARGO_BIN_EXE_clankie"))
            .args(["model-standin", &addr.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let _ = rustls::crypto::ring::default_provider().install_default();
        // No pooled connection: once a server is abandoned, a new request must reach whichever listens now.
        let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
        let server = ModelServer { child, addr, http };
        let deadline = Instant::now() + Duration::from_secs(20);
        while server.http.get(server.url("/control/requests")).send().await.is_err() {
            assert!(Instant::now() < deadline, "the model server never listened on {addr}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        server
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn script(&self, script: &Script) {
        let status = self.http.post(self.url("/control/script")).json(script).send().await.unwrap().status();
        assert!(status.is_success(), "scripting the model server: {status}");
    }

    async fn requests(&self) -> Vec<RecordedRequest> {
        self.http.get(self.url("/control/requests")).send().await.unwrap().json().await.unwrap()
    }

    async fn wait_for_requests(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.requests().await.len() < n {
            assert!(Instant::now() < deadline, "the model server never got request {n}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: no drain, no close of the streams it is writing.
    async fn kill(mut self) {
        crate::chaos::sigkill(&mut self.child).await;
    }

    /// Stops it listening while its process, and the keep-alive connections it holds, live on
    /// unanswering ([`clankie_model_standin::StandIn::abandon`]); the process is returned, to be dropped (killed) later.
    async fn abandon(self) -> ModelServer {
        let status = self.http.post(self.url("/control/abandon")).send().await.unwrap().status();
        assert!(status.is_success(), "abandoning the model server: {status}");
        self
    }

    /// How this round's server goes: killed, or abandoned into `graveyard`.
    async fn end(self, death: Death, graveyard: &mut Vec<ModelServer>) {
        if death.abandons() {
            graveyard.push(self.abandon().await);
        } else {
            self.kill().await;
        }
    }
}

/// Where in a turn the model server dies, and how.
#[derive(Debug, Clone, Copy)]
enum Death {
    /// Killed after one turn is answered, before the next is asked.
    BetweenTurns,
    /// Killed after it asked for a tool and the tool ran, before the run's next request.
    AfterToolCall,
    /// Killed in the middle of streaming an answer.
    MidStream,
    /// Stopped inside a process that lives on, between turns: its keep-alive connection stays
    /// open and a request on it is never answered, while a new server takes the port.
    AbandonedBetweenTurns,
    /// The same, after a tool call, as in the incident.
    AbandonedAfterToolCall,
}

impl Death {
    fn abandons(self) -> bool {
        matches!(self, Death::AbandonedBetweenTurns | Death::AbandonedAfterToolCall)
    }
}

const STALL_MS: u64 = 8_000;
const TICK_MS: u64 = 500;
/// The hold between a tool's result and the next request, in which the server is restarted.
const AFTER_TOOLS_HOLD_MS: u64 = 2_000;

/// The model server killed and restarted on the same port between turns, between a tool call
/// and the next request, and mid-stream, or stopped in a process that lives on with its
/// connections hanging (the rounds take turns): each next turn is answered by the new server,
/// within the stall bound plus one tick of the fault, and no turn stalls.
#[tokio::test]
async fn chaos_model_server_restarted_on_the_same_port_every_next_turn_answers_within_the_stall_bound() {
    const DEATHS: [Death; 5] =
        [Death::BetweenTurns, Death::AfterToolCall, Death::MidStream, Death::AbandonedBetweenTurns, Death::AbandonedAfterToolCall];
    let (rounds, mut random) = Rounds::from_env("chaos model server", DEATHS.len());
    let cast = Cast::start(LoopbackConfig::default()).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway", "model"]);
    let (discord, store) = (&cast.discord, &cast.store);
    let addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let log = cast.dir.path().join("model.log");
    let mut model = ModelServer::start(addr, &log).await;
    let mut graveyard = Vec::new();
    let base_url = format!("http://{addr}/v1");
    let (stall, tick, hold) = (STALL_MS.to_string(), TICK_MS.to_string(), format!("agent.after_tools={AFTER_TOOLS_HOLD_MS}"));
    let _captain = cast.service(
        "captain",
        "captain",
        None,
        &[
            ("CLANKIE_MODEL_BASE_URL", base_url.as_str()),
            ("CLANKIE_STALL_SILENCE_MS", stall.as_str()),
            ("CLANKIE_STALL_TICK_MS", tick.as_str()),
            ("CLANKIE_FAULT_HOLD", hold.as_str()),
        ],
    );
    let captain_log = cast.dir.path().join("captain.log");
    let _gateway = cast.service("gateway", "gateway", None, &[]);
    assert!(discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");

    let bound = Duration::from_millis(STALL_MS + TICK_MS);
    let (mut answered, mut slowest) = (0, Duration::ZERO);
    for round in 0..rounds {
        let death = DEATHS[round % DEATHS.len()];
        let words = format!("Round {round}: the new server speaks.");
        let asked = model.requests().await.len();
        let (id, faulted) = match death {
            Death::BetweenTurns | Death::AbandonedBetweenTurns => {
                model.end(death, &mut graveyard).await;
                let faulted = Instant::now();
                model = ModelServer::start(addr, &log).await;
                model.script(&Script::any(Reply::text(&words))).await;
                (cast.mention(&format!("guest{round}"), "@Clankie are you there?"), faulted)
            }
            Death::AfterToolCall | Death::AbandonedAfterToolCall => {
                // As in the incident: a page the egress guard refuses, then the answer.
                let page = serde_json::json!({ "url": "http://169.254.169.254/latest/meta-data/" });
                model.script(&Script::any(Reply::tool("read_page", page))).await;
                let holds = held_after_tools(&captain_log);
                let id = cast.mention(&format!("guest{round}"), "@Clankie read that page for me");
                model.wait_for_requests(asked + 1).await;
                // The tool call's stream is a few events; the run is then held after the tool's
                // result, and says so in its log as the hold begins.
                let deadline = Instant::now() + Duration::from_secs(20);
                while held_after_tools(&captain_log) <= holds {
                    assert!(Instant::now() < deadline, "round {round} ({death:?}): the run never reached its hold after the tool call");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let held = Instant::now();
                model.end(death, &mut graveyard).await;
                let faulted = Instant::now();
                assert!(
                    held.elapsed() < Duration::from_millis(AFTER_TOOLS_HOLD_MS),
                    "round {round} ({death:?}): the server went {:?} into the run's hold, after it ended",
                    held.elapsed()
                );
                model = ModelServer::start(addr, &log).await;
                model.script(&Script::any(Reply::text(&words))).await;
                (id, faulted)
            }
            Death::MidStream => {
                let long = Reply::Text {
                    text: "A long story that never gets to its end. ".repeat(8),
                    chunk_chars: 8,
                    chunk_delay_ms: 100,
                    first_delay_ms: 0,
                    tail_delay_ms: 0,
                };
                model.script(&Script::any(long)).await;
                let id = cast.mention(&format!("guest{round}"), "@Clankie tell me a story");
                model.wait_for_requests(asked + 1).await;
                tokio::time::sleep(Duration::from_millis(300 + random.below(1_500))).await;
                model.kill().await;
                let faulted = Instant::now();
                model = ModelServer::start(addr, &log).await;
                model.script(&Script::any(Reply::text(&words))).await;
                (id, faulted)
            }
        };
        let outcome = loop {
            if let Some(o) = store.outcome(&id.to_string()).await.unwrap() {
                break o;
            }
            assert!(faulted.elapsed() < bound * 3, "round {round} ({death:?}): no outcome {:?} after the fault", faulted.elapsed());
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let took = faulted.elapsed();
        println!("round {round}: {death:?}: {} {:?} after the fault", outcome.kind.code(), took);
        assert_ne!(outcome.failure_code, Some(FailureCode::CaptainTurnStalled), "round {round} ({death:?}): stalled with a live server");
        assert_eq!(outcome.kind, OutcomeKind::Replied, "round {round} ({death:?}): {outcome:?}");
        assert!(took <= bound, "round {round} ({death:?}): answered {took:?} after the fault, over the stall bound plus a tick");
        // The reply follows its committed outcome through the outbox and the body, inside the channel's
        // 5-per-5-s bucket (tool cards and earlier rounds' replies share it).
        crate::chaos::wait_for_replies(discord, &[id], 1).await;
        let posts = discord.posts(GENERAL);
        let replies: Vec<_> = posts.iter().filter(|p| p.reply_to == Some(id)).collect();
        assert_eq!(replies.len(), 1, "round {round} ({death:?}): one reply");
        assert_eq!(replies[0].content, words, "round {round} ({death:?}): the new server's words");
        answered += 1;
        slowest = slowest.max(took);
    }
    let stalled: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE failure_code = 'captain_turn_stalled'")
        .fetch_one(store.pool())
        .await
        .unwrap();
    println!(
        "chaos model server: rounds {rounds}, answered {answered}, stalled {stalled}, slowest {slowest:?} after the fault (bound {bound:?})"
    );
    assert_eq!(stalled, 0);
}

/// How many times the captain's log says a run began its hold after a tool call
/// (`clankie_settings::fault::hold` announces each on stderr).
fn held_after_tools(log: &std::path::Path) -> usize {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    log.matches(&format!("fault injected at agent.after_tools: holding {AFTER_TOOLS_HOLD_MS} ms")).count()
}
