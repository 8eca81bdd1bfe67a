//! The outbound address guard.
//!
//! Anyone admitted to a room can ask him to fetch a URL, so every tool that
//! fetches goes through [`EgressGuard`]: the scheme must be http or https on a
//! port a browser would use, the host is resolved once, every address it
//! resolves to must be public ([`classify`]) or on the operator's allow list,
//! and the connection is pinned to the checked addresses so a second DNS
//! answer (rebinding) is never used. Redirects are followed by hand, each hop
//! checked again. Proxies from the environment are ignored: a proxy would
//! resolve the name itself.

mod address;
pub mod proxy;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

pub use address::{AddressClass, classify};
pub use clankie_settings::{AllowList, AllowListError};
pub use reqwest::Url;

/// Why the guard refused a URL; the text is safe to show the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("that is not a valid URL")]
    BadUrl,
    #[error("only http and https can be fetched, not {0}")]
    Scheme(String),
    #[error("port {0} is not one a browser would use")]
    Port(u16),
    #[error("URLs with a user name or password are not fetched")]
    Credentials,
    #[error("{ip} is not a public address ({class}), so it is never fetched")]
    Address { ip: IpAddr, class: &'static str },
    #[error("the host name could not be resolved")]
    Unresolved,
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("a redirect without a usable Location")]
    BadRedirect,
}

/// Why a guarded fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    #[error("the address could not be reached")]
    Unreachable(#[source] reqwest::Error),
}

/// Resolves a host name to addresses. The system resolver in production; tests script it.
pub trait Lookup: Send + Sync {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>>;
}

/// The system resolver, through tokio.
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, 0)).await?.map(|a| a.ip()).collect()) })
    }
}

/// Refuses every name: the pinned client must never resolve anything itself.
struct NoResolve;

impl reqwest::dns::Resolve for NoResolve {
    fn resolve(&self, _name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async { Err("names are resolved by the egress guard, never by the client".into()) })
    }
}

/// Ports a browser refuses to fetch (the Fetch standard's "bad ports").
const BAD_PORTS: &[u16] = &[
    0, 1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111, 113, 115,
    117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601,
    636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697,
    10080,
];

/// How one guarded fetch behaves.
#[derive(Debug, Clone, Copy)]
pub struct FetchOptions {
    /// Bounds each hop: connecting, and waiting for the response head.
    pub timeout: Duration,
    pub max_redirects: usize,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions { timeout: Duration::from_secs(10), max_redirects: 3 }
    }
}

/// The guard. Cheap to clone.
#[derive(Clone)]
pub struct EgressGuard {
    allow: Arc<AllowList>,
    lookup: Arc<dyn Lookup>,
}

impl std::fmt::Debug for EgressGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressGuard").field("allow", &self.allow).finish()
    }
}

impl Default for EgressGuard {
    fn default() -> Self {
        EgressGuard::new(AllowList::default())
    }
}

impl EgressGuard {
    /// A guard over the system resolver.
    pub fn new(allow: AllowList) -> EgressGuard {
        EgressGuard::with_lookup(allow, Arc::new(SystemLookup))
    }

    /// A guard over a resolver of the caller's (tests script DNS answers with it).
    pub fn with_lookup(allow: AllowList, lookup: Arc<dyn Lookup>) -> EgressGuard {
        // reqwest is built without a TLS provider of its own; installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        EgressGuard { allow: Arc::new(allow), lookup }
    }

    /// Checks what can be checked without DNS: scheme, credentials, port, and an address literal.
    pub fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::Scheme(url.scheme().chars().take(16).collect()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refusal::Credentials);
        }
        let port = url.port_or_known_default().ok_or(Refusal::BadUrl)?;
        match literal(url) {
            Some(ip) => self.permit(SocketAddr::new(ip, port)),
            None if url.host_str().is_none_or(str::is_empty) => Err(Refusal::BadUrl),
            // A name's addresses are checked once it is resolved; the port is checked here.
            None => port_ok(port),
        }
    }

    /// Whether the guard lets a connection go to `addr`: public on a browser's port, or allow-listed.
    pub fn permit(&self, addr: SocketAddr) -> Result<(), Refusal> {
        if self.allow.contains(addr) {
            return Ok(());
        }
        port_ok(addr.port())?;
        match classify(addr.ip()) {
            AddressClass::Public => Ok(()),
            class => Err(Refusal::Address { ip: addr.ip(), class: class.name() }),
        }
    }

    /// Resolves `url`'s host once and checks every address; all must pass, or none is used.
    pub async fn resolve(&self, url: &Url) -> Result<Vec<SocketAddr>, Refusal> {
        self.check_url(url)?;
        let port = url.port_or_known_default().ok_or(Refusal::BadUrl)?;
        if let Some(ip) = literal(url) {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let host = url.host_str().ok_or(Refusal::BadUrl)?;
        let ips = self.lookup.lookup(host).await.map_err(|_| Refusal::Unresolved)?;
        if ips.is_empty() {
            return Err(Refusal::Unresolved);
        }
        let addrs: Vec<SocketAddr> = ips.into_iter().map(|ip| SocketAddr::new(ip, port)).collect();
        for addr in &addrs {
            self.permit(*addr)?;
        }
        Ok(addrs)
    }

    /// GETs `url`, following redirects by hand; every hop is resolved once, checked, and pinned.
    pub async fn get(&self, url: &str, options: FetchOptions) -> Result<reqwest::Response, EgressError> {
        let mut url = Url::parse(url).map_err(|_| Refusal::BadUrl)?;
        for hop in 0..=options.max_redirects {
            let addrs = self.resolve(&url).await?;
            let client = self.pinned_client(&url, &addrs, options.timeout).map_err(EgressError::Unreachable)?;
            let response = client.get(url.clone()).send().await.map_err(EgressError::Unreachable)?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let location = response.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).ok_or(Refusal::BadRedirect)?;
            url = url.join(location).map_err(|_| Refusal::BadRedirect)?;
            tracing::debug!(hop = hop + 1, "egress: following a redirect");
        }
        Err(Refusal::TooManyRedirects(options.max_redirects).into())
    }

    /// A client that can reach only `url`'s host, and only at `addrs`.
    fn pinned_client(&self, url: &Url, addrs: &[SocketAddr], timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(NoResolve)
            .connect_timeout(timeout)
            .read_timeout(timeout);
        if literal(url).is_none()
            && let Some(host) = url.host_str()
        {
            builder = builder.resolve_to_addrs(host, addrs);
        }
        builder.build()
    }
}

/// The address literal a URL names, if it names one.
fn literal(url: &Url) -> Option<IpAddr> {
    // The URL parser canonicalises every address form (`0x7f.1`, `2130706433`) into a literal, so a domain never parses.
    url.host_str()?.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

fn port_ok(port: u16) -> Result<(), Refusal> {
    if BAD_PORTS.contains(&port) { Err(Refusal::Port(port)) } else { Ok(()) }
}
