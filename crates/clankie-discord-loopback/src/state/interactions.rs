//! Interactions as data: the registered command sets, each interaction dispatched with its
//! answer as it stands, and what a user does to make one (run a command, press a button).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long Discord waits for an interaction's first answer.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(3);
/// How long an interaction's token works for follow-ups and edits.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);

/// One interaction as the control API reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InteractionRecord {
    pub id: u64,
    pub token: String,
    pub channel_id: u64,
    pub user_id: u64,
    /// 2 for a command, 3 for a button.
    pub kind: u8,
    /// The callback type of the accepted first answer (4, 5, 6, 7), 0 while unanswered.
    pub answered_with: u8,
    /// Milliseconds from dispatch to the accepted first answer.
    pub answered_after_ms: i64,
    /// First answers refused: too late, or after one was accepted.
    pub refused_answers: u32,
    /// The answer as it stands: the callback's data, then any edit of the original.
    pub content: String,
    pub ephemeral: bool,
    pub components: Vec<Value>,
    /// Follow-up messages, in order.
    pub followups: Vec<Value>,
    /// The message the answer made (types 4 and 5), or for a button the message it is on.
    pub message_id: Option<u64>,
}

pub(crate) struct Open {
    pub record: InteractionRecord,
    pub created: Instant,
}

#[derive(Default)]
pub(crate) struct Kept {
    /// The registered command sets: `None` is the global one.
    pub commands: BTreeMap<Option<u64>, Vec<Value>>,
    pub overwrites: u64,
    pub open: HashMap<u64, Open>,
}

/// The loopback's interactions.
#[derive(Default)]
pub struct Interactions(Mutex<Kept>);

impl Interactions {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many bulk overwrites were made, and the command names registered per scope.
    pub fn registered(&self) -> (u64, BTreeMap<Option<u64>, Vec<String>>) {
        let k = self.lock();
        let names = k
            .commands
            .iter()
            .map(|(scope, set)| (*scope, set.iter().filter_map(|c| c["name"].as_str().map(str::to_owned)).collect()))
            .collect();
        (k.overwrites, names)
    }

    /// The interaction as it stands.
    pub fn record(&self, id: u64) -> Option<InteractionRecord> {
        self.lock().open.get(&id).map(|o| o.record.clone())
    }
}

/// A slash command a user runs (`POST /control/interactions/command`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunCommand {
    #[serde(deserialize_with = "crate::state::messages::flexible_id::one")]
    pub channel_id: u64,
    pub author: String,
    /// The subcommand of `/clankie`: `status`, `memory`, `voice join`, `voice leave`, `quiet`, `usage`,
    /// `remind`, `reminders`, `timezone`, `forget-me`.
    pub subcommand: String,
    /// Its options, by name: strings, integers and booleans.
    #[serde(default)]
    pub options: BTreeMap<String, Value>,
}

/// A button a user presses (`POST /control/interactions/button`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PressButton {
    #[serde(deserialize_with = "crate::state::messages::flexible_id::one")]
    pub message_id: u64,
    pub custom_id: String,
    pub author: String,
}

/// Why a control request could not become an interaction.
#[derive(Debug, thiserror::Error)]
pub enum InteractionError {
    #[error("unknown channel")]
    UnknownChannel,
    #[error("no such message")]
    UnknownMessage,
    #[error("the message has no button with that custom id")]
    UnknownButton,
}

/// The interaction a webhook token belongs to, while its token lives.
pub(crate) fn by_token<'a>(k: &'a mut Kept, token: &str) -> Option<&'a mut Open> {
    k.open.values_mut().find(|o| o.record.token == token && o.created.elapsed() < TOKEN_LIFETIME)
}
