//! The token guard in front of every route. The token comes as `Authorization: Bearer <token>`
//! or, for the page itself and its event streams (which a browser cannot give headers), as
//! `?token=`. Anything else is 401 with no data.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::state::Console;

/// Passes a request on only when it carries the console's token.
pub async fn require_token(State(console): State<Console>, request: Request, next: Next) -> Response {
    let expected = console.token().as_bytes();
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let query = request.uri().query().and_then(token_in_query);
    let given = bearer.or(query);
    match given {
        Some(t) if same(t.as_bytes(), expected) => next.run(request).await,
        _ => (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "a console token is required\n").into_response(),
    }
}

/// The `token` query parameter, percent-decoded.
fn token_in_query(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| pair.strip_prefix("token=")).map(percent_decode)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A new random token (128 bits, hex), for a console started without one configured.
pub fn fresh_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares in time independent of where the first difference lies.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_the_query_and_decoded() {
        assert_eq!(token_in_query("subject=a.b&token=s%2Fx+y").as_deref(), Some("s/x y"));
        assert_eq!(token_in_query("subject=a.b"), None);
        assert_eq!(token_in_query("token=%zz%").as_deref(), Some("%zz%"));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }
}
