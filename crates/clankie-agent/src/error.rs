//! Why the runtime could not go on: the one error its parts share.

use crate::provider::ModelError;

/// Why the runtime could not go on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Store(#[from] clankie_store::StoreError),
    #[error("session: {0}")]
    Session(String),
    #[error(transparent)]
    Model(#[from] ModelError),
}
