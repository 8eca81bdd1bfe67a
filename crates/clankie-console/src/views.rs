//! What the console reads from the store: lanes, trails, memory, the persona and owner
//! settings with their versions, voice rooms, figures and pending reminders. Content-free
//! except the shared self, which is the owner's to read and edit, and a room reminder's words.

use axum::Json;
use axum::extract::{Path, Query, State};
use clankie_store::{MemoryStatus, OwnerSettings, Persona, Sharing, Store};
use serde_json::{Value, json};

use crate::diff;
use crate::error::ConsoleError;
use crate::state::Console;

/// Lanes the lanes view lists at most.
const LANES_SHOWN: i64 = 200;

/// `GET /api/lanes`: the most recently touched lanes, newest first.
pub async fn lanes(State(console): State<Console>) -> Result<Json<Vec<clankie_store::LaneView>>, ConsoleError> {
    Ok(Json(console.store().lane_views(LANES_SHOWN).await?))
}

/// One delivery's trail: the trace it is in (when one was exported), every receipt across
/// services in time order, then its outcome. The same rows `clankie trail` prints, one JSON
/// object each. `None` when nothing was recorded.
pub async fn trail(store: &Store, delivery_id: &str, trace_url: Option<&str>) -> Result<Option<Vec<Value>>, clankie_store::StoreError> {
    let receipts = store.receipts_for_delivery(delivery_id).await?;
    let outcome = store.outcome(delivery_id).await?;
    if receipts.is_empty() && outcome.is_none() {
        return Ok(None);
    }
    // The receipts name the trace their spans were in; a takeover's are in the same one.
    let mut traces: Vec<&str> = receipts.iter().filter_map(|r| r.receipt.ids.get("trace").map(String::as_str)).collect();
    traces.dedup();
    let trace_rows: Vec<Value> =
        traces.iter().take(1).map(|id| json!({ "trace_id": id, "trace_url": trace_url.map(|t| t.replace("{trace_id}", id)) })).collect();
    let lanes: Vec<String> = receipts.iter().map(|r| r.receipt.lane.clone()).collect();
    // How the reply ended at Discord: a refused post is the reply's failure, named by its
    // codes, even though the turn itself replied.
    let refused = receipts.iter().find(|r| r.receipt.kind == "gateway.post_refused").map(|r| r.receipt.codes.clone());
    let posted = receipts.iter().any(|r| r.receipt.kind == "gateway.posted");
    let mut rows: Vec<Value> = receipts
        .into_iter()
        .map(|stored| {
            let r = stored.receipt;
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(r.at_ms.max(0) as u64);
            json!({
                "time": clankie_proto::time::rfc3339(at),
                "at_ms": r.at_ms,
                "service": r.service,
                "kind": r.kind,
                "lane": r.lane,
                "ids": r.ids,
                "counts": r.counts,
                "flags": r.flags,
                "codes": r.codes,
            })
        })
        .collect();
    rows.splice(0..0, trace_rows);
    if let Some(o) = outcome {
        let mut row = json!({ "outcome": o.kind.code(), "failure_code": o.failure_code.map(|c| c.code()), "turn": o.turn_id });
        if let Some(codes) = refused {
            row["reply"] = json!("failed");
            row["reply_codes"] = json!(codes);
        } else if posted {
            row["reply"] = json!("posted");
        }
        // A failed model call: the provider's own words say what to mend (a misspelt model, a
        // bad key), and are shown here, to the operator, and nowhere else.
        if o.kind == clankie_proto::v1::OutcomeKind::Failed
            && let Some(lane) = lanes.iter().find(|l| !l.is_empty())
            && let Some(message) = store.provider_message(lane, delivery_id).await?
        {
            row["provider_message"] = json!(message);
        }
        rows.push(row);
    }
    Ok(Some(rows))
}

