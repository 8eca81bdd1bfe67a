//! The call's DAVE state (end-to-end encryption) as the body can know it.
//!
//! songbird 0.6.1 keeps its `davey` session to itself, and davey 0.1.5 says what it does at
//! debug level: "Created key package for channel N", "Created pending group for channel N",
//! "Commit processed successfully, … our epoch is E", "Welcomed to group successfully, … our
//! epoch is E", "New Voice Privacy Code: …", "Resetting MLS session". [`observe`] reads those
//! lines (the counting layer in [`crate::drops`] hands them over): a line naming a channel ties
//! the tokio task it ran on (songbird's connect task or its socket task) to that channel, and
//! the lines after it on that task move that channel's [`DaveState`]. davey's trace lines (which
//! carry secrets) are never read: the layer's filter stops at debug.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tokio::sync::watch;

/// The DAVE state of one voice channel's call, from the body's side. No key material.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaveState {
    /// 1 once the call negotiated DAVE (a key package was made); 0 for passthrough.
    pub protocol_version: u16,
    /// The MLS group's epoch he is at (0 before he is in a group).
    pub epoch: u64,
    /// The voice privacy code every member of the call shows, once he is in the group.
    pub privacy_code: Option<String>,
    /// Commits and welcomes he processed.
    pub transitions: u64,
}

#[derive(Default)]
struct Registry {
    tasks: HashMap<tokio::task::Id, u64>,
    channels: HashMap<u64, watch::Sender<DaveState>>,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

fn sender(reg: &mut Registry, channel: u64) -> &watch::Sender<DaveState> {
    reg.channels.entry(channel).or_insert_with(|| watch::channel(DaveState::default()).0)
}

/// The channel's DAVE state now.
pub fn state(channel: u64) -> DaveState {
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    sender(&mut reg, channel).borrow().clone()
}

/// Every change of the channel's DAVE state.
pub fn watch(channel: u64) -> watch::Receiver<DaveState> {
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    sender(&mut reg, channel).subscribe()
}

/// Forgets what is known of a channel's call (a new connection starts from nothing).
pub fn reset(channel: u64) {
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    sender(&mut reg, channel).send_replace(DaveState::default());
}

fn channel_named(message: &str) -> Option<u64> {
    message.rsplit_once("for channel ").and_then(|(_, n)| n.trim().parse().ok())
}

fn epoch_named(message: &str) -> Option<u64> {
    message.rsplit_once("our epoch is ").and_then(|(_, n)| n.trim().parse().ok())
}

/// Reads one davey log line.
pub(crate) fn observe(message: &str) {
    let Some(task) = tokio::task::try_id() else { return };
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(channel) = channel_named(message) {
        if reg.tasks.len() > 256 {
            reg.tasks.clear();
        }
        reg.tasks.insert(task, channel);
        if message.starts_with("Created key package") {
            sender(&mut reg, channel).send_if_modified(|s| {
                let changed = s.protocol_version != 1;
                s.protocol_version = 1;
                changed
            });
        }
        return;
    }
    let Some(channel) = reg.tasks.get(&task).copied() else { return };
    let state = sender(&mut reg, channel);
    if let Some(epoch) = epoch_named(message) {
        state.send_modify(|s| {
            s.protocol_version = 1;
            s.epoch = epoch;
            s.transitions += 1;
        });
    } else if let Some(code) = message.strip_prefix("New Voice Privacy Code: ") {
        let code = code.trim_matches('"').to_owned();
        state.send_modify(|s| s.privacy_code = Some(code));
    } else if message.starts_with("Resetting MLS session") {
        state.send_modify(|s| {
            s.epoch = 0;
            s.privacy_code = None;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dave_state_follows_davey_lines_on_the_task_that_named_the_channel() {
        tokio::spawn(async {
            observe("Created pending group for channel 77");
            observe("Commit processed successfully, our leaf index is 0, our epoch is 3");
            observe("New Voice Privacy Code: \"123456789012345678901234567890\"");
        })
        .await
        .unwrap();
        // Another task's lines name no channel: they move nothing.
        tokio::spawn(async { observe("Commit processed successfully, our leaf index is 1, our epoch is 9") }).await.unwrap();
        let s = state(77);
        assert_eq!((s.protocol_version, s.epoch, s.transitions), (1, 3, 1));
        assert_eq!(s.privacy_code.as_deref(), Some("123456789012345678901234567890"));
    }
}
