//! Whose words an event holds: its author's, and every other author's it carries (quoted,
//! replied-to, linked and forwarded messages, its thread's starter). What the audience rule
//! (`crate::audience`) and a forget's erase of the streams both read, so they agree on
//! where a person's words are.

use crate::v1;

/// What stands where a forgotten person's words were.
pub const FORGOTTEN_WORDS: &str = "(someone asked to be forgotten: their words are not shown)";
/// The name that stands for a forgotten person.
pub const FORGOTTEN_NAME: &str = "someone forgotten";

/// Every author whose words `ingress` holds other than its own: quoted messages and its
/// thread's starter (his own left out).
pub fn carried_authors(ingress: &v1::Ingress) -> Vec<u64> {
    let starter = ingress.thread.as_ref().and_then(|t| t.starter.as_ref());
    let mut authors: Vec<u64> =
        ingress.quoted.iter().chain(starter).filter(|q| !q.is_him && q.author_id != 0).map(|q| q.author_id).collect();
    authors.sort_unstable();
    authors.dedup();
    authors
}

/// When a quoted message was written: its own time, else its snowflake's.
pub fn written_ms(q: &v1::Quoted) -> i64 {
    if q.at_ms > 0 { q.at_ms } else { crate::time::snowflake_ms(q.message_id) }
}

/// Replaces, in place, the words of every quote in `ingress` (its thread's starter included)
/// for which `forgotten(author, written_ms)` holds with [`FORGOTTEN_WORDS`], no name and no
/// id; his own are never touched. How many it replaced.
pub fn forget_carried(ingress: &mut v1::Ingress, forgotten: impl Fn(u64, i64) -> bool) -> usize {
    let starter = ingress.thread.as_mut().and_then(|t| t.starter.as_mut());
    let mut replaced = 0;
    for q in ingress.quoted.iter_mut().chain(starter) {
        if q.is_him || q.author_id == 0 || !forgotten(q.author_id, written_ms(q)) {
            continue;
        }
        q.text = FORGOTTEN_WORDS.to_owned();
        q.author_name = FORGOTTEN_NAME.to_owned();
        q.author_id = 0;
        q.label.clear();
        replaced += 1;
    }
    replaced
}
