//! Discord's limits, kept the way Discord documents them, so every test posts into a world as
//! strict as the real one: a global budget per bot token, per-route buckets per top-level
//! resource announced in `X-RateLimit-*` headers on every response, 429s with Discord's body
//! and scope, the invalid-request counter that ends in a temporary ban, and a cap on the
//! commands one gateway connection may send.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::State;
use crate::state::limits::{ARRIVALS_KEPT, CREATES_KEPT, GLOBAL_WINDOW, Limits, Route, Window};
use crate::state::messages::now_ms;

/// The bucket of a REST route, with its limit and window; `None` for what Discord does not
/// limit here (attachments come from the CDN).
fn route_of(limits: &Limits, method: &Method, path: &str) -> Option<(Route, u32, Duration)> {
    let parts: Vec<&str> = path.trim_start_matches("/api/v10/").split('/').collect();
    let five = Duration::from_secs(5);
    let (bucket, resource, limit, window) = match (method, parts.as_slice()) {
        (&Method::POST, ["channels", c, "messages"]) => {
            ("message-create", *c, limits.message_creates_per_5s, Duration::from_millis(limits.message_create_window_ms))
        }
        (&Method::GET, ["channels", c, "messages"]) => ("message-list", *c, 5, Duration::from_secs(1)),
        (&Method::PATCH | &Method::DELETE, ["channels", c, "messages", _]) => ("message-edit", *c, 5, five),
        (&Method::PUT, ["channels", c, "messages", _, "reactions", _, "@me"]) => ("reaction", *c, 1, Duration::from_millis(250)),
        (&Method::POST, ["channels", c, "typing"]) => ("typing", *c, limits.typing_per_5s, five),
        (_, ["gateway", ..] | ["users", "@me"]) => ("bot", "0", 5, five),
        // Not documented; assumed near what Discord announces for them.
        (&Method::GET, ["users", "@me", "guilds"]) => ("guild-list", "0", 5, five),
        (&Method::GET, ["guilds", g, ..]) => ("guild-read", *g, 5, Duration::from_secs(1)),
        (&Method::GET, ["applications", app, "commands"]) => ("commands-read", *app, 5, five),
        (&Method::GET, ["applications", _, "guilds", guild, "commands"]) => ("commands-read", *guild, 5, five),
        // Not documented; assumed at the message bucket's rate.
        (&Method::POST, ["users", "@me", "channels"]) => ("dm-open", "0", 5, five),
        // Registered once per command set; assumed tight, as command writes are.
        (&Method::PUT, ["applications", app, "commands"]) => ("commands-overwrite", *app, 5, Duration::from_secs(20)),
        (&Method::PUT, ["applications", _, "guilds", guild, "commands"]) => ("commands-overwrite", *guild, 5, Duration::from_secs(20)),
        // The interaction endpoints: buckets of their own, outside the global budget.
        (&Method::POST, ["interactions", id, _, "callback"]) => ("interaction-callback", *id, 5, five),
        (_, ["webhooks", _, token, ..]) => {
            let route = Route { bucket: "interaction-webhook", resource: resource_of_token(token) };
            return Some((route, 5, Duration::from_secs(2)));
        }
        _ => return None,
    };
    Some((Route { bucket, resource: resource.parse().ok()? }, limit, window))
}

/// A webhook's top-level resource is its id and token together; the token names it here.
fn resource_of_token(token: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    token.hash(&mut h);
    h.finish()
}

/// Whether `path` is an interaction endpoint: answered with the interaction's token, and not
/// counted toward the global budget (Discord's rule).
fn interaction_endpoint(path: &str) -> bool {
    let rest = path.trim_start_matches("/api/v10/");
    rest.starts_with("interactions/") || rest.starts_with("webhooks/")
}

