//! The guard against real sockets on loopback: a canary server stands where an
//! internal service would, and nothing the guard refuses may ever reach it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use clankie_egress::{AllowList, EgressError, EgressGuard, FetchOptions, Lookup, Refusal};
use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server that counts connections and answers every request with one fixed response.
struct Server {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Server {
    async fn start(ip: &str, port: u16, response: String) -> Option<Server> {
        let listener = TcpListener::bind((ip.parse::<IpAddr>().ok()?, port)).await.ok()?;
        let addr = listener.local_addr().ok()?;
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let response = response.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = socket.write_all(response.as_bytes()).await;
                });
            }
        });
        Some(Server { addr, hits })
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn ok(body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
}

fn redirect(to: &str) -> String {
    format!("HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
}

/// DNS as the test scripts it: each name has a list of answers, one per lookup, the last repeating.
#[derive(Default)]
struct ScriptedDns {
    answers: HashMap<String, Vec<Vec<IpAddr>>>,
    lookups: Mutex<HashMap<String, usize>>,
}

impl ScriptedDns {
    fn name(mut self, host: &str, answers: &[&[&str]]) -> ScriptedDns {
        let parsed = answers.iter().map(|a| a.iter().map(|ip| ip.parse().unwrap()).collect()).collect();
        self.answers.insert(host.to_owned(), parsed);
        self
    }

    fn lookups(&self, host: &str) -> usize {
        self.lookups.lock().unwrap().get(host).copied().unwrap_or(0)
    }
}

impl Lookup for ScriptedDns {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let mut seen = self.lookups.lock().unwrap();
            let n = seen.entry(host.to_owned()).or_default();
            *n += 1;
            let answers = self.answers.get(host).ok_or_else(|| std::io::Error::other("no such name"))?;
            Ok(answers[(*n - 1).min(answers.len() - 1)].clone())
        })
    }
}

fn options() -> FetchOptions {
    FetchOptions { timeout: std::time::Duration::from_secs(2), max_redirects: 3 }
}

#[tokio::test]
async fn egress_guard_refuses_every_address_that_is_not_the_public_internet() {
    let canary = Server::start("127.0.0.1", 0, ok("internal secret")).await.unwrap();
    let p = canary.addr.port();
    // The same canary on IPv6 loopback where the host has it, so a leak over v6 would be seen too.
    let canary6 = Server::start("::1", p, ok("internal secret")).await;
    // An allow-listed server that redirects to the canary: the second hop must be checked again.
    let bouncer = Server::start("127.0.0.2", 0, redirect(&format!("http://127.0.0.1:{p}/"))).await.unwrap();
    let bouncer6 = Server::start("127.0.0.2", 0, redirect(&format!("http://[::ffff:127.0.0.1]:{p}/"))).await.unwrap();
    let dns = Arc::new(
        ScriptedDns::default()
            .name("localhost.test", &[&["127.0.0.1"]])
            .name("metadata.test", &[&["169.254.169.254"]])
            .name("cluster.test", &[&["10.96.0.1"]])
            // One allowed answer does not excuse a loopback one beside it.
            .name("mixed.test", &[&["127.0.0.2", "127.0.0.1"]])
            .name("v6.test", &[&["fd00::5"]]),
    );
    // Names refused before any lookup (ports, credentials, schemes) have no DNS entry at all, so
    // that if such a check ever broke, the test would see `Unresolved`, never reach a public address.
    let allow = AllowList::parse("127.0.0.2").unwrap();
    let guard = EgressGuard::with_lookup(allow, dns.clone());

    let refused = [
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("http://[::1]:{p}/"),
        format!("http://[::ffff:127.0.0.1]:{p}/"),
        format!("http://0.0.0.0:{p}/"),
        format!("http://127.0.0.1:{p}/"),
        format!("http://127.1:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://0x7f000001:{p}/"),
        format!("http://[::]:{p}/"),
        format!("http://[::127.0.0.1]:{p}/"),
        format!("http://[64:ff9b::7f00:1]:{p}/"),
        format!("http://[2002:7f00:1::]:{p}/"),
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/".to_owned(),
        "http://10.0.0.1/".to_owned(),
        "http://10.255.255.254:8080/".to_owned(),
        "http://100.64.0.1/".to_owned(),
        "http://100.127.255.254/".to_owned(),
        "http://172.16.0.1/".to_owned(),
        "http://172.31.255.255/".to_owned(),
        "http://192.168.1.1/".to_owned(),
        "http://[fc00::1]/".to_owned(),
        "http://[fd12:3456::1]/".to_owned(),
        "http://[fe80::1]/".to_owned(),
        "http://224.0.0.1/".to_owned(),
        "http://[ff02::1]/".to_owned(),
        "http://255.255.255.255/".to_owned(),
        "http://192.0.2.1/".to_owned(),
        "http://198.51.100.1/".to_owned(),
        "http://203.0.113.9/".to_owned(),
        "http://[2001:db8::1]/".to_owned(),
        "http://198.18.0.1/".to_owned(),
        "http://240.0.0.1/".to_owned(),
        format!("http://localhost.test:{p}/"),
        "http://metadata.test/latest/meta-data/".to_owned(),
        "http://cluster.test/".to_owned(),
        format!("http://mixed.test:{p}/"),
        "http://v6.test/".to_owned(),
        "http://public.test:25/".to_owned(),
        "http://public.test:22/".to_owned(),
        "http://user:secret@public.test/".to_owned(),
        "ftp://public.test/file".to_owned(),
        "file:///etc/passwd".to_owned(),
        "gopher://public.test/".to_owned(),
        "http://no-such-name.test/".to_owned(),
        "not a url".to_owned(),
        format!("http://{}/", bouncer.addr),
        format!("http://{}/", bouncer6.addr),
    ];
    assert!(refused.len() >= 30);
    for url in &refused {
        match guard.get(url, options()).await {
            Err(EgressError::Refused(Refusal::Unresolved)) if !url.contains("no-such-name") => {
                panic!("{url}: reached DNS; it should have been refused before")
            }
            Err(EgressError::Refused(why)) => eprintln!("refused {url}: {why}"),
            Err(other) => panic!("{url}: expected a refusal, got {other}"),
            Ok(r) => panic!("{url}: fetched (HTTP {})", r.status()),
        }
    }
    assert_eq!(canary.hits(), 0, "a refused address was reached");
    assert_eq!(canary6.as_ref().map_or(0, Server::hits), 0, "a refused address was reached over IPv6");
    assert_eq!((bouncer.hits(), bouncer6.hits()), (1, 1), "the allowed first hops were fetched, their redirects refused");
    assert!(
        matches!(guard.get(&format!("http://{}/", bouncer.addr), options()).await, Err(EgressError::Refused(Refusal::Address { .. }))),
        "a redirect to loopback is refused as an address"
    );
}

