//! Tells the processes that have no store (gateways, voice floors) the audience facts the store
//! holds: who was forgotten, and the owner's admitted channels (`clankie_audience`). Every
//! replica tells; the bucket keeps one value a key, so telling twice costs nothing.

use std::collections::HashMap;
use std::time::Duration;

use clankie_bus::Bus;
use clankie_store::Store;

/// How often the store is read again for a changed list.
pub const AUDIENCE_EVERY: Duration = Duration::from_secs(2);
/// How many rounds before every fact is told again, in case the bucket was lost with its server.
const RETELL_AFTER: u32 = 60;

/// Reads the store and tells the bucket what changed, at start and every [`AUDIENCE_EVERY`].
pub(crate) async fn keep_audience_told(store: Store, bus: Bus) {
    let mut told_forgotten: HashMap<u64, i64> = HashMap::new();
    let mut told_channels: Option<Vec<u64>> = None;
    let mut rounds = 0u32;
    loop {
        if rounds == RETELL_AFTER {
            (told_forgotten, told_channels, rounds) = (HashMap::new(), None, 0);
        }
        rounds += 1;
        match store.owner_settings().await {
            Ok(settings) if told_channels.as_ref() != Some(&settings.channels) => {
                match bus.record_admitted_channels(&settings.channels).await {
                    Ok(()) => told_channels = Some(settings.channels),
                    Err(e) => tracing::warn!(error = %e, "the admitted channels could not be told; trying again"),
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "the owner settings could not be read for the audience bucket"),
        }
        match store.forgotten_users().await {
            Ok(people) => {
                for (user, at_ms) in people {
                    if told_forgotten.get(&user) == Some(&at_ms) {
                        continue;
                    }
                    match bus.record_forgotten(user, at_ms).await {
                        Ok(()) => {
                            told_forgotten.insert(user, at_ms);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "a forget could not be told; trying again");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "the forgotten could not be read for the audience bucket"),
        }
        tokio::time::sleep(AUDIENCE_EVERY).await;
    }
}
