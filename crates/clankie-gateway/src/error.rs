//! Why a gateway replica stopped: the one error its parts return, kept apart so every part can
//! name it without reaching into the replica's state.

use clankie_bus::BusError;

/// Why the gateway stopped.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("the Discord shard ended: {0}")]
    Shard(String),
}

impl GatewayError {
    /// Whether starting again cannot mend it: the settings ask for what the bus holds otherwise.
    pub fn is_setup_fault(&self) -> bool {
        matches!(self, GatewayError::Bus(BusError::ConsumerFixed { .. } | BusError::Subject(_)))
    }
}
