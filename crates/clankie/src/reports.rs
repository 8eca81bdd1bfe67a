//! The operator's reports from the store, content-free: a delivery's trail, the stored
//! invariants (`audit`) and the bill (`usage`).

use std::io::Write;

use anyhow::{Context, Result, bail};
use clankie_settings::{Settings, redact_url};

async fn store(settings: &Settings) -> Result<clankie_store::Store> {
    let url = redact_url(&settings.database_url);
    clankie_store::Store::connect(&settings.database_url).await.with_context(|| format!("connecting to {url}"))
}

/// Every receipt and the outcome of one delivery, one JSON line each.
pub(crate) async fn trail(settings: &Settings, delivery_id: &str) -> Result<()> {
    let store = store(settings).await?;
    let Some(rows) =
        clankie_console::views::trail(&store, delivery_id, settings.trace_url.as_deref()).await.context("reading the trail")?
    else {
        bail!("nothing recorded for delivery {delivery_id:?}");
    };
    let mut out = std::io::stdout().lock();
    for row in rows {
        if let Some(trace) = row["trace_id"].as_str() {
            match row["trace_url"].as_str() {
                Some(url) => eprintln!("trace {trace}: {url}"),
                None => eprintln!("trace {trace} (set CLANKIE_TRACE_URL to your trace viewer's page to get a link)"),
            }
        }
        writeln!(out, "{row}")?;
    }
    Ok(())
}

/// The stored invariants as `name: value` lines; an error when one is broken.
pub(crate) async fn audit(settings: &Settings, settle_ms: u64) -> Result<()> {
    let store = store(settings).await?;
    let a = store.audit(std::time::Duration::from_millis(settle_ms)).await.context("reading the stored invariants")?;
    println!("ingress_deliveries: {}", a.ingress_deliveries);
    println!("deliveries_with_outcome: {}", a.with_outcome);
    println!("deliveries_without_outcome: {}", a.without_outcome);
    println!("deliveries_in_flight: {}", a.in_flight);
    println!("replies_posted: {}", a.replies_posted);
    println!("replies_posted_twice: {}", a.replies_posted_twice);
    println!("outbox_unsent_past_bound: {}", a.outbox_unsent);
    if a.without_outcome > 0 || a.replies_posted_twice > 0 || a.outbox_unsent > 0 {
        bail!(
            "{} deliveries lost their outcome, {} replies were posted twice, {} outbox rows were never published",
            a.without_outcome,
            a.replies_posted_twice,
            a.outbox_unsent
        );
    }
    Ok(())
}

/// The bill of the last `days` UTC days at the configured prices: the words `/clankie usage`
/// answers with (lanes and rooms cut to the top ten), or with `json` the whole bill.
pub(crate) async fn usage(settings: &Settings, days: u32, json: bool) -> Result<()> {
    let max = clankie_console::usage::MAX_DAYS;
    if !(1..=max).contains(&days) {
        bail!("--days is from 1 to {max}");
    }
    let store = store(settings).await?;
    let usage = store.usage(clankie_store::Since::Days(days)).await.context("reading the turns' tokens")?;
    let bill = usage.bill(&clankie_console::prices::from_settings(settings));
    if json {
        println!("{}", serde_json::to_string(&bill).context("writing the bill as JSON")?);
    } else {
        println!("{}", clankie_console::usage::text(&bill, usize::MAX));
    }
    Ok(())
}
