//! The voice gateway, v4, on the bot's voice socket: Identify (refused without DAVE when it is
//! required), Select Protocol → Session Description, DAVE's text and binary ops, heartbeats and
//! Resume.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::State as AxState;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::state::config::DAVE_VERSION;
use crate::voice::rtp::Cipher;
use crate::voice::server::{Conn, VoiceServer, WsOut, random_u32};

/// The voice gateway's heartbeat interval, as Hello announces it.
const HEARTBEAT_MS: f64 = 13_750.0;
const MODES: [&str; 2] = ["aead_aes256_gcm_rtpsize", "aead_xchacha20_poly1305_rtpsize"];

pub(super) async fn upgrade(ws: WebSocketUpgrade, AxState(server): AxState<Arc<VoiceServer>>) -> Response {
    ws.on_upgrade(move |socket| serve(socket, server))
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let _ = socket.send(Message::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
}

fn id_of(v: &Value) -> u64 {
    v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).unwrap_or(0)
}

async fn serve(mut socket: WebSocket, server: Arc<VoiceServer>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<WsOut>();
    let mut guild: Option<u64> = None;
    loop {
        tokio::select! {
            incoming = socket.recv() => {
                let Some(Ok(message)) = incoming else { break };
                let text = match message {
                    Message::Text(t) => t.to_string(),
                    Message::Binary(b) => {
                        if let Some(g) = guild {
                            server.bot_binary(g, &b);
                        }
                        continue;
                    }
                    Message::Close(_) => break,
                    _ => continue,
                };
                let Ok(frame) = serde_json::from_str::<Value>(&text) else {
                    let mut inner = server.lock();
                    VoiceServer::count(&mut inner, "client_garbage_json");
                    continue;
                };
                let (out, close_with) = answer(&server, &frame, &tx, &mut guild);
                let mut ok = true;
                for f in out {
                    ok &= socket.send(Message::Text(f.into())).await.is_ok();
                }
                if let Some((code, reason)) = close_with {
                    close(&mut socket, code, reason).await;
                    break;
                }
                if !ok { break; }
            }
            command = rx.recv() => {
                match command {
                    Some(WsOut::Text(t)) => {
                        if socket.send(Message::Text(t.into())).await.is_err() { break; }
                    }
                    Some(WsOut::Binary(b)) => {
                        if socket.send(Message::Binary(b.into())).await.is_err() { break; }
                    }
                    Some(WsOut::Close(code)) => {
                        close(&mut socket, code, "closed by the loopback").await;
                        break;
                    }
                    None => break,
                }
            }
        }
    }
    if let Some(g) = guild {
        let mut inner = server.lock();
        if let Some(conn) = inner.conns.get_mut(&g)
            && conn.ws.as_ref().is_some_and(|w| w.same_channel(&tx))
        {
            conn.ws = None;
        }
    }
}

