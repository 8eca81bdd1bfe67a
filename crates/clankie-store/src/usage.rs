//! The bill: what the model's tokens cost, per lane, per room and per UTC day, read from the
//! turns' token counts and the receipts of the runs that are no turn ([`BILLED_RECEIPTS`]) and
//! priced at the configured list prices. Ids, counts and dollars only, like every receipt.

use std::collections::BTreeMap;

use clankie_proto::LaneKey;
use sqlx::Row;

use crate::{Store, StoreError};

/// A model's list prices, in US dollars per million tokens, and the label that says whose and
/// of when, so a bill never shows a figure without the prices it was reckoned at.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Prices {
    /// Whose prices these are and of when (`CLANKIE_PRICE_MODEL`).
    pub label: String,
    /// Input neither read from nor written to the provider's cache.
    pub input: f64,
    /// Output, reasoning included.
    pub output: f64,
    /// Input read from the provider's prompt cache.
    pub cache_read: f64,
    /// Input written to the provider's prompt cache.
    pub cache_write: f64,
}

/// Tokens as the provider bills them: `cached` and `cache_write` are parts of `input`, as the
/// turns table keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tokens {
    /// All input, cached and written included.
    pub input: i64,
    /// All output, reasoning included.
    pub output: i64,
    /// Of `input`, read from the provider's prompt cache.
    pub cached: i64,
    /// Of `input`, written to the provider's prompt cache.
    pub cache_write: i64,
}

impl std::ops::AddAssign for Tokens {
    fn add_assign(&mut self, other: Tokens) {
        self.input += other.input;
        self.output += other.output;
        self.cached += other.cached;
        self.cache_write += other.cache_write;
    }
}

impl Tokens {
    /// What these tokens cost at `prices`: the input neither read nor written at the input
    /// price, reads and writes at theirs, output at its own.
    pub fn dollars(&self, prices: &Prices) -> f64 {
        let plain = (self.input - self.cached - self.cache_write).max(0);
        (plain as f64 * prices.input
            + self.cached as f64 * prices.cache_read
            + self.cache_write as f64 * prices.cache_write
            + self.output as f64 * prices.output)
            / 1e6
    }

    /// The share of input read from the cache: what durable lanes save. 0 with no input.
    pub fn cached_share(&self) -> f64 {
        if self.input <= 0 { 0.0 } else { self.cached as f64 / self.input as f64 }
    }

    /// The share of the spend that went on cache writes: high when a prefix is cached again
    /// every turn. 0 when nothing was spent.
    pub fn cache_write_share_of_spend(&self, prices: &Prices) -> f64 {
        let total = self.dollars(prices);
        if total <= 0.0 { 0.0 } else { self.cache_write as f64 * prices.cache_write / 1e6 / total }
    }
}

/// Dollars as every bill shows them, to four decimals (a turn costs fractions of a cent):
/// the command, the console and the CLI print the same figure.
pub fn shown(dollars: f64) -> String {
    format!("${dollars:.4}")
}

/// The room a lane speaks in: a Discord channel, its text lane and its voice lane together
/// (`<guild>:<channel>`); a DM and the console are rooms of their own; a thread is a channel of
/// its own and so a room of its own.
pub fn room_of(lane: &str) -> String {
    match lane.parse::<LaneKey>() {
        Ok(LaneKey::Room { guild, channel } | LaneKey::Voice { guild, channel }) => format!("{guild}:{channel}"),
        Ok(LaneKey::Dm { channel }) => format!("dm:{channel}"),
        Ok(LaneKey::Console { owner }) => format!("console:{owner}"),
        Err(_) => lane.to_owned(),
    }
}

/// Where a bill's period starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// The last `n` UTC days, today included: from the UTC midnight `n - 1` days before today's.
    Days(u32),
    /// From this moment, in Unix milliseconds.
    Ms(i64),
}

const DAY_MS: i64 = 86_400_000;

impl Since {
    /// The period's start in Unix milliseconds, with `now_ms` as now.
    pub fn start_ms(self, now_ms: i64) -> i64 {
        match self {
            Since::Days(n) => (now_ms.div_euclid(DAY_MS) - i64::from(n.max(1)) + 1) * DAY_MS,
            Since::Ms(at) => at,
        }
    }
}

/// Tokens spent by one lane, one room or on one UTC day (`what`: the lane key, the room, or
/// the day as `YYYY-MM-DD`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Spent {
    /// The lane key, the room or the day.
    pub what: String,
    pub tokens: Tokens,
}

