//! The prices a bill is reckoned at, from settings (`CLANKIE_PRICE_*`): read by the console for
//! its Usage view, and by the captain and `clankie usage` for theirs, so all three price alike.

use clankie_store::Prices;

/// The list prices and their label from `settings`.
pub fn from_settings(settings: &clankie_settings::Settings) -> Prices {
    Prices {
        label: settings.price_model.clone(),
        input: settings.price_input,
        output: settings.price_output,
        cache_read: settings.price_cache_read,
        cache_write: settings.price_cache_write,
    }
}
