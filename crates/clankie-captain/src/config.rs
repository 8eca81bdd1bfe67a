use std::collections::HashSet;
use std::time::Duration;

use clankie_egress::EgressGuard;
use clankie_settings::Settings;

/// Bounds on what one delivery or tool can make the captain carry.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Characters of content in a cold lane's history block.
    pub history_chars: usize,
    /// Pictures of one message the model is shown.
    pub attachments_per_message: usize,
    /// Largest picture `share_picture` takes.
    pub picture_bytes: usize,
    /// Admissions one author may have per minute across all lanes; 0 is off.
    pub flood_per_minute: u32,
    /// Reminders one person, and one room, may have pending; 0 is no bound.
    pub reminders_per_person: u32,
    pub reminders_per_room: u32,
    /// How far ahead a reminder may be set.
    pub reminder_horizon: Duration,
}

/// How the captain behaves; every duration is configuration so tests can compress it.
#[derive(Debug, Clone)]
pub struct CaptainConfig {
    /// This replica's name in leases and receipts.
    pub replica: String,
    pub bot_name: String,
    /// Other names he answers to, when the persona names none.
    pub aliases: Vec<String>,
    /// A guild message naming him is admitted (`named`); `CLANKIE_NAMED_ADMISSION`.
    pub named_admission: bool,
    /// How long the experiences this replica records are kept.
    pub experience_ttl: Duration,
    pub lease_ttl: Duration,
    /// The warm sessions' byte budget (`CLANKIE_WARM_CACHE_MIB`).
    pub warm_cache_bytes: usize,
    pub ack_wait: Duration,
    /// Tasks deciding admission side by side; a lane always goes to the same one, so its
    /// deliveries are decided in order.
    pub admitters: usize,
    /// Age at which this replica publishes another's committed, unpublished outbox row.
    pub outbox_relay_after: Duration,
    /// Age at which an unpublished outbox row is given up rather than posted late.
    pub outbox_max_age: Duration,
    /// Whether the owner is asked in a DM about each memory he proposes.
    pub memory_dm: bool,
    /// How long a memory button works.
    pub button_lifetime: Duration,
    /// One minute of `/clankie quiet`.
    pub quiet_minute: Duration,
    /// The prices `/clankie usage` reckons the bill at (`CLANKIE_PRICE_*`).
    pub prices: clankie_store::Prices,
    /// What the sweeper keeps, and how often it runs.
    pub retention: clankie_store::Retention,
    pub sweep_every: Duration,
    /// How far back a replica taking a lane over looks for admitted, unsettled deliveries.
    pub gather_window: Duration,
    /// How long one picture may take from media.
    pub media_timeout: Duration,
    /// Deliveries of one ingress tried before it is settled `failed` (`captain_lane_unavailable`).
    pub max_deliver: u32,
    pub exchange_window: Duration,
    pub tool_card_delay: Duration,
    pub history_limit: u32,
    pub history_timeout: Duration,
    /// How long a turn waits for the context of a message it reads that ingest left to fetch
    /// (the body gathers within its own 3 s patience).
    pub context_timeout: Duration,
    /// How many messages of a reply chain a message is shown with (`CLANKIE_REPLY_CHAIN_DEPTH`).
    pub reply_chain_depth: u32,
    /// User ids whose turns run one-shot with the elevated tools.
    pub grants: HashSet<u64>,
    /// Bounds of the read_page tool.
    pub page_timeout: Duration,
    pub page_max_bytes: usize,
    /// Longest a run's first model call waits while someone it answers is typing; zero turns the hold off.
    pub typing_hold: Duration,
    /// The baseline mode: each delivery its own one-shot session, history every time, no steering.
    pub one_shot: bool,
    /// Every URL a tool fetches goes through it.
    pub egress: EgressGuard,
    pub bounds: Bounds,
    /// The browser host behind the `browse` tool; none leaves the tool out.
    pub browser: Option<std::sync::Arc<clankie_browser::BrowserHost>>,
    /// The time zone reminders are read in for someone who set none (`CLANKIE_TIME_ZONE`).
    pub time_zone: String,
}

