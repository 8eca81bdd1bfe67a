//! How the floor behaves, read from settings: its own module so the service, the rooms and the
//! runs all read one configuration without going through the crate root.

use std::time::Duration;

use clankie_settings::Settings;

use crate::floor::FloorRules;

/// How the floor behaves.
#[derive(Debug, Clone)]
pub struct VoiceConfig {
    pub bot_name: String,
    pub rules: FloorRules,
    /// A delivery seen again inside this window opens no second response.
    pub dedup_window: Duration,
    pub ring_size: usize,
    pub ask_timeout: Duration,
}

impl VoiceConfig {
    /// The floor's configuration from settings.
    pub fn from_settings(settings: &Settings) -> VoiceConfig {
        let mut names = vec![settings.bot_name.clone()];
        names.extend(settings.bot_aliases.iter().cloned());
        VoiceConfig {
            bot_name: settings.bot_name.clone(),
            rules: FloorRules { names, continuation: settings.floor_continuation, offer_interval: settings.floor_offer_interval },
            dedup_window: Duration::from_secs(600),
            ring_size: 50,
            ask_timeout: Duration::from_secs(120),
        }
    }
}
