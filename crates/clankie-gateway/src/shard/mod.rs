//! Ingest: this replica's share of the shards, and each shard's event loop.
//!
//! - [`share`]: the shards this replica claims, renews and hands back, toward its fair share.
//! - [`saver`]: each shard's session, saved as its messages are stored, so a resume replays
//!   nothing stored and loses nothing unstored.
//! - [`socket`]: one shard's connection: connected, read, and closed for resume.
//! - [`dispatch`]: the events a shard read, handed on in order off its loop.
//! - [`ingest`]: messages, edits and deletions normalised, routed and published as ingress.

mod dispatch;
mod ingest;
mod saver;
mod share;
mod socket;
