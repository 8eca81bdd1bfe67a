//! `day_`: the bench's simulated day in its short mode (1,000 lanes, 2,000 messages at 40 a
//! second), every service its own process: every message has its outcome and the report has
//! every figure. `cargo run --release -p clankie-bench -- day` is the full mode.

use clankie_bench::day::{DayConfig, SERVICES, run};

#[tokio::test]
async fn day_short_mode_every_message_has_its_outcome_and_the_report_has_every_figure() {
    let report = run(&DayConfig::short(), std::path::Path::new(env!("CARGO_BIN_EXE_clankie"))).await.unwrap();
    for line in report.lines() {
        println!("{line}");
    }
    assert_eq!(report.without_outcome, 0, "every message its outcome");
    assert_eq!(report.messages, DayConfig::short().messages);
    assert!(report.to_him > 100, "about one in ten to him: {}", report.to_him);
    assert!(report.answered * 10 >= report.to_him * 9, "he answered {} of {}", report.answered, report.to_him);
    assert!(report.first_word_p50_ms > 0.0 && report.first_word_p99_ms >= report.first_word_p50_ms);
    assert!(report.pg_bytes_per_message > 0.0 && report.jetstream_bytes_per_message > 0.0);
    assert!(report.pg_by_relation.iter().any(|(name, _)| name == "table receipts"), "where the bytes went: {:?}", report.pg_by_relation);
    assert!(report.sustained_per_s > 0.0);
    let names: Vec<&str> = report.services.iter().map(|s| s.name).collect();
    assert_eq!(names, SERVICES, "a figure for every service");
    for s in &report.services {
        assert!(s.peak_rss_mib > 0.0 && s.end_rss_mib > 0.0 && s.cpu_s_per_1000 > 0.0, "{s:?}");
    }
    let svg = clankie_bench::day::plot::svg(std::slice::from_ref(&report));
    assert!(svg.starts_with("<svg") && SERVICES.iter().all(|s| svg.contains(s)), "the plot names every service");
}
