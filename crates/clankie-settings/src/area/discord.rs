//! The Discord token, the gateway, REST and the body in text rooms.
use crate::setting::{Area, Kind, Service::*, Setting, Unit};

/// The `[discord]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(Area::Discord, "CLANKIE_DISCORD_TOKEN", Kind::Text, "loopback-token", "The bot token. Never logged. The default is the loopback Discord's; against Discord itself (`CLANKIE_DISCORD_API` unset) the gateway refuses to start with it, unset, or `replace-me`.", &[Gateway, Run, Cli]).secret().must_set(),
    Setting::new(Area::Discord, "CLANKIE_DISCORD_API", Kind::Url, "unset: discord.com", "host:port of a Discord REST stand-in spoken to over plain HTTP, e.g. the loopback's `127.0.0.1:8700`.", &[Gateway, Run, Cli]),
    Setting::new(Area::Discord, "CLANKIE_DISCORD_GATEWAY_URL", Kind::Url, "unset: Discord's", "Gateway WebSocket URL to connect to, e.g. `ws://127.0.0.1:8700/gateway`.", &[Gateway, Run]),
    Setting::new(Area::Discord, "CLANKIE_DISCORD_GUILDS", Kind::Ids, "empty: every guild", "Comma-separated guild ids whose messages are admitted; others are dropped with a receipt.", &[Gateway, Run, Cli]),
    Setting::new(Area::Discord, "CLANKIE_OUTCOME_REACTIONS", Kind::Flag, "false", "React to each delivery with its outcome (✅ replied, 🫧 absorbed, 🤐 silent, ⚠️ failed); the sandbox shows them.", &[Gateway, Run]),
    Setting::new(Area::Discord, "CLANKIE_TYPING_INTERVAL_MS", Kind::Duration(Unit::Millis), "8000", "How often the body re-triggers Discord's typing indicator, which expires after 10 s.", &[Gateway, Run]),
    Setting::new(Area::Discord, "CLANKIE_GATEWAY_PUBLISH_PATIENCE_MS", Kind::Duration(Unit::Millis), "20000", "How long the gateway waits for JetStream to store a message before it closes the shard and resumes from before it, so Discord replays it.", &[Gateway, Run]),
    Setting::new(Area::Discord, "CLANKIE_DISCORD_SHARDS", Kind::Count, "0", "Gateway shards in all; 0 takes the count Discord recommends (`/gateway/bot`). Gateway replicas share them by lease.", &[Gateway, Run]),
    Setting::new(Area::Discord, "CLANKIE_SHARD_LEASE_TTL_MS", Kind::Duration(Unit::Millis), "15000", "How long a gateway replica's claim on a shard lasts unrenewed; a replica that died loses its shards to the others after it.", &[Gateway, Run]),
    Setting::new(Area::Discord, "CLANKIE_REST_LEASE_TTL_MS", Kind::Duration(Unit::Millis), "5000", "How long the gateway replica that speaks Discord's REST API (posting, typing, reactions, history) keeps that role unrenewed; one replica at a time holds it, so the bot stays inside Discord's limits whatever the number of replicas.", &[Gateway, Run]),
    Setting::new(Area::Discord, "CLANKIE_BUTTON_LIFETIME_MS", Kind::Duration(Unit::Millis), "86400000", "How long an Approve / Reject button works; a press after it changes nothing and says the button expired.", &[Captain, Run]),
    Setting::new(Area::Discord, "CLANKIE_TOOL_CARD_DELAY_MS", Kind::Duration(Unit::Millis), "3000", "A tool-only phase longer than this shows the tool-activity card.", &[Captain, Run]),
    Setting::new(Area::Discord, "CLANKIE_REPLY_MAX_PIECES", Kind::Count, "10", "Discord messages one reply may take (2,000 characters each); past it the reply is cut with a short note.", &[Gateway, Run]),
    Setting::new(Area::Discord, "CLANKIE_HISTORY_LIMIT", Kind::Count, "10", "Channel messages a cold lane's first prompt carries, as an untrusted block.", &[Gateway, Captain, Run]),
    Setting::new(Area::Discord, "CLANKIE_REPLY_CHAIN_DEPTH", Kind::Count, "3", "Messages of a reply chain a reply is shown with: the one it answers and those above it (fetched when the lane does not hold them), inside an untrusted block; 0 shows none.", &[Gateway, Run]),
    Setting::new(Area::Discord, "CLANKIE_NAMED_ADMISSION", Kind::Flag, "true", "Admit a guild message that names him (his name or an alias from the persona, as a word, any case) as `named`, like a mention; false admits only mentions, replies and live exchanges.", &[Captain, Run]),
    Setting::new(Area::Discord, "CLANKIE_TYPING_HOLD_MS", Kind::Duration(Unit::Millis), "8000", "Longest a lane's first model call waits while the person it answers is still typing (0: never waits).", &[Captain, Run]),
];