/// `GET /api/trail/{delivery_id}`.
pub async fn trail_route(State(console): State<Console>, Path(id): Path<String>) -> Result<Json<Vec<Value>>, ConsoleError> {
    if id.is_empty() || id.len() > 120 || id.chars().any(char::is_control) {
        return Err(ConsoleError::BadRequest("a delivery id is a Discord message id or a voice utterance id".into()));
    }
    trail(console.store(), &id, console.trace_url()).await?.map(Json).ok_or(ConsoleError::NotFound)
}

fn memory_json(m: &clankie_store::Memory) -> Value {
    json!({ "id": m.id, "fact": m.fact, "status": m.status.code(), "proposed_in": m.proposed_in, "proposed_at_ms": m.proposed_at_ms })
}

/// `GET /api/memory`: proposals waiting for a decision, and what is approved.
pub async fn memory(State(console): State<Console>) -> Result<Json<Value>, ConsoleError> {
    let store = console.store();
    let proposed = store.memories(MemoryStatus::Proposed, 200).await?;
    let approved = store.memories(MemoryStatus::Approved, 200).await?;
    Ok(Json(json!({
        "proposed": proposed.iter().map(memory_json).collect::<Vec<_>>(),
        "approved": approved.iter().map(memory_json).collect::<Vec<_>>(),
    })))
}

async fn decide(console: &Console, id: i64, to: MemoryStatus) -> Result<Json<Value>, ConsoleError> {
    if console.store().decide_memory(id, MemoryStatus::Proposed, to).await? {
        tracing::info!(memory = id, decision = to.code(), "memory proposal decided in the console");
        Ok(Json(json!({ "id": id, "status": to.code() })))
    } else {
        Err(ConsoleError::NotFound)
    }
}

/// `POST /api/memory/{id}/approve`: the fact enters every thread's next prompt.
pub async fn approve(State(console): State<Console>, Path(id): Path<i64>) -> Result<Json<Value>, ConsoleError> {
    decide(&console, id, MemoryStatus::Approved).await
}

/// `POST /api/memory/{id}/reject`.
pub async fn reject(State(console): State<Console>, Path(id): Path<i64>) -> Result<Json<Value>, ConsoleError> {
    decide(&console, id, MemoryStatus::Rejected).await
}

/// `POST /api/people/{id}/forget`: the person's words leave every stored session, history
/// block, the voice ring, memory, experiences and the streams; the answer counts what went. A lane a live
/// run holds is waited for a while; `lanes_busy` says how many were not.
pub async fn forget_user(State(console): State<Console>, Path(id): Path<u64>) -> Result<Json<Value>, ConsoleError> {
    let f = clankie_self::rewrite::forget_user(console.store(), id, std::time::Duration::from_secs(20), |_| {}).await?;
    let erased = clankie_self::rewrite::erase_from_streams(console.store(), console.bus(), id, &f).await?;
    tracing::info!(
        lanes = f.lanes,
        messages = f.messages,
        lanes_busy = f.lanes_busy,
        erased = erased.total(),
        "a person forgotten in the console"
    );
    Ok(Json(json!({
        "lanes": f.lanes,
        "messages": f.messages,
        "blocks": f.blocks,
        "answers": f.answers,
        "answers_kept": f.answers_kept,
        "summaries": f.summaries,
        "ring_lines": f.ring_lines,
        "memories": f.memories,
        "experiences": f.experiences,
        "lanes_busy": f.lanes_busy,
        "bus_events_erased": erased.total(),
    })))
}

/// The current version, the stored versions (newest first) and what the last edit changed.
async fn versioned(store: &Store, what: &str, current: Value, version: i64) -> Result<Json<Value>, ConsoleError> {
    let versions = store.self_versions(what, 20).await?;
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let last_change = match versions.as_slice() {
        [newest, previous, ..] => diff::lines(&pretty(&previous.body), &pretty(&newest.body)),
        [only] => diff::lines("", &pretty(&only.body)),
        [] => Vec::new(),
    };
    Ok(Json(json!({
        "current": current,
        "version": version,
        "versions": versions.iter().map(|v| json!({ "version": v.version, "edited_at_ms": v.edited_at_ms })).collect::<Vec<_>>(),
        "last_change": last_change,
    })))
}

