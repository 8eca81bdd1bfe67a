//! The guard as an HTTP proxy, for a client that fetches on its own (a browser).
//!
//! A page pulls in subresources, follows redirects and may name an address
//! literal, none of which the tool that opened it sees. So the browser is
//! pointed at this proxy (loopback included), and every connection it makes
//! passes [`EgressGuard::resolve`] first: `CONNECT host:port` for https and
//! websockets, and absolute-form requests for plain http, which are sent on
//! with `Connection: close` so one checked connection carries one request.
//! A refused destination gets `403` and nothing is dialled.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::Url;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::EgressGuard;

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 64 * 1024;

/// A running guard proxy on loopback; it stops when dropped.
pub struct GuardProxy {
    addr: SocketAddr,
    refused: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl GuardProxy {
    /// Serves the guard on a free loopback port.
    pub async fn start(guard: EgressGuard) -> std::io::Result<GuardProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let refused = Arc::new(AtomicU64::new(0));
        let counter = refused.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                let (guard, counter) = (guard.clone(), counter.clone());
                tokio::spawn(async move {
                    if let Err(Refused) = serve(client, &guard).await {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        Ok(GuardProxy { addr, refused, task })
    }

    /// Where it listens, for `--proxy-server=http://<addr>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections it refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl Drop for GuardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A connection the guard turned away.
struct Refused;

async fn serve(mut client: TcpStream, guard: &EgressGuard) -> Result<(), Refused> {
    let Some((head, rest)) = read_head(&mut client).await else { return Ok(()) };
    let Some(request) = Request::parse(&head) else {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").await;
        return Ok(());
    };
    let Ok(url) = Url::parse(&request.target_url()) else {
        return refuse(&mut client).await;
    };
    let addrs = match guard.resolve(&url).await {
        Ok(addrs) => addrs,
        Err(refusal) => {
            tracing::debug!(%refusal, "guard proxy: refused a destination");
            return refuse(&mut client).await;
        }
    };
    let Some(mut upstream) = connect(&addrs).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").await;
        return Ok(());
    };
    if request.connect {
        if client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await.is_err() {
            return Ok(());
        }
    } else if upstream.write_all(request.origin_form().as_bytes()).await.is_err() {
        return Ok(());
    }
    if !rest.is_empty() && upstream.write_all(&rest).await.is_err() {
        return Ok(());
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    Ok(())
}

async fn refuse(client: &mut TcpStream) -> Result<(), Refused> {
    let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").await;
    Err(Refused)
}

async fn connect(addrs: &[SocketAddr]) -> Option<TcpStream> {
    for addr in addrs {
        if let Ok(Ok(stream)) = tokio::time::timeout(std::time::Duration::from_secs(10), TcpStream::connect(addr)).await {
            return Some(stream);
        }
    }
    None
}

/// Reads up to the end of the request head; returns the head and whatever followed it.
async fn read_head(client: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Some((String::from_utf8_lossy(&buf).into_owned(), rest));
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
    }
}

/// The parts of a proxy request the guard needs.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    connect: bool,
    method: String,
    target: String,
    /// Header lines, without hop-by-hop headers.
    headers: Vec<String>,
}

impl Request {
    fn parse(head: &str) -> Option<Request> {
        let mut lines = head.split("\r\n");
        let mut first = lines.next()?.split(' ');
        let (method, target, version) = (first.next()?, first.next()?, first.next()?);
        if !version.starts_with("HTTP/1.") || method.is_empty() || target.is_empty() {
            return None;
        }
        let hop_by_hop = |l: &str| {
            let name = l.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
            matches!(name.as_str(), "connection" | "proxy-connection" | "keep-alive" | "proxy-authorization")
        };
        let headers = lines.filter(|l| !l.is_empty() && !hop_by_hop(l)).map(str::to_owned).collect();
        Some(Request { connect: method.eq_ignore_ascii_case("CONNECT"), method: method.to_owned(), target: target.to_owned(), headers })
    }

    /// The destination as a URL the guard can check.
    fn target_url(&self) -> String {
        if self.connect {
            // `host:port`; the guard judges the port as it is, the scheme only has to be one it fetches.
            format!("https://{}/", self.target)
        } else {
            self.target.clone()
        }
    }

    /// The request as the origin server expects it: path only, one request per connection.
    fn origin_form(&self) -> String {
        let path = Url::parse(&self.target)
            .map(|u| format!("{}{}", u.path(), u.query().map(|q| format!("?{q}")).unwrap_or_default()))
            .unwrap_or_else(|_| "/".into());
        let mut head = format!("{} {path} HTTP/1.1\r\n", self.method);
        for h in &self.headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        head.push_str("Connection: close\r\n\r\n");
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_request_becomes_one_origin_request() {
        let r = Request::parse(
            "GET http://example.com:8080/a/b?c=1 HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert!(!r.connect);
        assert_eq!(r.target_url(), "http://example.com:8080/a/b?c=1");
        assert_eq!(r.origin_form(), "GET /a/b?c=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n");
        let c = Request::parse("CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n").unwrap();
        assert!(c.connect);
        assert_eq!(Url::parse(&c.target_url()).unwrap().port_or_known_default(), Some(443));
        assert!(Request::parse("nonsense\r\n\r\n").is_none());
        assert!(Request::parse("GET / SPDY/3\r\n\r\n").is_none());
    }
}
