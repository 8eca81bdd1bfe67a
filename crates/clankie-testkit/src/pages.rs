//! A tiny web server for browser tests: fixed pages on loopback, with hits and overlap counted.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a path answers.
#[derive(Clone)]
pub enum Answer {
    /// An HTML page, after `delay`.
    Html { body: String, delay: Duration },
    /// A file with this content type and `Content-Disposition: attachment`.
    Download { content_type: String, body: Vec<u8> },
    /// Reads the request and never answers: a page that never finishes loading.
    Hang,
}

impl Answer {
    /// An HTML page answered at once.
    pub fn html(body: impl Into<String>) -> Answer {
        Answer::Html { body: body.into(), delay: Duration::ZERO }
    }
}

#[derive(Default)]
struct Counts {
    hits: Mutex<HashMap<String, usize>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

/// Serves fixed answers by path on one loopback address; anything else is 404.
pub struct TestPages {
    addr: SocketAddr,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl TestPages {
    /// Serves `routes` on `ip` (a loopback address) at a free port.
    pub async fn start(ip: &str, routes: Vec<(&str, Answer)>) -> std::io::Result<TestPages> {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let routes: Arc<HashMap<String, Answer>> = Arc::new(routes.into_iter().map(|(p, a)| (p.to_owned(), a)).collect());
        let counts = Arc::new(Counts::default());
        let shared = counts.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(answer(socket, routes.clone(), shared.clone()));
            }
        });
        Ok(TestPages { addr, counts, task })
    }

    /// `http://<addr><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests for `path` so far.
    pub fn hits(&self, path: &str) -> usize {
        self.counts.hits.lock().unwrap_or_else(|p| p.into_inner()).get(path).copied().unwrap_or(0)
    }

    /// Requests of any path so far.
    pub fn all_hits(&self) -> usize {
        self.counts.hits.lock().unwrap_or_else(|p| p.into_inner()).values().sum()
    }

    /// The most requests that were being answered at the same moment.
    pub fn most_in_flight(&self) -> usize {
        self.counts.most_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for TestPages {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(mut socket: tokio::net::TcpStream, routes: Arc<HashMap<String, Answer>>, counts: Arc<Counts>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or("/").split('?').next().unwrap_or("/").to_owned();
    *counts.hits.lock().unwrap_or_else(|p| p.into_inner()).entry(path.clone()).or_default() += 1;
    let now = counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    counts.most_in_flight.fetch_max(now, Ordering::SeqCst);
    let response: Vec<u8> = match routes.get(&path).cloned() {
        Some(Answer::Html { body, delay }) => {
            tokio::time::sleep(delay).await;
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        }
        Some(Answer::Download { content_type, body }) => {
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Disposition: attachment; filename=\"payload.bin\"\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            r.extend_from_slice(&body);
            r
        }
        Some(Answer::Hang) => {
            std::future::pending::<()>().await;
            Vec::new()
        }
        None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
    };
    let _ = socket.write_all(&response).await;
    let _ = socket.shutdown().await;
    counts.in_flight.fetch_sub(1, Ordering::SeqCst);
}
