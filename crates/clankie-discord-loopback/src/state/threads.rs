//! Threads as Discord keeps them: channels under a text, announcement or forum channel, with an
//! owner, members, an archived state and (a forum post's) tags; started from a message (sharing
//! its id) or without one. Plain data; `threading` changes them and sends the events.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// ANNOUNCEMENT_THREAD: a thread under an announcement channel.
pub const ANNOUNCEMENT_THREAD: u8 = 10;
/// PUBLIC_THREAD: seen by everyone who sees its parent (a forum post is one).
pub const PUBLIC_THREAD: u8 = 11;
/// PRIVATE_THREAD: seen only by its members and those who may manage threads.
pub const PRIVATE_THREAD: u8 = 12;

/// One thread as it stands.
#[derive(Debug, Clone, Serialize)]
pub struct Thread {
    pub id: u64,
    pub parent: u64,
    pub guild: u64,
    /// Its channel type: 10, 11 or 12.
    pub kind: u8,
    pub name: String,
    /// Who started it.
    pub owner: u64,
    pub archived: bool,
    pub locked: bool,
    /// When it was last archived or unarchived (its creation at first).
    pub archive_ms: i64,
    pub created_ms: i64,
    /// A forum post's tags (ids of the forum's `available_tags`); `None` outside a forum.
    pub applied_tags: Option<Vec<u64>>,
    /// Its members with when each joined, in the order they joined.
    pub members: Vec<(u64, i64)>,
    pub message_count: u32,
    pub last_message_id: Option<u64>,
}

impl Thread {
    /// When `user` joined it, if a member.
    pub fn joined(&self, user: u64) -> Option<i64> {
        self.members.iter().find(|(u, _)| *u == user).map(|(_, at)| *at)
    }

    pub(crate) fn join(&mut self, user: u64, at: i64) -> bool {
        if self.joined(user).is_some() {
            return false;
        }
        self.members.push((user, at));
        true
    }
}

/// Why a thread could not be started, or a thread action taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ThreadError {
    /// No such channel.
    #[error("unknown channel {0}")]
    UnknownChannel(u64),
    /// A DM, a voice channel or a thread; or a forum, which takes posts.
    #[error("channel {0} holds no threads of this kind (a DM, a voice channel, a thread, or a forum without a post)")]
    NoThreadsHere(u64),
    /// A forum post into a channel that is not a forum.
    #[error("channel {0} is not a forum")]
    NotAForum(u64),
    /// No such message in the parent channel.
    #[error("no message {0} in that channel")]
    UnknownMessage(u64),
    /// The message already has its thread (Discord's 160004).
    #[error("a thread was already started from message {0}")]
    AlreadyStarted(u64),
    /// Private threads are for text channels only.
    #[error("an announcement channel has no private threads")]
    NoPrivateThreads,
    /// No such thread (never made, or deleted).
    #[error("unknown thread {0}")]
    UnknownThread(u64),
}

/// Every live thread, by id; a deleted one is gone from here.
#[derive(Default)]
pub(crate) struct Keeper(Mutex<BTreeMap<u64, Thread>>);

impl Keeper {
    /// Taken after the state's own lock, never before it, and held only to read or change.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Thread>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How a thread comes to be: who starts it, from which message, of which kind.
pub(crate) struct NewThread<'a> {
    pub parent: u64,
    pub from_message: Option<u64>,
    pub name: &'a str,
    pub private: bool,
    pub owner: u64,
}