/// A close to end the socket with: its code and reason.
type Close = Option<(u16, &'static str)>;

/// The answer to one frame from the bot: frames to send, and a close to end with.
fn answer(server: &VoiceServer, frame: &Value, tx: &mpsc::UnboundedSender<WsOut>, guild: &mut Option<u64>) -> (Vec<String>, Close) {
    let d = &frame["d"];
    let mut out: Vec<String> = Vec::new();
    let close = match frame["op"].as_u64() {
        Some(0) => identify(server, d, tx, guild, &mut out),
        Some(1) => select_protocol(server, d, *guild, &mut out),
        Some(3) => {
            out.push(json!({ "op": 6, "d": d.clone() }).to_string());
            None
        }
        Some(op @ (23 | 31)) => dave_transition(server, op, d, *guild),
        Some(7) => resume(server, d, tx, guild, &mut out),
        _ => None,
    };
    (out, close)
}

/// Identify (op 0): refused without the session and token the gateway handed out (4004), or
/// without DAVE when it is required (Hello, then 4017); else Hello and Ready, replacing an
/// earlier connection of the guild.
fn identify(server: &VoiceServer, d: &Value, tx: &mpsc::UnboundedSender<WsOut>, guild: &mut Option<u64>, out: &mut Vec<String>) -> Close {
    let g = id_of(&d["server_id"]);
    let mut inner = server.lock();
    let valid = inner.bot_state.get(&g).is_some_and(|(_, s)| d["session_id"].as_str() == Some(s))
        && inner.tokens.get(&g).is_some_and(|t| d["token"].as_str() == Some(t));
    if !valid {
        VoiceServer::count(&mut inner, "identify_refused");
        return Some((4004, "Authentication failed."));
    }
    let channel = inner.bot_state[&g].0;
    let offered = d["max_dave_protocol_version"].as_u64().unwrap_or(0);
    if server.dave.on && offered < u64::from(server.dave.required_version) {
        // Discord's rule since March 2026: Hello, then 4017 for a client without DAVE.
        VoiceServer::count(&mut inner, "dave_required_closed");
        out.push(json!({ "op": 8, "d": { "heartbeat_interval": HEARTBEAT_MS } }).to_string());
        return Some((4017, "E2EE/DAVE protocol required."));
    }
    let ssrc = random_u32() | 1;
    let user = id_of(&d["user_id"]);
    if let Some(old) = inner.conns.insert(
        g,
        Conn {
            channel,
            user,
            dave: false,
            session_id: d["session_id"].as_str().unwrap_or_default().to_owned(),
            token: d["token"].as_str().unwrap_or_default().to_owned(),
            ws: Some(tx.clone()),
            bot_udp: None,
            cipher: None,
            mode: String::new(),
        },
    ) {
        if let Some(ws) = old.ws {
            // A second identify replaces the first connection, as Discord's does.
            let _ = ws.send(WsOut::Close(4005));
        }
        if old.dave && old.channel != channel {
            server.dave_step(&mut inner, old.channel, |g, k, now| g.bot_leaves(k, now));
        }
    }
    VoiceServer::count(&mut inner, "identify");
    *guild = Some(g);
    let port = server.udp_addr().port();
    out.push(json!({ "op": 8, "d": { "heartbeat_interval": HEARTBEAT_MS } }).to_string());
    out.push(json!({ "op": 2, "d": { "ssrc": ssrc, "ip": "127.0.0.1", "port": port, "modes": MODES } }).to_string());
    None
}

/// Select Protocol (op 1): the bot's UDP address and mode → Session Description (op 4) with a
/// fresh key, then DAVE's opening ops when the call is encrypted end to end.
fn select_protocol(server: &VoiceServer, d: &Value, guild: Option<u64>, out: &mut Vec<String>) -> Close {
    let Some(g) = guild else { return Some((4003, "Not authenticated.")) };
    let mode = d["data"]["mode"].as_str().unwrap_or_default().to_owned();
    let ip: Option<IpAddr> = d["data"]["address"].as_str().and_then(|a| a.parse().ok());
    let port = d["data"]["port"].as_u64().and_then(|p| u16::try_from(p).ok());
    let key: [u8; 32] = rand::random();
    let mut inner = server.lock();
    let (Some(conn), Some(cipher), Some(ip), Some(port)) = (inner.conns.get_mut(&g), Cipher::new(&mode, &key), ip, port) else {
        return Some((4016, "Unknown encryption mode."));
    };
    conn.cipher = Some(cipher);
    let chosen = if mode.starts_with("aead_aes256_gcm") { "selected_aes256_gcm" } else { "selected_xchacha20_poly1305" };
    conn.mode = mode.clone();
    conn.bot_udp = Some(SocketAddr::new(ip, port));
    conn.dave = server.dave.on;
    let (channel, user, dave) = (conn.channel, conn.user, conn.dave);
    VoiceServer::count(&mut inner, chosen);
    let version = if dave { DAVE_VERSION } else { 0 };
    out.push(json!({ "op": 4, "d": { "mode": mode, "secret_key": key.to_vec(), "dave_protocol_version": version } }).to_string());
    if dave {
        // Op 11 and op 25 follow Session Description, through the socket's queue.
        server.dave_step(&mut inner, channel, |g, k, now| g.bot_identifies(k, user, now));
    }
    None
}

/// DAVE's Ready for Transition (op 23) or Invalid Commit/Welcome (op 31) from the bot.
fn dave_transition(server: &VoiceServer, op: u64, d: &Value, guild: Option<u64>) -> Close {
    let Some(g) = guild else { return Some((4003, "Not authenticated.")) };
    let transition = d["transition_id"].as_u64().and_then(|t| u16::try_from(t).ok()).unwrap_or(0);
    let mut inner = server.lock();
    if let Some(channel) = inner.conns.get(&g).filter(|c| c.dave).map(|c| c.channel) {
        if op == 23 {
            server.dave_step(&mut inner, channel, |gr, k, now| gr.bot_ready(k, transition, now));
        } else {
            VoiceServer::count(&mut inner, "dave_invalid_commit_welcome");
            server.dave_step(&mut inner, channel, |gr, k, now| gr.bot_invalid(k, transition, now));
        }
    }
    None
}

/// Resume (op 7): the connection's session and token take it back (Hello, Resumed), else 4006.
fn resume(server: &VoiceServer, d: &Value, tx: &mpsc::UnboundedSender<WsOut>, guild: &mut Option<u64>, out: &mut Vec<String>) -> Close {
    let g = id_of(&d["server_id"]);
    let mut inner = server.lock();
    let resumed = match inner.conns.get_mut(&g) {
        Some(conn) if d["session_id"].as_str() == Some(&conn.session_id) && d["token"].as_str() == Some(&conn.token) => {
            conn.ws = Some(tx.clone());
            true
        }
        _ => false,
    };
    if !resumed {
        VoiceServer::count(&mut inner, "resume_refused");
        return Some((4006, "Session is no longer valid."));
    }
    VoiceServer::count(&mut inner, "resume");
    *guild = Some(g);
    out.push(json!({ "op": 8, "d": { "heartbeat_interval": HEARTBEAT_MS } }).to_string());
    out.push(json!({ "op": 9, "d": null }).to_string());
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::config::DaveConfig;

    fn identify(session: &str, token: &str, offered: Option<u64>) -> Value {
        let mut d = json!({ "server_id": "100", "session_id": session, "token": token, "user_id": "4242" });
        if let Some(v) = offered {
            d["max_dave_protocol_version"] = json!(v);
        }
        json!({ "op": 0, "d": d })
    }

    #[tokio::test]
    async fn dave_an_identify_offering_no_dave_gets_hello_then_close_4017_and_passthrough_takes_it() {
        let dir = std::env::temp_dir().join(format!("clankie-loopback-dave-unit-{}", std::process::id()));
        let server = VoiceServer::start(&dir, None, DaveConfig { on: true, required_version: 1 }).await.unwrap();
        let (session, token) = server.bot_moves(100, Some(300));
        let (tx, _rx) = mpsc::unbounded_channel();
        for offered in [None, Some(0)] {
            let mut guild = None;
            let (out, close) = answer(&server, &identify(&session, &token, offered), &tx, &mut guild);
            assert_eq!(close.map(|c| c.0), Some(4017), "offering {offered:?}");
            assert_eq!(out.len(), 1, "Hello, then the close");
            assert!(out[0].contains("\"op\":8"), "{out:?}");
        }
        let mut guild = None;
        let (out, close) = answer(&server, &identify(&session, &token, Some(1)), &tx, &mut guild);
        assert!(close.is_none() && out.len() == 2, "DAVE offered: Hello and Ready");
        assert_eq!(server.counters().get("dave_required_closed"), Some(&2));

        let off = VoiceServer::start(&dir.join("off"), None, DaveConfig { on: false, required_version: 1 }).await.unwrap();
        let (session, token) = off.bot_moves(100, Some(300));
        let mut guild = None;
        let (_, close) = answer(&off, &identify(&session, &token, None), &tx, &mut guild);
        assert!(close.is_none(), "with DAVE off a client without it is taken");
        let select = json!({ "op": 1, "d": { "protocol": "udp", "data": { "address": "127.0.0.1", "port": 5000, "mode": MODES[0] } } });
        let (out, _) = answer(&off, &select, &tx, &mut guild);
        assert!(out[0].contains("\"dave_protocol_version\":0"), "passthrough: {}", out[0]);
    }
}
