//! The bill where the owner looks: the console's Usage view (`GET /api/usage`), and the same
//! bill in words, which `/clankie usage` answers in Discord and `clankie usage` prints. Dollars at
//! the configured list prices, per lane, per room and per UTC day; ids, counts and dollars only.

use axum::Json;
use axum::extract::{Query, State};
use clankie_store::Since;
use clankie_store::usage::{Bill, Line, day_of};

use crate::error::ConsoleError;
use crate::state::Console;

/// The period a bill covers unless asked otherwise: the last week, today included.
pub const DEFAULT_DAYS: u32 = 7;
/// The longest period a bill covers, in days (the turns are kept about a month by default).
pub const MAX_DAYS: u32 = 90;
/// Lanes and rooms the words name at most, most dollars first.
const TOP: usize = 10;

/// The usage view's query: how many days back.
#[derive(serde::Deserialize)]
pub struct UsageQuery {
    days: Option<u32>,
}

/// `GET /api/usage?days=`: the bill of the last `days` UTC days (7 by default, at most 90).
pub async fn route(State(console): State<Console>, Query(q): Query<UsageQuery>) -> Result<Json<Bill>, ConsoleError> {
    let days = q.days.unwrap_or(DEFAULT_DAYS);
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(ConsoleError::BadRequest(format!("days is from 1 to {MAX_DAYS}")));
    }
    Ok(Json(console.store().usage(Since::Days(days)).await?.bill(console.prices())))
}

/// A list in the words: shown whole when it fits, else its first items and how many more.
struct Listing {
    head: &'static str,
    items: Vec<String>,
    shown: usize,
}

impl Listing {
    fn new(head: &'static str, lines: &[Line], most: usize) -> Listing {
        let items: Vec<String> = lines.iter().map(|l| format!("{} {}", l.what, l.dollars_shown)).collect();
        Listing { head, shown: items.len().min(most), items }
    }

    fn render(&self) -> String {
        let shown = self.items[..self.shown].join(", ");
        match self.items.len() - self.shown {
            _ if self.items.is_empty() => format!("{}nothing.", self.head),
            0 => format!("{}{shown}.", self.head),
            more if self.shown == 0 => format!("{}{more} in all.", self.head),
            more => format!("{}{shown} and {more} more.", self.head),
        }
    }
}

/// The bill in words within `max` characters: the period and its dollars, the cached share and
/// the share of spend that went on cache writes, dollars per day (newest first), the lanes and
/// rooms that cost most, and the prices it was reckoned at. While too long, the longest list
/// gives up items first, saying how many more it holds.
pub fn text(bill: &Bill, max: usize) -> String {
    let p = &bill.prices;
    let head = format!(
        "Usage over the last {} day(s), {} to {} UTC: {}\nCached share of input: {:.1}%. Cache writes: {:.1}% of spend.",
        bill.days.len(),
        day_of(bill.since_ms),
        day_of(bill.until_ms),
        bill.dollars_shown,
        bill.cached_share * 100.0,
        bill.cache_write_share_of_spend * 100.0,
    );
    let prices = format!(
        "Prices: {} (${}/MTok input, ${} output, ${} cache reads, ${} cache writes).",
        p.label, p.input, p.output, p.cache_read, p.cache_write
    );
    let mut lists = [
        Listing::new("Per day, newest first: ", &bill.days, usize::MAX),
        Listing::new("Top lanes: ", &bill.lanes, TOP),
        Listing::new("Top rooms: ", &bill.rooms, TOP),
    ];
    loop {
        let mut lines = vec![head.clone()];
        lines.extend(lists.iter().map(Listing::render));
        lines.push(prices.clone());
        let words = lines.join("\n");
        if words.chars().count() <= max {
            return words;
        }
        let Some(longest) = lists.iter_mut().filter(|l| l.shown > 0).max_by_key(|l| l.render().chars().count()) else {
            return words.chars().take(max).collect();
        };
        longest.shown -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clankie_store::usage::{Spent, Usage};
    use clankie_store::{Prices, Since, Tokens};

    fn bill(lanes: usize, days: u32) -> Bill {
        let now = 20_000 * 86_400_000 + 3_600_000;
        let spent =
            |what: String, n: i64| Spent { what, tokens: Tokens { input: 2_000 * n, output: 100 * n, cached: 1_000 * n, cache_write: 0 } };
        let lanes: Vec<Spent> =
            (0..lanes).map(|i| spent(format!("room:100:{}", 1_300_000_000_000_000_000u64 + i as u64), i as i64 + 1)).collect();
        let mut total = Tokens::default();
        for l in &lanes {
            total += l.tokens;
        }
        let days = (0..days).map(|d| spent(format!("2024-10-{:02}", d + 1), 1)).collect();
        let usage = Usage { since_ms: Since::Days(7).start_ms(now), until_ms: now, total, rooms: lanes.clone(), lanes, days };
        usage.bill(&Prices { label: "Test, list prices of today".into(), input: 3.0, output: 15.0, cache_read: 0.3, cache_write: 3.75 })
    }

    #[test]
    fn usage_a_small_bill_is_shown_whole_with_its_prices() {
        // Each lane's n: 1,000n plain input at $3, 1,000n read at $0.30, 100n output at $15 per
        // million: $0.0048 n. Two lanes: $0.0048 + $0.0096.
        let words = text(&bill(2, 7), 2_000);
        assert!(words.starts_with("Usage over the last 7 day(s), 2024-09-28 to 2024-10-04 UTC: $0.0144\n"), "{words}");
        assert!(words.contains("\nCached share of input: 50.0%. Cache writes: 0.0% of spend.\n"), "{words}");
        assert!(words.contains("\nPer day, newest first: 2024-10-07 $0.0048, 2024-10-06 $0.0048, "), "{words}");
        assert!(words.contains("\nTop lanes: room:100:1300000000000000001 $0.0096, room:100:1300000000000000000 $0.0048.\n"), "{words}");
        assert!(words.ends_with("\nPrices: Test, list prices of today ($3/MTok input, $15 output, $0.3 cache reads, $3.75 cache writes)."));
    }

    #[test]
    fn usage_a_bill_of_many_lanes_and_days_fits_discords_limit_and_says_how_many_more() {
        let words = text(&bill(300, 90), 2_000);
        assert!(words.chars().count() <= 2_000, "{} chars", words.chars().count());
        assert!(words.contains("Top lanes: room:100:1300000000000000299") && words.contains(" more."), "{words}");
        assert!(words.starts_with("Usage over the last 90 day(s)") && words.contains("Prices: "), "{words}");
    }
}