/// The persona as the console edits it.
#[derive(serde::Deserialize, serde::Serialize)]
pub struct PersonaEdit {
    #[serde(default)]
    name: String,
    #[serde(default)]
    aliases: Vec<String>,
    #[serde(default)]
    character_sheet: String,
    #[serde(default)]
    speaking_style: String,
}

/// `GET /api/persona`.
pub async fn persona(State(console): State<Console>) -> Result<Json<Value>, ConsoleError> {
    let store = console.store();
    let p = store.persona().await?;
    let current = json!({ "name": p.name, "aliases": p.aliases, "character_sheet": p.character_sheet, "speaking_style": p.speaking_style });
    versioned(store, "persona", current, p.version).await
}

/// `PUT /api/persona`: replaces the persona; every thread's next turn speaks as it.
pub async fn set_persona(State(console): State<Console>, Json(edit): Json<PersonaEdit>) -> Result<Json<Value>, ConsoleError> {
    if edit.name.chars().count() > 80 || edit.character_sheet.len() > 16 * 1024 || edit.speaking_style.len() > 4 * 1024 {
        return Err(ConsoleError::BadRequest("the persona is too long (name 80 characters, sheet 16 KiB, style 4 KiB)".into()));
    }
    let p = Persona {
        name: edit.name.trim().to_owned(),
        aliases: edit.aliases.iter().map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect(),
        character_sheet: edit.character_sheet,
        speaking_style: edit.speaking_style,
        version: 0,
    };
    let version = console.store().set_persona(&p).await?;
    tracing::info!(version, "persona edited in the console");
    persona(State(console)).await
}

/// The owner settings as the console edits them.
#[derive(serde::Deserialize)]
pub struct SettingsEdit {
    owner_id: Option<u64>,
    #[serde(default)]
    operators: Vec<u64>,
    #[serde(default)]
    grants: Vec<u64>,
    #[serde(default)]
    guilds: Vec<u64>,
    #[serde(default)]
    channels: Vec<u64>,
    #[serde(default)]
    trusted_dms: Vec<u64>,
    #[serde(default)]
    trusted_rooms: Vec<u64>,
    #[serde(default)]
    sharing: Option<String>,
}

fn settings_json(s: &OwnerSettings) -> Value {
    json!({
        "owner_id": s.owner_id, "operators": s.operators, "grants": s.grants, "guilds": s.guilds, "channels": s.channels,
        "trusted_dms": s.trusted_dms, "trusted_rooms": s.trusted_rooms, "sharing": s.sharing.code(),
    })
}

/// `GET /api/settings`.
pub async fn settings(State(console): State<Console>) -> Result<Json<Value>, ConsoleError> {
    let store = console.store();
    let s = store.owner_settings().await?;
    versioned(store, "settings", settings_json(&s), s.version).await
}

/// `PUT /api/settings`: replaces the owner settings.
pub async fn set_settings(State(console): State<Console>, Json(edit): Json<SettingsEdit>) -> Result<Json<Value>, ConsoleError> {
    let sharing = match edit.sharing.as_deref() {
        None => Sharing::Guild,
        Some(code) => {
            Sharing::parse(code).ok_or_else(|| ConsoleError::BadRequest(format!("sharing is `guild` or `none`, not {code:?}")))?
        }
    };
    let s = OwnerSettings {
        owner_id: edit.owner_id,
        operators: edit.operators,
        grants: edit.grants,
        guilds: edit.guilds,
        channels: edit.channels,
        trusted_dms: edit.trusted_dms,
        trusted_rooms: edit.trusted_rooms,
        sharing,
        version: 0,
    };
    let version = console.store().set_owner_settings(&s).await?;
    tracing::info!(version, "owner settings edited in the console");
    settings(State(console)).await
}

