//! The console's own settings, read from the process settings. Apart from the crate root so
//! the console's state can take them without importing what wires it.

/// The console's own settings.
#[derive(Clone)]
pub struct ConsoleConfig {
    /// The token every route wants.
    pub token: String,
    /// This replica's name, as lane leases record it.
    pub replica: String,
    /// The console lane's lease TTL.
    pub lease_ttl: std::time::Duration,
    /// The settings the console runs with, secrets masked, for its Config view.
    pub in_effect: Vec<clankie_settings::Effective>,
    /// The trace viewer's page for one trace (`CLANKIE_TRACE_URL`), which the trail links to.
    pub trace_url: Option<String>,
    /// The prices the Usage view's bill is reckoned at (`CLANKIE_PRICE_*`).
    pub prices: clankie_store::Prices,
}

impl ConsoleConfig {
    /// The console's configuration from settings, with `token` (the caller decides where it comes from).
    pub fn from_settings(settings: &clankie_settings::Settings, token: String) -> ConsoleConfig {
        ConsoleConfig {
            token,
            replica: format!("console-{}", settings.replica_id),
            lease_ttl: settings.lane_lease_ttl,
            in_effect: settings.sources.effective(Some(clankie_settings::Service::Console)),
            trace_url: settings.trace_url.clone(),
            prices: crate::prices::from_settings(settings),
        }
    }
}