impl CaptainConfig {
    /// The captain's configuration from settings.
    pub fn from_settings(settings: &Settings) -> CaptainConfig {
        CaptainConfig {
            replica: settings.replica_id.clone(),
            bot_name: settings.bot_name.clone(),
            aliases: settings.bot_aliases.clone(),
            named_admission: settings.named_admission,
            experience_ttl: settings.experience_ttl,
            lease_ttl: settings.lane_lease_ttl,
            warm_cache_bytes: settings.warm_cache_mib.saturating_mul(1024 * 1024),
            ack_wait: settings.ingress_ack_wait,
            admitters: 16,
            outbox_relay_after: settings.outbox_relay_after,
            outbox_max_age: settings.outbox_max_age,
            memory_dm: settings.memory_dm,
            button_lifetime: settings.button_lifetime,
            quiet_minute: settings.quiet_minute,
            prices: clankie_console::prices::from_settings(settings),
            retention: clankie_store::Retention {
                receipts: settings.retention_receipts,
                records: settings.retention_records,
                replaced_entries: settings.retention_replaced_entries,
                batch: 5_000,
            },
            sweep_every: settings.retention_sweep_every,
            gather_window: Duration::from_secs(15 * 60),
            media_timeout: settings.media_timeout,
            max_deliver: settings.ingress_max_deliver,
            exchange_window: settings.exchange_window,
            tool_card_delay: settings.tool_card_delay,
            history_limit: settings.history_limit,
            history_timeout: Duration::from_secs(2),
            context_timeout: Duration::from_secs(4),
            reply_chain_depth: settings.reply_chain_depth as u32,
            grants: settings.operator_grants.iter().copied().collect(),
            page_timeout: Duration::from_secs(10),
            page_max_bytes: 512 * 1024,
            one_shot: settings.captain_one_shot,
            typing_hold: settings.typing_hold,
            egress: EgressGuard::new(settings.egress_allow.clone()),
            bounds: Bounds {
                history_chars: settings.history_max_chars,
                attachments_per_message: settings.attachments_per_message,
                picture_bytes: 25 * 1024 * 1024,
                flood_per_minute: settings.flood_admissions_per_minute,
                reminders_per_person: settings.reminders_per_person,
                reminders_per_room: settings.reminders_per_room,
                reminder_horizon: Duration::from_secs(u64::from(settings.reminder_horizon_days) * 24 * 3600),
            },
            browser: None,
            time_zone: settings.time_zone.clone(),
        }
    }

    /// How long a delivery that failed on its `delivered`-th try waits before the next: doubling
    /// from [`retry_delay`](Self::retry_delay), at most 30 s, so a poison delivery backs off
    /// instead of hot-looping.
    pub(crate) fn backoff(&self, delivered: i64) -> Duration {
        let doublings = u32::try_from(delivered.saturating_sub(1)).unwrap_or(0).min(16);
        (self.retry_delay() * 2u32.pow(doublings)).min(Duration::from_secs(30))
    }

    /// Ingress messages pulled at a time: as many as the admitters decide within a tenth of
    /// the ack wait at a floor of 1,000 a second (64 to 4,096), so a pulled message never waits
    /// out its ack wait in the client.
    pub(crate) fn ingress_prefetch(&self) -> usize {
        usize::try_from(self.ack_wait.as_millis() / 10).unwrap_or(usize::MAX).clamp(64, 4_096)
    }

    /// Ingress deliveries that may stand unacked across the replicas: every lane's held
    /// deliveries wait on their runs unacked, so this bounds the lanes in conversation at once,
    /// not the admission rate.
    pub(crate) const INGRESS_MAX_ACK_PENDING: i64 = 50_000;

    /// How long a forwarded delivery waits before it is offered again.
    pub(crate) fn retry_delay(&self) -> Duration {
        (self.lease_ttl / 10).clamp(Duration::from_millis(20), Duration::from_millis(500))
    }
}
