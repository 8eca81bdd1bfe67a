//! The loopback Discord refusing what Discord refuses, through the real clients: twilight's
//! HTTP client for REST, and a plain WebSocket for the gateway (frames as Discord sends them,
//! read into twilight-model's types).

mod control;
mod gateway;
mod guilds;
mod permissions;
mod renames;
mod rest;
mod sessions;
mod threads;

use std::time::Duration;

use clankie_discord_loopback::{Loopback, LoopbackConfig};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use twilight_http::api_error::ApiError;
use twilight_http::error::ErrorType;
use twilight_model::id::Id;

pub const GENERAL: u64 = 200;
pub const LOBBIES: u64 = 201;
pub const HANGOUT: u64 = 300;
pub const TOWN_SQUARE: u64 = 210;
pub const DM: u64 = 900;
pub const GUILD: u64 = 100;
/// A guild whose channel (220) exists but the bot was never invited to.
pub const ABSENT_GUILD: u64 = 120;
pub const ABSENT_CHANNEL: u64 = 220;

pub async fn loopback(config: LoopbackConfig) -> Loopback {
    Loopback::serve("127.0.0.1:0".parse().unwrap(), config).await.unwrap()
}

/// The default loopback with a guild the bot is not in (120, channel 220).
pub fn with_absent_guild() -> LoopbackConfig {
    let mut config = LoopbackConfig::default();
    config.channels.push(clankie_discord_loopback::ChannelSpec {
        id: ABSENT_CHANNEL,
        name: "elsewhere".into(),
        voice: false,
        guild: Some(ABSENT_GUILD),
        overwrites: vec![],
        ..Default::default()
    });
    config.absent_guilds.push(ABSENT_GUILD);
    config
}

/// A twilight client as the gateway builds one against a stand-in.
pub fn client(discord: &Loopback) -> twilight_http::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    twilight_http::Client::builder().token(discord.config().token.clone()).proxy(discord.addr().to_string(), true).build()
}

pub fn id<T>(n: u64) -> Id<T> {
    Id::new(n)
}

/// The status and Discord JSON code of a refused request.
pub fn refusal<T: std::fmt::Debug>(result: Result<T, twilight_http::Error>) -> (u16, u64) {
    let e = result.expect_err("Discord refuses this");
    match e.kind() {
        ErrorType::Response { status, error: ApiError::General(g), .. } => (status.get(), g.code),
        other => panic!("not a refusal with a code: {other:?}"),
    }
}

/// One HTTP/1.1 request as it is, for the control API and raw looks at the wire: status and JSON.
pub async fn raw(discord: &Loopback, method: &str, path: &str, bot: bool, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(discord.addr()).await.unwrap();
    let auth = if bot { format!("Authorization: Bot {}\r\n", discord.config().token) } else { String::new() };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        discord.addr(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// A gateway connection, v10 JSON, over a WebSocket written by hand (the loopback's crates have
/// no WebSocket client; the frames are read as Discord sends them).
pub struct Gateway {
    stream: TcpStream,
}

/// What a gateway read gave: a text frame's JSON, or the close code.
#[derive(Debug)]
pub enum Frame {
    Json(Value),
    Closed(Option<u16>),
}

impl Gateway {
    pub async fn connect(discord: &Loopback) -> Gateway {
        let mut stream = TcpStream::connect(discord.addr()).await.unwrap();
        let request = format!(
            "GET /gateway/?v=10&encoding=json HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            discord.addr()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(stream.read_u8().await.unwrap());
        }
        assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
        let mut gateway = Gateway { stream };
        let hello = gateway.next(Duration::from_secs(5)).await;
        assert!(matches!(&hello, Some(Frame::Json(v)) if v["op"] == 10), "{hello:?}");
        gateway
    }

    /// Sends one JSON payload as a masked text frame, as a client must.
    pub async fn send(&mut self, payload: &Value) {
        let data = payload.to_string().into_bytes();
        let mut frame = vec![0x81u8];
        match data.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n < 65_536 => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let mask = [0x12u8, 0x34, 0x56, 0x78];
        frame.extend_from_slice(&mask);
        frame.extend(data.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame).await.unwrap();
    }

    /// Identifies as shard 0 of 1 with `intents`.
    pub async fn identify(&mut self, discord: &Loopback, intents: u64) {
        let d = serde_json::json!({
            "token": discord.config().token, "intents": intents, "shard": [0, 1],
            "properties": { "os": "linux", "browser": "test", "device": "test" },
        });
        self.send(&serde_json::json!({ "op": 2, "d": d })).await;
    }

    /// The next message, or `None` if none comes within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Frame> {
        tokio::time::timeout(wait, self.read()).await.ok()
    }

    async fn read(&mut self) -> Frame {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            if self.stream.read_exact(&mut head).await.is_err() {
                return Frame::Closed(None);
            }
            let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0f);
            let len = match head[1] & 0x7f {
                126 => u64::from(self.stream.read_u16().await.unwrap()),
                127 => self.stream.read_u64().await.unwrap(),
                n => u64::from(n),
            };
            let mut data = vec![0u8; len as usize];
            self.stream.read_exact(&mut data).await.unwrap();
            match opcode {
                8 => return Frame::Closed(data.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]))),
                0 | 1 => {
                    message.extend_from_slice(&data);
                    if fin {
                        return Frame::Json(serde_json::from_slice(&message).unwrap());
                    }
                }
                _ => {}
            }
        }
    }

    /// Every dispatch that arrives until none has for `quiet`: (type, payload).
    pub async fn dispatches(&mut self, quiet: Duration) -> Vec<(String, Value)> {
        let mut seen = Vec::new();
        while let Some(Frame::Json(v)) = self.next(quiet).await {
            if v["op"] == 0 {
                seen.push((v["t"].as_str().unwrap_or_default().to_owned(), v));
            }
        }
        seen
    }
}
