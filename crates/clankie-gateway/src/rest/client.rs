//! Discord's REST client, replaceable whole: twilight's rate limiter dies with a panic, and a
//! client built afresh is the only mend, so the client lives behind one swappable handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::config::GatewayConfig;

/// What twilight's limiter says in the panic of every request made after its task died.
pub(crate) const LIMITER_PANICKED: &str = "actor task panicked";

/// Discord's REST client, replaceable: twilight's rate limiter is a task of its own, and once it
/// has panicked every request through that client panics too. A REST part that panicked so gets
/// a new client (counted as `clankie_gateway_rest_clients_rebuilt_total` and logged) before it
/// starts again, never the broken one.
pub(crate) struct RestClient {
    current: RwLock<Arc<twilight_http::Client>>,
    token: String,
    api: Option<String>,
    rebuilt: AtomicU64,
}

impl RestClient {
    /// A client for the configured token and API; the handle the replica's parts share.
    pub(crate) fn new(config: &GatewayConfig) -> RestClient {
        let (token, api) = (config.token.clone(), config.api.clone());
        RestClient { current: RwLock::new(Arc::new(build(&token, api.as_deref()))), token, api, rebuilt: AtomicU64::new(0) }
    }

    /// The client to make a request with now.
    pub(crate) fn get(&self) -> Arc<twilight_http::Client> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the client (and with it the limiter) by a fresh one.
    pub(crate) fn rebuild(&self) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(build(&self.token, self.api.as_deref()));
        let n = self.rebuilt.fetch_add(1, Ordering::SeqCst) + 1;
        metrics::counter!("clankie_gateway_rest_clients_rebuilt_total").increment(1);
        tracing::error!(rebuilt = n, "twilight's rate limiter had panicked: the REST client was rebuilt");
    }

    /// How often the client was rebuilt: a count a test and an operator read to see the mend.
    pub(crate) fn rebuilt(&self) -> u64 {
        self.rebuilt.load(Ordering::SeqCst)
    }
}

/// A twilight client for `token`, spoken to `api` (a stand-in's host:port) over HTTP, or to
/// Discord itself; the invite and the doctor build their own with it, outside any replica.
pub(crate) fn build(token: &str, api: Option<&str>) -> twilight_http::Client {
    let mut builder = twilight_http::Client::builder().token(token.to_owned());
    if let Some(api) = api {
        builder = builder.proxy(api.to_owned(), true);
    }
    builder.build()
}
