//! The gateway WebSocket, v10, JSON encoding: Hello, Identify → READY (shards and the
//! identify spacing), heartbeats (each logged), Resume with replay, the command cap (4008), and
//! the bot's voice state updates (op 4), which the voice layer answers. A session's frames go
//! out in turns, so a heartbeat is never stuck behind a backlog; a connection that falls further
//! behind than its session keeps is cut, never skipped ahead.

use std::sync::Arc;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRef, State as AxState};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};

use crate::state::State;
use crate::state::limits::CommandWindow;
use crate::state::messages::now_ms;
use crate::state::permission;
use crate::state::sessions::{HeartbeatRecord, Next, intent};
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

/// Frames a connection sends from its session's log before it reads again: a long backlog goes
/// out in chunks, so a heartbeat that arrives meanwhile is read and acked promptly.
const FRAMES_PER_TURN: usize = 64;

/// Where one connection stands: its number, the session it identified or resumed as (none
/// yet), the shard it holds, how far along the session's log it has been sent, and when it
/// last heard a heartbeat (its Hello at first).
struct Attached {
    connection: u64,
    session: Option<String>,
    shard: u32,
    sent: u64,
    last_beat_ms: i64,
}

/// Closes the socket with a gateway close code.
async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let _ = socket.send(Message::Close(Some(axum::extract::ws::CloseFrame { code, reason: reason.into() }))).await;
}

/// What one turn of sending from the session's log came to.
enum Sent {
    /// Sent; `true` when more frames wait.
    Ok(bool),
    /// The socket failed.
    Failed,
    /// The log had moved past what the connection had yet to send: it is cut.
    Behind,
}

/// Sends the next frames of the connection's session, at most [`FRAMES_PER_TURN`], in order.
async fn send_turn(socket: &mut WebSocket, state: &State, at: &mut Attached) -> Sent {
    let Some(sid) = &at.session else { return Sent::Ok(false) };
    match state.sessions.next_frames(sid, at.sent, FRAMES_PER_TURN) {
        Next::Behind => Sent::Behind,
        Next::Frames { frames, more } => {
            let from = at.sent;
            let mut ok = true;
            for (n, frame) in frames {
                ok = send(socket, frame).await;
                if !ok {
                    break;
                }
                at.sent = n;
            }
            // The log's sequence numbers run without a gap, so how far it moved is how many went.
            state.sessions.sent(at.sent - from);
            state.sessions.live_at(sid, Some(at.sent));
            if ok { Sent::Ok(more) } else { Sent::Failed }
        }
    }
}

async fn serve(mut socket: WebSocket, state: Arc<State>, voice: Arc<VoiceServer>) {
    let hello = json!({ "op": 10, "d": { "heartbeat_interval": state.config.heartbeat_interval_ms } }).to_string();
    if !send(&mut socket, hello).await {
        return;
    }
    let connection = state.sessions.connect();
    let mut dispatched = state.sessions.dispatched.subscribe();
    let mut drop_all = state.sessions.drop_all.subscribe();
    let mut at = Attached { connection, session: None, shard: 0, sent: 0, last_beat_ms: now_ms() };
    let mut commands = CommandWindow::new(&state.config.limits);
    // Frames wait in the session's log: send the next turn of them without another ring.
    let mut pending = false;
    loop {
        tokio::select! {
            // Cuts first, then what the client sent, so a heartbeat is never queued behind dispatches.
            biased;
            _ = drop_all.recv() => {
                // A cut, not a goodbye: no close frame, so the client resumes.
                break;
            }
            incoming = socket.recv() => {
                let Some(Ok(message)) = incoming else { break };
                let text = match message {
                    Message::Text(t) => t.to_string(),
                    Message::Close(_) => break,
                    _ => continue,
                };
                if !commands.take() {
                    if serde_json::from_str::<Value>(&text).is_ok_and(|f| f["op"] == 1) {
                        heartbeat(&state, &mut at, now_ms(), false);
                    }
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
                pending = at.session.is_some();
            }
            _ = std::future::ready(()), if pending => {
                match send_turn(&mut socket, &state, &mut at).await {
                    Sent::Ok(more) => {
                        pending = more;
                        if more {
                            // Let the runtime look at the socket first: a heartbeat that came
                            // meanwhile is only seen readable once its I/O driver has run.
                            tokio::task::yield_now().await;
                        }
                    }
                    Sent::Failed => break,
                    Sent::Behind => {
                        // Discord never skips within a live connection: cut it, without a close
                        // frame, so the client resumes (and is told its session is gone).
                        state.sessions.cut_behind();
                        break;
                    }
                }
            }
            _ = dispatched.recv() => {
                // A ring (or a lag of them): frames wait in the log.
                pending = at.session.is_some();
            }
        }
    }
    if let Some(sid) = &at.session {
        state.sessions.live_at(sid, None);
        state.sessions.set_attached(at.shard, -1);
    }
}

/// Records a heartbeat this connection's loop read at `read_ms`, `acked` when its ACK went out.
fn heartbeat(state: &State, at: &mut Attached, read_ms: i64, acked: bool) {
    let since_last_ms = read_ms - at.last_beat_ms;
    at.last_beat_ms = read_ms;
    let interval_ms = state.config.heartbeat_interval_ms;
    state.sessions.heartbeat(HeartbeatRecord { connection: at.connection, at_ms: read_ms, since_last_ms, interval_ms, acked });
}

/// One command from the client, by its op; false when the connection ends.
async fn command(socket: &mut WebSocket, state: &State, voice: &VoiceServer, frame: &Value, at: &mut Attached) -> bool {
    match frame["op"].as_u64() {
        Some(1) => {
            // When it was read is what counts, not when the ACK went out.
            let read = now_ms();
            let acked = send(socket, json!({ "op": 11 }).to_string()).await;
            heartbeat(state, at, read, acked);
            acked
        }
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
/// is off) or 4010 (shard); else READY. The GUILD_CREATEs that follow it in the session's log
/// and anything dispatched since go out from the serve loop, in turns.
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
    state.sessions.sent(1);
    at.sent = 1;
    state.sessions.live_at(&id, Some(1));
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

/// Resume (op 6): the session's missed dispatches replayed (from the serve loop, in turns,
/// RESUMED after them), or Invalid Session (op 9).
async fn resume(socket: &mut WebSocket, state: &State, d: &Value, at: &mut Attached) -> bool {
    let sid = d["session_id"].as_str().unwrap_or_default().to_owned();
    let seq = d["seq"].as_u64().unwrap_or(0);
    let token = token_ok(state, d["token"].as_str().unwrap_or_default());
    match token.then(|| state.sessions.resume(&sid, seq)).flatten() {
        Some(from) => {
            at.sent = from;
            if at.session.is_some() {
                state.sessions.set_attached(at.shard, -1);
            }
            at.shard = state.sessions.session_shard(&sid).unwrap_or(0);
            state.sessions.live_at(&sid, Some(from));
            at.session = Some(sid);
            state.sessions.set_attached(at.shard, 1);
            true
        }
        None => send(socket, json!({ "op": 9, "d": false }).to_string()).await,
    }
}
