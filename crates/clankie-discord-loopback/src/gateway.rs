//! The gateway WebSocket, v10, JSON encoding: Hello, Identify → READY (shards and the
//! identify spacing), heartbeats, Resume with replay, the command cap (4008), and the bot's
//! voice state updates (op 4), which the voice layer answers.

use std::sync::Arc;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRef, State as AxState};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};

use crate::state::State;
use crate::state::limits::CommandWindow;
use crate::state::permission;
use crate::state::sessions::intent;
use crate::voice::{VoiceServer, bot_voice, guild_voice_states};

pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<State>: FromRef<S>,
    Arc<VoiceServer>: FromRef<S>,
{
    // twilight connects to `<url>/?v=10&encoding=json`, so both forms are served.
    Router::new().route("/gateway", get(upgrade)).route("/gateway/", get(upgrade))
}

async fn upgrade(ws: WebSocketUpgrade, AxState(state): AxState<Arc<State>>, AxState(voice): AxState<Arc<VoiceServer>>) -> Response {
    ws.on_upgrade(move |socket| serve(socket, state, voice))
}

fn token_ok(state: &State, token: &str) -> bool {
    token.trim_start_matches("Bot ") == state.config.token
}

async fn send(socket: &mut WebSocket, frame: String) -> bool {
    socket.send(Message::Text(frame.into())).await.is_ok()
}

async fn serve(mut socket: WebSocket, state: Arc<State>, voice: Arc<VoiceServer>) {
    let hello = json!({ "op": 10, "d": { "heartbeat_interval": state.config.heartbeat_interval_ms } }).to_string();
    if !send(&mut socket, hello).await {
        return;
    }
    let mut dispatched = state.sessions.dispatched.subscribe();
    let mut drop_all = state.sessions.drop_all.subscribe();
    let mut session: Option<String> = None;
    let mut shard = 0u32;
    let mut sent = 0u64;
    let mut commands = CommandWindow::new(&state.config.limits);
    loop {
        tokio::select! {
            incoming = socket.recv() => {
                let Some(Ok(message)) = incoming else { break };
                let text = match message {
                    Message::Text(t) => t.to_string(),
                    Message::Close(_) => break,
                    _ => continue,
                };
                if !commands.take() {
                    // Discord disconnects a client past its command budget with 4008.
                    state.limits.gateway_closed();
                    let _ = socket.send(Message::Close(Some(axum::extract::ws::CloseFrame { code: 4008, reason: "Rate limited.".into() }))).await;
                    break;
                }
                let Ok(frame) = serde_json::from_str::<Value>(&text) else {
                    let _ = socket.send(Message::Close(None)).await;
                    break;
                };
                match frame["op"].as_u64() {
                    Some(1) => {
                        if !send(&mut socket, json!({ "op": 11 }).to_string()).await { break; }
                    }
                    Some(2) => {
                        if !token_ok(&state, frame["d"]["token"].as_str().unwrap_or_default()) {
                            state.sessions.refuse_identify();
                            let _ = socket.send(Message::Close(Some(axum::extract::ws::CloseFrame { code: 4004, reason: "Authentication failed.".into() }))).await;
                            break;
                        }
                        // Message Content is privileged: asked for while the application's switch
                        // in the portal is off, Discord closes with 4014.
                        if frame["d"]["intents"].as_u64().unwrap_or(0) & intent::MESSAGE_CONTENT != 0 && !state.message_content_intent() {
                            state.sessions.refuse_identify();
                            let _ = socket.send(Message::Close(Some(axum::extract::ws::CloseFrame { code: 4014, reason: "Disallowed intent(s).".into() }))).await;
                            break;
                        }
                        // `shard: [id, total]`; a total other than ours is refused as Discord does (4010).
                        let asked = &frame["d"]["shard"];
                        let (id, total) = (asked[0].as_u64().unwrap_or(0) as u32, asked[1].as_u64().unwrap_or(1) as u32);
                        if total != state.config.shards || id >= total {
                            let _ = socket.send(Message::Close(Some(axum::extract::ws::CloseFrame { code: 4010, reason: "Invalid shard.".into() }))).await;
                            break;
                        }
                        if session.is_some() { state.sessions.set_attached(shard, -1); }
                        shard = id;
                        let voice_states = |guild| guild_voice_states(&state, &voice, guild);
                        let (id, ready) = state.identify(shard, frame["d"]["intents"].as_u64().unwrap_or(0), &voice_states);
                        if !send(&mut socket, ready).await { break; }
                        sent = 1;
                        // The GUILD_CREATEs that follow READY in the session's log, and anything
                        // dispatched since.
                        let mut ok = true;
                        for (n, f) in state.sessions.frames_after(&id, sent) {
                            ok &= send(&mut socket, f).await;
                            sent = n;
                        }
                        if !ok { break; }
                        session = Some(id);
                        state.sessions.set_attached(shard, 1);
                    }
                    Some(4) => {
                        // Update Voice State: join, move or leave a voice channel.
                        let d = &frame["d"];
                        let id = |v: &Value| v.as_str().and_then(|s| s.parse::<u64>().ok()).or_else(|| v.as_u64());
                        // Discord ignores a join it would refuse: a guild the bot is not in, or a
                        // channel it may not connect to.
                        let channel = id(&d["channel_id"]);
                        let allowed = |guild| state.bot_in_guild(guild)
                            && channel.is_none_or(|c| state.bot_permissions(c).is_some_and(|p| p & permission::CONNECT != 0));
                        if session.is_some() && let Some(guild) = id(&d["guild_id"]) && allowed(guild) {
                            let _ = bot_voice(&state, &voice, guild, channel);
                        }
                    }
                    Some(6) => {
                        let d = &frame["d"];
                        let sid = d["session_id"].as_str().unwrap_or_default().to_owned();
                        let seq = d["seq"].as_u64().unwrap_or(0);
                        match (token_ok(&state, d["token"].as_str().unwrap_or_default()), state.sessions.resume(&sid, seq)) {
                            (true, Some(frames)) => {
                                let mut ok = true;
                                for (n, f) in frames {
                                    ok &= send(&mut socket, f).await;
                                    sent = n;
                                }
                                if !ok { break; }
                                if session.is_some() { state.sessions.set_attached(shard, -1); }
                                shard = state.sessions.session_shard(&sid).unwrap_or(0);
                                session = Some(sid);
                                state.sessions.set_attached(shard, 1);
                            }
                            _ => {
                                if !send(&mut socket, json!({ "op": 9, "d": false }).to_string()).await { break; }
                            }
                        }
                    }
                    _ => {}
                }
            }
            _ = dispatched.recv() => {
                if let Some(sid) = &session {
                    let mut ok = true;
                    for (n, f) in state.sessions.frames_after(sid, sent) {
                        ok &= send(&mut socket, f).await;
                        sent = n;
                    }
                    if !ok { break; }
                }
            }
            _ = drop_all.recv() => {
                // A cut, not a goodbye: no close frame, so the client resumes.
                break;
            }
        }
    }
    if session.is_some() {
        state.sessions.set_attached(shard, -1);
    }
}