#[tokio::test]
async fn egress_guard_a_name_that_rebinds_to_loopback_on_its_second_lookup_never_reaches_it() {
    let canary = Server::start("127.0.0.1", 0, ok("internal secret")).await.unwrap();
    // The outside stands on 127.0.0.2 (allow-listed), on the canary's port, so only the address differs.
    let outside = Server::start("127.0.0.2", canary.addr.port(), ok("the public page")).await.unwrap();
    let dns = Arc::new(ScriptedDns::default().name("rebind.test", &[&["127.0.0.2"], &["127.0.0.1"]]));
    let guard = EgressGuard::with_lookup(AllowList::parse(&outside.addr.to_string()).unwrap(), dns.clone());

    let url = format!("http://rebind.test:{}/", outside.addr.port());
    let body = guard.get(&url, options()).await.unwrap().text().await.unwrap();
    assert_eq!(body, "the public page");
    assert_eq!(dns.lookups("rebind.test"), 1, "the name is resolved once, and the connection goes to that answer");
    assert_eq!(canary.hits(), 0, "the second answer (loopback) was used");
    // Asked again, the name now answers loopback: refused before any connection.
    assert!(matches!(guard.get(&url, options()).await, Err(EgressError::Refused(Refusal::Address { .. }))));
    assert_eq!(canary.hits(), 0);
}

#[tokio::test]
async fn egress_guard_lets_an_allowed_public_looking_name_through_and_follows_its_redirects() {
    let page = Server::start("127.0.0.3", 0, ok("lobby opens at 20:00")).await.unwrap();
    let short = Server::start("127.0.0.4", 0, redirect(&format!("http://news.example.com:{}/story", page.addr.port()))).await.unwrap();
    let dns = Arc::new(ScriptedDns::default().name("news.example.com", &[&["127.0.0.3"]]).name("short.example.com", &[&["127.0.0.4"]]));
    let allow = AllowList::parse(&format!("{},{}", page.addr, short.addr)).unwrap();
    let guard = EgressGuard::with_lookup(allow, dns);
    let body = guard.get(&format!("http://short.example.com:{}/x", short.addr.port()), options()).await.unwrap().text().await.unwrap();
    assert_eq!(body, "lobby opens at 20:00");
    assert_eq!((short.hits(), page.hits()), (1, 1));

    // Without the allow list the same name is refused: the allow list is what lets loopback through, and it is off by default.
    let strict =
        EgressGuard::with_lookup(AllowList::default(), Arc::new(ScriptedDns::default().name("news.example.com", &[&["127.0.0.3"]])));
    assert!(matches!(
        strict.get(&format!("http://news.example.com:{}/story", page.addr.port()), options()).await,
        Err(EgressError::Refused(Refusal::Address { class: "loopback", .. }))
    ));
    assert_eq!(page.hits(), 1);
}

#[tokio::test]
async fn egress_guard_stops_after_the_redirect_bound() {
    let dns = Arc::new(ScriptedDns::default().name("loop.example.com", &[&["127.0.0.5"]]));
    // A relative Location keeps the host and port: the server sends every hop back to itself.
    let server = Server::start("127.0.0.5", 0, redirect("/again")).await.unwrap();
    let port = server.addr.port();
    let guard = EgressGuard::with_lookup(AllowList::parse(&server.addr.to_string()).unwrap(), dns);
    assert!(matches!(
        guard.get(&format!("http://loop.example.com:{port}/"), options()).await,
        Err(EgressError::Refused(Refusal::TooManyRedirects(3)))
    ));
    assert_eq!(server.hits(), 4, "the first request and three redirects");
}