/// The tokens of a period, unpriced: per lane, per room and per UTC day (every day of the
/// period, those with nothing spent included, oldest first).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// The period, in Unix milliseconds: its start, and now when it was read.
    pub since_ms: i64,
    pub until_ms: i64,
    /// Every lane's tokens together.
    pub total: Tokens,
    pub lanes: Vec<Spent>,
    pub rooms: Vec<Spent>,
    pub days: Vec<Spent>,
}

/// One line of a bill: a lane, a room or a day, priced.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Line {
    /// The lane key, the room or the day (`YYYY-MM-DD`).
    pub what: String,
    /// US dollars at the bill's prices.
    pub dollars: f64,
    /// `dollars` as every bill shows it ([`shown`]).
    pub dollars_shown: String,
    pub tokens: Tokens,
}

/// A period's usage priced: what `/clankie usage`, the console and `clankie usage` show.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Bill {
    /// The prices it was reckoned at, with their label.
    pub prices: Prices,
    /// The period, in Unix milliseconds.
    pub since_ms: i64,
    pub until_ms: i64,
    /// The whole period's dollars, and as every bill shows them.
    pub dollars: f64,
    pub dollars_shown: String,
    /// The whole period's tokens.
    pub tokens: Tokens,
    /// Of all input, the share read from the cache.
    pub cached_share: f64,
    /// Of all dollars, the share spent writing to the cache.
    pub cache_write_share_of_spend: f64,
    /// Lanes and rooms by dollars, most first.
    pub lanes: Vec<Line>,
    pub rooms: Vec<Line>,
    /// Days, newest first.
    pub days: Vec<Line>,
}

impl Usage {
    /// The usage priced at `prices`; lanes and rooms by dollars (most first), days newest first.
    pub fn bill(&self, prices: &Prices) -> Bill {
        let line = |s: &Spent| {
            let dollars = s.tokens.dollars(prices);
            Line { what: s.what.clone(), dollars, dollars_shown: shown(dollars), tokens: s.tokens }
        };
        let by_dollars = |spent: &[Spent]| {
            let mut lines: Vec<Line> = spent.iter().map(line).collect();
            lines.sort_by(|a, b| b.dollars.total_cmp(&a.dollars).then_with(|| a.what.cmp(&b.what)));
            lines
        };
        let dollars = self.total.dollars(prices);
        Bill {
            prices: prices.clone(),
            since_ms: self.since_ms,
            until_ms: self.until_ms,
            dollars,
            dollars_shown: shown(dollars),
            tokens: self.total,
            cached_share: self.total.cached_share(),
            cache_write_share_of_spend: self.total.cache_write_share_of_spend(prices),
            lanes: by_dollars(&self.lanes),
            rooms: by_dollars(&self.rooms),
            days: self.days.iter().rev().map(line).collect(),
        }
    }
}

/// The UTC day of `ms` as `YYYY-MM-DD`, as a bill names its days.
pub fn day_of(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    clankie_proto::time::rfc3339(at)[..10].to_owned()
}

/// The receipts of model runs that are not lane turns, whose counts the bill adds to the turns':
/// the voice floor's spoken answers, the captain's handoffs from a voice room (`ask_clankie`) and
/// console chat. Their counts are those of `v1::Receipt::with_tokens`, each 0 when missing.
pub const BILLED_RECEIPTS: [&str; 3] = ["voice.response", "captain.handoff", "console.chat"];

/// The most days a bill lists one by one.
const MAX_DAYS: i64 = 366;

