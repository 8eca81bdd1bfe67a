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

/// The gateway's WebSocket route, over any router state that hands out the loopback's state and voice server.
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

/// Where one connection stands in its session: the session it identified or resumed as (none
/// yet), the shard it holds, and how far along the session's log it has been sent.
struct Attached {
    session: Option<String>,
    shard: u32,
    sent: u64,
}

/// Sends `frames` in order, each noted as sent; false if any failed to go (the rest are still tried).
async fn send_all(socket: &mut WebSocket, frames: Vec<(u64, String)>, sent: &mut u64) -> bool {
    let mut ok = true;
    for (n, f) in frames {
        ok &= send(socket, f).await;
        *sent = n;
    }
    ok
}

/// Closes the socket with a gateway close code.
async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let _ = socket.send(Message::Close(Some(axum::extract::ws::CloseFrame { code, reason: reason.into() }))).await;
}

async fn serve(mut socket: WebSocket, state: Arc<State>, voice: Arc<VoiceServer>) {
    let hello = json!({ "op": 10, "d": { "heartbeat_interval": state.config.heartbeat_interval_ms } }).to_string();
    if !send(&mut socket, hello).await {
        return;
    }
    let mut dispatched = state.sessions.dispatched.subscribe();
    let mut drop_all = state.sessions.drop_all.subscribe();
    let mut at = Attached { session: None, shard: 0, sent: 0 };
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
                    close(&mut socket, 4008, "Rate limited.").await;
                    break;
                }
                let Ok(frame) = serde_json::from_str::<Value>(&text) else {
                    let _ = socket.send(Message::Close(None)).await;
                    break;
                };
                if !command(&mut socket, &state, &voice, &frame, &mut at).await {
                    break;
                }
            }
            _ = dispatched.recv() => {
                if let Some(sid) = &at.session {
                    let frames = state.sessions.frames_after(sid, at.sent);
                    if !send_all(&mut socket, frames, &mut at.sent).await { break; }
                }
            }
            _ = drop_all.recv() => {
                // A cut, not a goodbye: no close frame, so the client resumes.
                break;
            }
        }
    }
    if at.session.is_some() {
        state.sessions.set_attached(at.shard, -1);
    }
}

/// One command from the client, by its op; false when the connection ends.
async fn command(socket: &mut WebSocket, state: &State, voice: &VoiceServer, frame: &Value, at: &mut Attached) -> bool {
    match frame["op"].as_u64() {
        Some(1) => send(socket, json!({ "op": 11 }).to_string()).await,
        Some(2) => identify(socket, state, voice, &frame["d"], at).await,
        Some(4) => {
            update_voice_state(state, voice, &frame["d"], at);
            true
        }
        Some(6) => resume(socket, state, &frame["d"], at).await,
        _ => true,
    }
}

/// Identify (op 2): refused with 4004 (token), 4014 (Message Content while the portal's switch
/// is off) or 4010 (shard); else READY, then the GUILD_CREATEs that follow it in the session's
/// log and anything dispatched since.
async fn identify(socket: &mut WebSocket, state: &State, voice: &VoiceServer, d: &Value, at: &mut Attached) -> bool {
    if !token_ok(state, d["token"].as_str().unwrap_or_default()) {
        state.sessions.refuse_identify();
        close(socket, 4004, "Authentication failed.").await;
        return false;
    }
    // Message Content is privileged: asked for while the application's switch
    // in the portal is off, Discord closes with 4014.
    if d["intents"].as_u64().unwrap_or(0) & intent::MESSAGE_CONTENT != 0 && !state.message_content_intent() {
        state.sessions.refuse_identify();
        close(socket, 4014, "Disallowed intent(s).").await;
        return false;
    }
    // `shard: [id, total]`; a total other than ours is refused as Discord does (4010).
    let asked = &d["shard"];
    let (id, total) = (asked[0].as_u64().unwrap_or(0) as u32, asked[1].as_u64().unwrap_or(1) as u32);
    if total != state.config.shards || id >= total {
        close(socket, 4010, "Invalid shard.").await;
        return false;
    }
    if at.session.is_some() {
        state.sessions.set_attached(at.shard, -1);
    }
    at.shard = id;
    let voice_states = |guild| guild_voice_states(state, voice, guild);
    let (id, ready) = state.identify(at.shard, d["intents"].as_u64().unwrap_or(0), &voice_states);
    if !send(socket, ready).await {
        return false;
    }
    at.sent = 1;
    // The GUILD_CREATEs that follow READY in the session's log, and anything
    // dispatched since.
    let frames = state.sessions.frames_after(&id, at.sent);
    if !send_all(socket, frames, &mut at.sent).await {
        return false;
    }
    at.session = Some(id);
    state.sessions.set_attached(at.shard, 1);
    true
}

/// Update Voice State (op 4): join, move or leave a voice channel.
fn update_voice_state(state: &State, voice: &VoiceServer, d: &Value, at: &Attached) {
    let id = |v: &Value| v.as_str().and_then(|s| s.parse::<u64>().ok()).or_else(|| v.as_u64());
    // Discord ignores a join it would refuse: a guild the bot is not in, or a
    // channel it may not connect to.
    let channel = id(&d["channel_id"]);
    let allowed =
        |guild| state.bot_in_guild(guild) && channel.is_none_or(|c| state.bot_permissions(c).is_some_and(|p| p & permission::CONNECT != 0));
    if at.session.is_some()
        && let Some(guild) = id(&d["guild_id"])
        && allowed(guild)
    {
        let _ = bot_voice(state, voice, guild, channel);
    }
}

/// Resume (op 6): the session's missed dispatches replayed, or Invalid Session (op 9).
async fn resume(socket: &mut WebSocket, state: &State, d: &Value, at: &mut Attached) -> bool {
    let sid = d["session_id"].as_str().unwrap_or_default().to_owned();
    let seq = d["seq"].as_u64().unwrap_or(0);
    match (token_ok(state, d["token"].as_str().unwrap_or_default()), state.sessions.resume(&sid, seq)) {
        (true, Some(frames)) => {
            if !send_all(socket, frames, &mut at.sent).await {
                return false;
            }
            if at.session.is_some() {
                state.sessions.set_attached(at.shard, -1);
            }
            at.shard = state.sessions.session_shard(&sid).unwrap_or(0);
            at.session = Some(sid);
            state.sessions.set_attached(at.shard, 1);
            true
        }
        _ => send(socket, json!({ "op": 9, "d": false }).to_string()).await,
    }
}
