//! The handle a test holds: [`StandIn`] serves the routes on a loopback port, queues scripts,
//! reads what was recorded, and can abandon its listener the way a stopped server does.

use std::net::SocketAddr;
use std::time::Duration;

use crate::anthropic::cache::PromptCache;
use crate::audio;
use crate::recorded::RecordedRequest;
use crate::routes::router;
use crate::script::Script;
use crate::shared::{Shared, abandon};

/// A running stand-in server.
pub struct StandIn {
    addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl StandIn {
    /// Serves on a free loopback port.
    pub async fn start() -> std::io::Result<StandIn> {
        StandIn::serve(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Serves on the given address.
    pub async fn serve(addr: SocketAddr) -> std::io::Result<StandIn> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Shared::default();
        let app = router(shared.clone());
        let listener = Abandonable { listener: Some(listener), addr, shared: shared.clone() };
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "model stand-in stopped");
            }
        });
        Ok(StandIn { addr, shared, task })
    }

    /// Stops listening the way a server stopped inside a process that lives on does: the
    /// port is free for a new server, but the keep-alive connections it accepted stay open,
    /// and a request arriving on one is recorded and never answered (what served it is gone).
    pub async fn abandon(&self) {
        abandon(&self.shared).await;
    }

    /// The base URL to configure as the provider (`http://127.0.0.1:<port>/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Anthropic's prompt cache: its clock and its minimum cacheable length.
    pub fn prompt_cache(&self) -> &PromptCache {
        &self.shared.prompt_cache
    }

    /// The audio routes: scripted failures, the transcription grammar, counts.
    pub fn audio(&self) -> &audio::AudioShared {
        &self.shared.audio
    }

    /// Opens `gate`: a [`Reply::Gated`](crate::Reply::Gated) waiting on it (or arriving later) answers.
    pub fn open_gate(&self, gate: &str) {
        self.shared.gates.send_modify(|open| {
            open.insert(gate.to_owned());
        });
    }

    /// Serves OpenAI's `/v1/chat/completions` (`true`, as it starts) or answers it 404 as
    /// Anthropic's API does, leaving `/v1/messages` the only model wire that answers.
    pub fn set_chat_completions(&self, on: bool) {
        self.shared.chat_completions_off.store(!on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Queues a script.
    pub fn script(&self, script: Script) {
        self.shared.lock().scripts.push(script);
    }

    /// Drops the scripts no request took, so a test that queued one for a call that may or
    /// may not come (a steer's second call) answers what comes next with what it scripts
    /// next; returns how many there were.
    pub fn clear_scripts(&self) -> usize {
        std::mem::take(&mut self.shared.lock().scripts).len()
    }

    /// Forgets the requests recorded so far (a long bench would otherwise count their bodies
    /// as the memory of whatever it measures); returns how many there were.
    pub fn forget_requests(&self) -> usize {
        std::mem::take(&mut self.shared.lock().requests).len()
    }

    /// Every request recorded so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Waits until at least `n` requests have arrived, or the timeout passes.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.arrived.notified();
            let got = self.requests();
            if got.len() >= n || tokio::time::Instant::now() >= deadline {
                return got;
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The stand-in's listener. Abandoning it closes the socket but keeps axum's server running,
/// so the connections it accepted are never told to shut down: they stay open, as those of
/// a server stopped inside a process that lives on do.
struct Abandonable {
    listener: Option<tokio::net::TcpListener>,
    addr: SocketAddr,
    shared: Shared,
}

impl axum::serve::Listener for Abandonable {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Some(listener) = &self.listener else { return std::future::pending().await };
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        // Linger zero: an aborted connection (`Reply::Reset`) goes out as a TCP reset, not a FIN.
                        // (tokio deprecates SO_LINGER because a non-zero linger blocks on drop; zero never does.)
                        #[allow(deprecated)]
                        let _ = tcp.set_linger(Some(Duration::ZERO));
                        return (tcp, peer);
                    }
                    // Out of file descriptors and the like: try again shortly, as axum's own listener does.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                },
                () = self.shared.abandon.notified() => {
                    self.listener = None;
                    self.shared.unbound.notify_one();
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