impl Store {
    /// The tokens spent since `since`: every turn started in the period and every receipt of it
    /// of a [`BILLED_RECEIPTS`] kind (its counts `input_tokens`, `output_tokens`,
    /// `cached_input_tokens`, `cache_write_input_tokens`, each 0 when missing), per lane, room and
    /// UTC day.
    pub async fn usage(&self, since: Since) -> Result<Usage, StoreError> {
        let until_ms = now_ms();
        let since_ms = since.start_ms(until_ms);
        let rows = sqlx::query(
            "WITH spend AS (
                 SELECT lane, started_at AS at, input_tokens AS input, output_tokens AS output,
                        cached_input_tokens AS cached, cache_write_input_tokens AS cache_write
                 FROM turns WHERE started_at >= to_timestamp($1::double precision / 1000)
                 UNION ALL
                 SELECT lane, at,
                        COALESCE((counts->>'input_tokens')::bigint, 0), COALESCE((counts->>'output_tokens')::bigint, 0),
                        COALESCE((counts->>'cached_input_tokens')::bigint, 0), COALESCE((counts->>'cache_write_input_tokens')::bigint, 0)
                 FROM receipts WHERE kind = ANY($2) AND at >= to_timestamp($1::double precision / 1000))
             SELECT lane, (extract(epoch from date_trunc('day', at AT TIME ZONE 'UTC')) * 1000)::bigint AS day_ms,
                    GROUPING(lane) AS by_day,
                    COALESCE(sum(input), 0)::bigint AS input, COALESCE(sum(output), 0)::bigint AS output,
                    COALESCE(sum(cached), 0)::bigint AS cached, COALESCE(sum(cache_write), 0)::bigint AS cache_write
             FROM spend
             GROUP BY GROUPING SETS ((lane), (date_trunc('day', at AT TIME ZONE 'UTC')))",
        )
        .bind(since_ms)
        .bind(&BILLED_RECEIPTS[..])
        .fetch_all(&self.pool)
        .await?;
        let (mut lanes, mut rooms, mut days) = (BTreeMap::new(), BTreeMap::<String, Tokens>::new(), BTreeMap::<i64, Tokens>::new());
        let mut total = Tokens::default();
        for r in &rows {
            let tokens = Tokens {
                input: r.try_get("input")?,
                output: r.try_get("output")?,
                cached: r.try_get("cached")?,
                cache_write: r.try_get("cache_write")?,
            };
            if r.try_get::<i32, _>("by_day")? == 1 {
                *days.entry(r.try_get::<i64, _>("day_ms")?).or_default() += tokens;
            } else {
                let lane: String = r.try_get("lane")?;
                *rooms.entry(room_of(&lane)).or_default() += tokens;
                total += tokens;
                lanes.insert(lane, tokens);
            }
        }
        let first_day = since_ms.div_euclid(DAY_MS).max(until_ms.div_euclid(DAY_MS) - MAX_DAYS + 1);
        let days = (first_day..=until_ms.div_euclid(DAY_MS))
            .map(|d| Spent { what: day_of(d * DAY_MS), tokens: days.get(&(d * DAY_MS)).copied().unwrap_or_default() })
            .collect();
        let spent = |m: BTreeMap<String, Tokens>| m.into_iter().map(|(what, tokens)| Spent { what, tokens }).collect();
        Ok(Usage { since_ms, until_ms, total, lanes: spent(lanes), rooms: spent(rooms), days })
    }
}

/// Now, in Unix milliseconds.
fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sonnet() -> Prices {
        Prices { label: "test".into(), input: 3.0, output: 15.0, cache_read: 0.30, cache_write: 3.75 }
    }

    #[test]
    fn usage_dollars_price_each_kind_of_token_at_its_own_price() {
        // 100,000 input of which 60,000 read and 20,000 written; 10,000 output:
        // 20,000 × $3 + 60,000 × $0.30 + 20,000 × $3.75 + 10,000 × $15 = $0.06 + $0.018 + $0.075 + $0.15.
        let t = Tokens { input: 100_000, output: 10_000, cached: 60_000, cache_write: 20_000 };
        assert!((t.dollars(&sonnet()) - 0.303).abs() < 1e-12, "{}", t.dollars(&sonnet()));
        assert_eq!(shown(t.dollars(&sonnet())), "$0.3030");
        assert!((t.cached_share() - 0.6).abs() < 1e-12);
        assert!((t.cache_write_share_of_spend(&sonnet()) - 0.075 / 0.303).abs() < 1e-12);
        // A million plain input tokens cost the input price; a million output the output price.
        assert_eq!(Tokens { input: 1_000_000, ..Default::default() }.dollars(&sonnet()), 3.0);
        assert_eq!(Tokens { output: 1_000_000, ..Default::default() }.dollars(&sonnet()), 15.0);
        // Nothing spent: no share of nothing, and no division by zero.
        assert_eq!((Tokens::default().cached_share(), Tokens::default().cache_write_share_of_spend(&sonnet())), (0.0, 0.0));
        assert_eq!(shown(0.0), "$0.0000");
    }

    #[test]
    fn usage_rooms_join_a_channels_text_and_voice_lanes() {
        assert_eq!(room_of("room:1:2"), "1:2");
        assert_eq!(room_of("voice:1:2"), "1:2");
        assert_eq!(room_of("dm:3"), "dm:3");
        assert_eq!(room_of("console:4"), "console:4");
        assert_eq!(room_of("odd"), "odd");
    }

    #[test]
    fn usage_the_last_days_start_at_a_utc_midnight() {
        let now = 20_000 * DAY_MS + 5 * 3_600_000;
        assert_eq!(Since::Days(1).start_ms(now), 20_000 * DAY_MS);
        assert_eq!(Since::Days(7).start_ms(now), 19_994 * DAY_MS);
        assert_eq!(Since::Days(0).start_ms(now), 20_000 * DAY_MS, "no fewer than one day");
        assert_eq!(Since::Ms(42).start_ms(now), 42);
        assert_eq!(day_of(0), "1970-01-01");
    }
}