fn seconds(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

fn limited(scope: &'static str, retry_after: Duration, route: Option<(Route, u32)>) -> Response {
    let global = scope == "global";
    let body = json!({ "message": "You are being rate limited.", "retry_after": (retry_after.as_secs_f64() * 1000.0).ceil() / 1000.0, "global": global });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    insert(headers, "retry-after", &retry_after.as_secs_f64().ceil().max(1.0).to_string());
    insert(headers, "x-ratelimit-scope", scope);
    if global {
        insert(headers, "x-ratelimit-global", "true");
    }
    if let Some((route, limit)) = route {
        announce(headers, route, limit, 0, retry_after);
    }
    response
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// The headers Discord sends on every response of a limited route.
fn announce(headers: &mut HeaderMap, route: Route, limit: u32, remaining: u32, reset_after: Duration) {
    let reset = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default() + reset_after;
    insert(headers, "x-ratelimit-limit", &limit.to_string());
    insert(headers, "x-ratelimit-remaining", &remaining.to_string());
    insert(headers, "x-ratelimit-reset", &seconds(reset));
    insert(headers, "x-ratelimit-reset-after", &seconds(reset_after));
    insert(headers, "x-ratelimit-bucket", route.bucket);
    insert(headers, "x-ratelimit-scope", "user");
}

/// The middleware in front of `/api/v10`: the call counted by its kind, the limits (counted at
/// arrival), the answer held until the REST latency after arrival has passed, then its way back.
pub(crate) async fn enforce(AxState(state): AxState<Arc<State>>, request: Request, next: Next) -> Response {
    let arrived = tokio::time::Instant::now();
    let api = request.uri().path().starts_with("/api/v10/");
    if api {
        state.limits.count_call(call_kind(&request));
    }
    let latency = Duration::from_millis(state.config.limits.answer_latency_ms);
    let response = limit(&state, request, next, latency).await;
    let slow = state.limits.rest_latency();
    if api && !slow.is_zero() {
        tokio::time::sleep_until(arrived + slow).await;
    }
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    response
}

/// A request's route kind: its method and route template under `/api/v10`, ids left as their
/// names (`GET /channels/{channel}/messages/{message}`); the path itself for a route not matched.
fn call_kind(request: &Request) -> String {
    let path = request.extensions().get::<MatchedPath>().map_or(request.uri().path(), MatchedPath::as_str);
    format!("{} {}", request.method(), path.strip_prefix("/api/v10").unwrap_or(path))
}

async fn limit(state: &Arc<State>, request: Request, next: Next, latency: Duration) -> Response {
    let limits = &state.config.limits;
    if !limits.enforce || !request.uri().path().starts_with("/api/v10/") {
        return next.run(request).await;
    }
    let token = request.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    // A request without the bot's token is answered 401 by its route and counted invalid; it
    // spends no bucket of the bot's.
    let bot = token.strip_prefix("Bot ") == Some(state.config.token.as_str());
    let interaction = interaction_endpoint(request.uri().path());
    let route = if bot || interaction { route_of(limits, request.method(), request.uri().path()) } else { None };
    let now = Instant::now();
    let admitted = {
        let mut kept = state.limits.lock();
        if bot && !interaction {
            if kept.arrivals.len() >= ARRIVALS_KEPT {
                kept.arrivals.pop_front();
            }
            kept.arrivals.push_back(now_ms());
        }
        if let Some((Route { bucket: "message-create", resource }, _, _)) = route {
            let creates = kept.creates.entry(resource).or_default();
            if creates.len() >= CREATES_KEPT {
                creates.pop_front();
            }
            creates.push_back(now_ms());
        }
        kept.expire_invalid(now);
        if kept.invalid.len() as u64 >= u64::from(limits.invalid_per_10_min) {
            kept.counts.banned_refusals += 1;
            // Cloudflare's temporary ban: not Discord's JSON, not its headers.
            return (StatusCode::FORBIDDEN, "error code: 1015").into_response();
        }
        let global = if interaction {
            Ok(())
        } else {
            kept.global.entry(token.clone()).or_insert(Window { started: now, used: 0 }).take(limits.global_per_second, GLOBAL_WINDOW, now)
        };
        match (global, route) {
            (Err(wait), _) => {
                kept.counts.rate_limited_global += 1;
                kept.count_invalid(now);
                return limited("global", wait, None);
            }
            (Ok(()), None) => None,
            (Ok(()), Some((route, limit, length))) => {
                let key = (token, route);
                // The client heard the last answer `latency` after it was made and counts that
                // answer's reset from then; this request's answer reaches it `latency` from now.
                if let Some((made, reset_after)) = kept.last_answer.get(&key).copied() {
                    let reset_at_client = made + latency + reset_after;
                    if now <= reset_at_client && reset_at_client < now + latency {
                        kept.counts.resets_in_flight += 1;
                    }
                }
                let window = kept.routes.entry(key.clone()).or_insert(Window { started: now, used: 0 });
                match window.take(limit, length, now) {
                    Ok(()) => {
                        let (reset_after, remaining) = (window.reset_after(length, now), limit - window.used);
                        kept.last_answer.insert(key, (now, reset_after));
                        Some((route, limit, remaining, reset_after))
                    }
                    Err(wait) => {
                        kept.counts.rate_limited_user += 1;
                        kept.count_invalid(now);
                        return limited("user", wait, Some((route, limit)));
                    }
                }
            }
        }
    };
    let mut response = next.run(request).await;
    if matches!(response.status(), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        state.limits.lock().count_invalid(Instant::now());
    }
    if let Some((route, limit, remaining, reset_after)) = admitted {
        announce(response.headers_mut(), route, limit, remaining, reset_after);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::limits::Limits;

    #[test]
    fn routes_are_bucketed_by_their_channel() {
        let l = Limits::default();
        let (a, limit, _) = route_of(&l, &Method::POST, "/api/v10/channels/200/messages").unwrap();
        let (b, _, _) = route_of(&l, &Method::POST, "/api/v10/channels/201/messages").unwrap();
        assert_eq!((a.bucket, a.resource, limit), ("message-create", 200, 5));
        assert_ne!(a, b);
        assert_eq!(route_of(&l, &Method::PUT, "/api/v10/channels/200/messages/7/reactions/%E2%9C%85/@me").unwrap().0.bucket, "reaction");
        assert!(route_of(&l, &Method::GET, "/attachments/1/a.png").is_none());
    }
}
