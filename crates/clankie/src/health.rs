//! `clankie health`: a container healthcheck that needs nothing but this binary.
//!
//! Debian's `/bin/sh` is dash, which has no `/dev/tcp`, and the slim image has no
//! curl; so the check speaks plain HTTP/1.0 itself. Exit 0 when the URL answers
//! 200, 1 when it answers anything else, 2 when it cannot be asked at all.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Asks `url` (or this container's own `/readyz`) and returns the exit code.
pub async fn check(url: Option<&str>, timeout: Duration) -> i32 {
    let target = match url.map(str::to_owned).or_else(own_readyz) {
        Some(u) => u,
        None => {
            eprintln!("health: no URL given and CLANKIE_HTTP_ADDR is not set");
            return 2;
        }
    };
    let Some((authority, path)) = split(&target) else {
        eprintln!("health: {target:?} is not an http:// URL");
        return 2;
    };
    match tokio::time::timeout(timeout, status(&authority, &path)).await {
        Ok(Ok(200)) => 0,
        Ok(Ok(code)) => {
            eprintln!("health: {target} answered {code}");
            1
        }
        Ok(Err(e)) => {
            eprintln!("health: {target} could not be asked: {e}");
            2
        }
        Err(_) => {
            eprintln!("health: {target} did not answer within {} ms", timeout.as_millis());
            2
        }
    }
}

/// `http://<CLANKIE_HTTP_ADDR>/readyz`, with an any-address bind asked on loopback.
fn own_readyz() -> Option<String> {
    // Through the settings' sources, so an address given only in the config file is found too.
    let sources = clankie_settings::Sources::from_process().ok()?;
    let addr: SocketAddr = sources.get("CLANKIE_HTTP_ADDR")?.trim().parse().ok()?;
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    Some(format!("http://{}/readyz", SocketAddr::new(ip, addr.port())))
}

fn split(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    (!authority.is_empty()).then(|| (authority.to_owned(), path.to_owned()))
}

async fn status(authority: &str, path: &str) -> std::io::Result<u16> {
    let mut stream = tokio::net::TcpStream::connect(authority).await?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").as_bytes()).await?;
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.contains(&b'\n') && head.len() < 4096 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no HTTP status line"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_split_into_authority_and_path() {
        assert_eq!(super::split("http://127.0.0.1:9470/readyz"), Some(("127.0.0.1:9470".into(), "/readyz".into())));
        assert_eq!(super::split("http://[::1]:9470"), Some(("[::1]:9470".into(), "/".into())));
        assert_eq!(super::split("https://x/readyz"), None);
        assert_eq!(super::split("http:///readyz"), None);
    }
}
