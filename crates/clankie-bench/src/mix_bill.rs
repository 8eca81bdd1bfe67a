//! What one replay of the economy mix cost, and how its figures stand against the goals:
//! shared by the replay through the stack and the one on llama.cpp.

use clankie_model_standin::RecordedRequest;

use clankie_store::{Prices, Tokens};

/// One replay's bill and what happened in it.
pub(crate) struct Mix {
    /// Every request the provider was sent, as billed, by source (`plain`, `page`, `picture`,
    /// `voice`, `compaction`): the voice room's and compaction's output as scripted, the
    /// captain's turns' output (their own count, all kinds of burst) under `plain`.
    pub(crate) by_source: Vec<(&'static str, Tokens)>,
    /// Every request, in arrival order, with its source.
    pub(crate) requests: Vec<(&'static str, RecordedRequest)>,
    /// Compaction entries stored per room.
    pub(crate) compactions: String,
    /// Deliveries that failed (a refused request would show here).
    pub(crate) failed: i64,
    /// Pages the tool read.
    pub(crate) page_reads: usize,
    /// The turns' own input tokens over every request's: what the receipts miss of the invoice.
    pub(crate) receipts_over_invoice: f64,
}

impl Mix {
    /// Every source's tokens together.
    pub(crate) fn billed(&self) -> Tokens {
        let mut all = Tokens::default();
        for (_, b) in &self.by_source {
            all += *b;
        }
        all
    }
}

/// The goals of issue 77, printed beside the figures and never asserted: cached share at least
/// 0.85 (Anthropic and llama.cpp), durable dollars at most 0.30 of one-shot, cache writes under
/// 20% of spend.
pub(crate) fn print_goals(prices: &Prices, p: &str, durable: Tokens, ratio: f64, cache_goal: bool) {
    let verdict = |met: bool, by: f64| if met { "met".to_owned() } else { format!("MISSED by {by:.3}") };
    println!("economy_mix_usd_ratio_durable_over_oneshot_{p}: {ratio:.3}");
    let share = durable.cached_share();
    if cache_goal {
        println!("economy_mix_cached_share_goal_{p}: 0.85 (durable {share:.3} {})", verdict(share >= 0.85, 0.85 - share));
    }
    println!("economy_mix_usd_ratio_goal_{p}: 0.30 (durable/one-shot {ratio:.3} {})", verdict(ratio <= 0.30, ratio - 0.30));
    let writes = durable.cache_write_share_of_spend(prices);
    println!("economy_mix_cache_write_share_goal_{p}: 0.20 (durable {writes:.3} {})", verdict(writes < 0.20, writes - 0.20));
}