/// `GET /api/voice`: each voice room's keeper and lease, who is in it, its call's end-to-end
/// encryption (DAVE epoch and privacy code) and its newest floor decisions.
pub async fn voice(State(console): State<Console>) -> Result<Json<Vec<Value>>, ConsoleError> {
    let leases = console.store().voice_room_views().await?;
    let mut rooms = console.voice().rooms();
    for lease in &leases {
        let key = lease.room.split_once(':').and_then(|(g, c)| Some((g.parse().ok()?, c.parse().ok()?)));
        if let Some(key) = key {
            rooms.entry(key).or_default();
        }
    }
    let out = rooms
        .into_iter()
        .map(|((guild, channel), (members, decisions))| {
            let lease = leases.iter().find(|l| l.room == format!("{guild}:{channel}"));
            json!({
                "guild": guild,
                "channel": channel,
                "keeper": lease.and_then(|l| l.keeper.clone()),
                "epoch": lease.map(|l| l.epoch),
                "live": lease.is_some_and(|l| l.live),
                "him_present": members.iter().any(|m| m.is_him),
                "dave": console.voice().dave((guild, channel)),
                "members": members.iter().map(|m| json!({ "user": m.user_id, "name": m.display_name, "is_him": m.is_him })).collect::<Vec<_>>(),
                "decisions": decisions.iter().map(|d| json!({
                    "delivery_id": d.delivery_id,
                    "author": d.author_id,
                    "verdict": clankie_proto::v1::FloorVerdict::try_from(d.verdict)
                        .map(|v| v.as_str_name().trim_start_matches("FLOOR_VERDICT_").to_lowercase())
                        .unwrap_or_else(|_| "unknown".into()),
                    "reason": d.reason,
                    "at_ms": d.decided_at_ms,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(Json(out))
}

/// A reminder as the console lists it. Its words only where the room could read them anyway: a
/// DM's or a direct reminder's words are the asker's alone, even from the owner.
fn reminder_json(r: &clankie_store::StoredReminder) -> Value {
    let in_a_room = !r.direct && r.lane.parse::<clankie_proto::LaneKey>().is_ok_and(|l| !matches!(l, clankie_proto::LaneKey::Dm { .. }));
    json!({
        // Snowflakes pass 2^53, which a page's numbers cannot hold.
        "reminder_id": r.reminder_id.to_string(),
        "lane": r.lane,
        "asker_id": r.asker_id.to_string(),
        "due_at_ms": r.due_at_ms,
        "cron": r.cron,
        "time_zone": r.time_zone,
        "direct": r.direct,
        "fired": r.fired,
        "created_at_ms": r.created_at_ms,
        "text": in_a_room.then_some(r.text.as_str()),
    })
}

/// `GET /api/reminders`: everyone's pending reminders, soonest first, check-ins last.
pub async fn reminders(State(console): State<Console>) -> Result<Json<Value>, ConsoleError> {
    let pending = console.store().pending_reminders(None).await?;
    Ok(Json(json!({ "reminders": pending.iter().map(reminder_json).collect::<Vec<_>>(), "at_ms": clankie_bus::now_ms() })))
}

/// The figures' query: how many hours back.
#[derive(serde::Deserialize)]
pub struct FiguresQuery {
    hours: Option<i32>,
}

/// `GET /api/figures?hours=`: turns, outcomes by kind and tokens per hour (24 by default, at most a week).
/// The settings the console runs with and where each came from; secrets masked.
pub async fn config(State(console): State<Console>) -> Json<Vec<Value>> {
    Json(console.in_effect().iter().map(|e| json!({ "name": e.name, "value": e.value, "origin": e.origin.to_string() })).collect())
}

pub async fn figures(
    State(console): State<Console>,
    Query(q): Query<FiguresQuery>,
) -> Result<Json<Vec<clankie_store::HourFigures>>, ConsoleError> {
    let hours = q.hours.unwrap_or(24).clamp(1, 168);
    Ok(Json(console.store().hourly_figures(hours).await?))
}
