//! The community a day is simulated for: where its lanes are (guild channels over sixteen
//! shards' guilds, then DMs), the lanes the store already holds as the day begins, and the
//! shape of each message (mostly between people, about one in ten to him, replies, bursts,
//! edits, deletions, a few pictures).

use clankie_discord_loopback::{ChannelSpec, LoopbackConfig, NewAttachment, NewMessage};

/// Gateway shards, and so guilds: one per shard.
pub const SHARDS: u32 = 16;
/// The community's busy guild channels, the same at every scale; lanes past these are DMs.
/// A scale's messages then have one shape (the same rooms, the same share of DMs) and only
/// the lanes held differ, so CPU per message against lanes measures what holding lanes costs.
pub const CHANNELS: usize = 500;
/// The name every message to him carries, in a mention or a DM.
pub const HIS_NAME: &str = "Clankie";
/// Of the messages to him, the share in a guild channel (a mention) rather than a DM, in tenths.
const MENTION_TENTHS: u64 = 7;
/// Members the authors are drawn from.
pub const MEMBERS: u64 = 100_000;
/// The first guild channel's id, and the first DM channel's.
const FIRST_CHANNEL: u64 = 10_000;
const FIRST_DM: u64 = 1_000_000;

/// Where the day's messages go: `channels` guild channels and `dms` DM channels, one lane each.
#[derive(Debug, Clone)]
pub struct Places {
    pub channels: Vec<(u64, u64)>,
    pub dms: Vec<u64>,
}

impl Places {
    /// `lanes` places: guild channels first, spread over the shards' guilds, then DMs.
    pub fn for_lanes(lanes: usize) -> Places {
        let channels = (0..lanes.min(CHANNELS) as u64).map(|i| (guild_of(i % u64::from(SHARDS)), FIRST_CHANNEL + i)).collect();
        let dms = (0..lanes.saturating_sub(CHANNELS) as u64).map(|i| FIRST_DM + i).collect();
        Places { channels, dms }
    }

    pub fn lanes(&self) -> usize {
        self.channels.len() + self.dms.len()
    }

    /// Every lane's key, as the captain names it.
    pub fn lane_keys(&self) -> Vec<String> {
        let rooms = self.channels.iter().map(|(g, c)| clankie_proto::LaneKey::Room { guild: *g, channel: *c }.to_string());
        rooms.chain(self.dms.iter().map(|c| clankie_proto::LaneKey::Dm { channel: *c }.to_string())).collect()
    }

    /// The loopback Discord these places are in: a guild per shard, Discord's limits on.
    pub fn loopback(&self) -> LoopbackConfig {
        let mut config = LoopbackConfig { shards: SHARDS, max_concurrency: 16, heartbeat_interval_ms: 5_000, ..Default::default() };
        config.channels = self
            .channels
            .iter()
            .map(|(guild, id)| ChannelSpec { id: *id, name: format!("room-{id}"), guild: Some(*guild), ..Default::default() })
            .collect();
        config.dm_channels = if self.dms.is_empty() { vec![FIRST_DM] } else { self.dms.clone() };
        // The loopback keeps every message Discord would; a day's need not all stay in memory.
        config.messages_kept_per_channel = 200;
        config
    }
}

/// Shard k's guild: Discord routes guild g to shard (g >> 22) % shards.
fn guild_of(shard: u64) -> u64 {
    (shard + u64::from(SHARDS)) << 22
}

/// What one step of the day does.
#[derive(Debug, Clone)]
pub enum Step {
    /// A new message; `to_him` says whether it needs its answer timed.
    Say { message: NewMessage, to_him: bool },
    /// An edit of the `n`th message sent before (its author's own).
    Edit { nth: usize },
    /// A deletion of the `n`th message sent before.
    Delete { nth: usize },
}

/// A small deterministic generator (xorshift), so a day replays with its seed.
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed.max(1))
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// A picture small enough to cost its fetch, not its bytes.
fn picture() -> NewAttachment {
    NewAttachment {
        filename: "photo.png".into(),
        content_type: "image/png".into(),
        base64: Some("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==".into()),
        ..Default::default()
    }
}

