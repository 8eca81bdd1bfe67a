//! Server-sent events, as both model wires stream them: a body fed from a channel, and text cut
//! into the pieces a provider streams.

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

/// `text` cut into pieces of `size` characters (at least one), as a stream sends it.
pub(crate) fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size.max(1)).map(|c| c.iter().collect()).collect()
}

/// A server-sent-events answer whose body is what `rx` yields.
pub(crate) fn sse_response(rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(tokio_stream_from(rx)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn tokio_stream_from(mut rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>) -> impl futures::Stream<Item = std::io::Result<Bytes>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
