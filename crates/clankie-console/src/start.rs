//! Starting a console: its state built, then its bus followers started, so a console that
//! cannot reach the bus does not start. Apart from the state, since it needs the followers.

use clankie_agent::Agent;
use clankie_bus::Bus;
use clankie_self::SelfSource;
use clankie_store::Store;

use crate::config::ConsoleConfig;
use crate::error::ConsoleError;
use crate::live;
use crate::state::Console;

impl Console {
    /// A console over `store` and `bus`; `agent` answers console chat and `selfhood` assembles its prompt.
    /// Starts the tasks that follow the bus (lane changes, voice members and floor decisions).
    pub async fn start(store: Store, bus: Bus, agent: Agent, selfhood: SelfSource, config: ConsoleConfig) -> Result<Console, ConsoleError> {
        let console = Console::new(store, bus, agent, selfhood, config);
        live::follow(console.clone()).await?;
        Ok(console)
    }

    /// A console from settings with `token`: its own bus and store connections, the configured
    /// model for console chat, and the shared self read from the same store.
    pub async fn from_settings(settings: &clankie_settings::Settings, token: String) -> Result<Console, ConsoleError> {
        let bus = Bus::connect(settings, "console").await?;
        let store = Store::connect(&settings.database_url).await?;
        let agent = Agent::new(clankie_agent::model_from_settings(settings)?, clankie_agent::config_from_settings(settings));
        let selfhood =
            SelfSource::new(store.clone(), Some(bus.clone()), &settings.bot_name, &settings.bot_aliases, settings.exchange_window);
        Console::start(store, bus, agent, selfhood, ConsoleConfig::from_settings(settings, token)).await
    }
}