/// The day's `i`th step. `sent` is how many messages went before; `last_in` the newest message
/// id in a channel (for replies); a burst keeps to the channel its first message chose.
pub fn step(
    i: u64,
    places: &Places,
    random: &mut Random,
    sent: usize,
    last_in: &dyn Fn(u64) -> Option<u64>,
    burst: &mut Option<(u64, u32)>,
) -> Step {
    let roll = random.below(1_000);
    if sent > 10 && roll < 20 {
        return Step::Edit { nth: random.below(sent as u64) as usize };
    }
    if sent > 10 && roll < 30 {
        return Step::Delete { nth: random.below(sent as u64) as usize };
    }
    let author = format!("member{}", random.below(MEMBERS));
    // About one in ten to him: seven in ten of those a mention in a channel, the rest a DM.
    if random.below(10) == 0 {
        let (channel, mention) = if places.dms.is_empty() || random.below(10) < MENTION_TENTHS {
            (places.channels[random.below(places.channels.len() as u64) as usize].1, true)
        } else {
            (places.dms[random.below(places.dms.len() as u64) as usize], false)
        };
        let content = if mention { format!("@{HIS_NAME} what about {i}?") } else { format!("hey {HIS_NAME}, about {i}?") };
        let attachments = if random.below(20) == 0 { vec![picture()] } else { Vec::new() };
        return Step::Say {
            message: NewMessage { channel_id: channel, author, content, mention, attachments, ..Default::default() },
            to_him: true,
        };
    }
    // Between people: a burst of three in one channel now and then, half of them replies.
    let channel = match burst {
        Some((c, left)) if *left > 0 => {
            *left -= 1;
            *c
        }
        _ => {
            let c = places.channels[random.below(places.channels.len() as u64) as usize].1;
            *burst = (random.below(50) == 0).then_some((c, 2));
            c
        }
    };
    let reply_to = if random.below(2) == 0 { last_in(channel) } else { None };
    let content = format!("chatter {i} about the raid");
    Step::Say { message: NewMessage { channel_id: channel, author, content, reply_to, ..Default::default() }, to_him: false }
}

/// Writes the lanes the store holds as the day begins: each leased once before, with a short
/// conversation in its durable tree, as a community's lanes are after earlier days.
pub async fn seed_lanes(pool: &sqlx::PgPool, places: &Places) -> anyhow::Result<()> {
    let lanes = places.lane_keys();
    for chunk in lanes.chunks(10_000) {
        let chunk: Vec<String> = chunk.to_vec();
        sqlx::query("INSERT INTO lanes (lane, epoch) SELECT l, 1 FROM unnest($1::text[]) l ON CONFLICT DO NOTHING")
            .bind(&chunk)
            .execute(pool)
            .await?;
        sqlx::query(
            "INSERT INTO session_entries (tree, lane, id, kind, body, epoch, created_at)
             SELECT 'rooms/' || l, l, 'seed-' || l || '-' || k, CASE WHEN k = 0 THEN 'user' ELSE 'assistant' END,
                    CASE WHEN k = 0
                        THEN jsonb_build_object('type', 'user', 'author', 'someone', 'delivery_id', '',
                             'text', '<message from=\"someone\" author_id=\"1\">what did we decide yesterday?</message>')
                        ELSE jsonb_build_object('type', 'assistant', 'text', 'We settled on Friday at seven.', 'tool_calls', '[]'::jsonb,
                             'stop_reason', 'stop', 'usage', jsonb_build_object('input_tokens', 1500, 'output_tokens', 12),
                             'provider_error', NULL) END,
                    1, now() - interval '1 day'
             FROM unnest($1::text[]) l, generate_series(0, 1) k ORDER BY l, k",
        )
        .bind(&chunk)
        .execute(pool)
        .await?;
    }
    Ok(())
}
