//! Reading a request's body as Discord takes it: JSON or multipart with files, up to the
//! upload limit, and the embeds a message body carries.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::checks::authorised_in;
use crate::state::shapes::error_json;
use crate::state::{NewEmbed, State, Upload};

/// The largest request body the loopback takes: a message with its files.
pub const MAX_UPLOAD: usize = 50 * 1024 * 1024;

/// The rich embeds of a request body, by the fields the loopback keeps.
pub(super) fn embeds_of(body: &Value) -> Vec<NewEmbed> {
    let field = |e: &Value, k: &str| e[k].as_str().map(str::to_owned);
    body["embeds"]
        .as_array()
        .map(|list| {
            list.iter().map(|e| NewEmbed { title: field(e, "title"), description: field(e, "description"), url: field(e, "url") }).collect()
        })
        .unwrap_or_default()
}

/// Reads a create-message body: JSON, or multipart with `payload_json` and `files[n]` parts.
async fn message_body(state: &Arc<State>, req: Request) -> Result<(Bytes, Vec<Upload>), Response> {
    let multipart = req.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("multipart/form-data"));
    let bad = |what: &str| (StatusCode::BAD_REQUEST, Json(error_json(50035, what))).into_response();
    if !multipart {
        return axum::body::to_bytes(req.into_body(), MAX_UPLOAD).await.map(|b| (b, Vec::new())).map_err(|_| bad("body too large"));
    }
    let mut form = Multipart::from_request(req, state).await.map_err(|_| bad("malformed multipart body"))?;
    let (mut json, mut files) = (Bytes::new(), Vec::new());
    while let Ok(Some(field)) = form.next_field().await {
        let name = field.name().unwrap_or_default().to_owned();
        let filename = field.file_name().unwrap_or("file").to_owned();
        let content_type = field.content_type().unwrap_or("application/octet-stream").to_owned();
        let data = field.bytes().await.map_err(|_| bad("malformed multipart part"))?;
        if name == "payload_json" {
            json = data;
        } else if name.starts_with("files[") {
            files.push((filename, content_type, data.to_vec()));
        }
    }
    Ok((json, files))
}

/// A request with a body into `channel`, as Discord checks it: the token, then the channel's
/// access, then the body (JSON, or multipart with files). With the bot's permissions there.
pub(super) async fn channel_body(state: &Arc<State>, channel: u64, req: Request) -> Result<(u64, Bytes, Vec<Upload>), Response> {
    let perms = authorised_in(state, req.headers(), channel)?;
    let (body, files) = message_body(state, req).await?;
    Ok((perms, body, files))
}
