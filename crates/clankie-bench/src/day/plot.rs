//! The day's curve drawn and judged: each service's CPU-seconds per 1,000 messages against the
//! lanes the store held, on a log scale, as a small SVG; and whether each goal held.

use std::fmt::Write as _;

use super::report::Report;

/// How much a service's CPU per 1,000 messages may move across the scales and still be flat.
pub const FLAT_WITHIN: f64 = 0.20;
/// PostgreSQL's growth per message the goal allows.
pub const PG_BYTES_GOAL: f64 = 2048.0;

const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"];

/// Each service's CPU per 1,000 messages, one line per service, lanes on a log axis.
pub fn svg(reports: &[Report]) -> String {
    let (w, h, left, bottom, top, right) = (720.0, 420.0, 70.0, 50.0, 30.0, 170.0);
    let mut reports: Vec<&Report> = reports.iter().collect();
    reports.sort_by_key(|r| r.lanes);
    let max_y = reports.iter().flat_map(|r| r.services.iter().map(|s| s.cpu_s_per_1000)).fold(0.0_f64, f64::max).max(0.01) * 1.15;
    let (lo, hi) = match (reports.first(), reports.last()) {
        (Some(a), Some(b)) if b.lanes > a.lanes => ((a.lanes as f64).log10(), (b.lanes as f64).log10()),
        (Some(a), _) => ((a.lanes as f64).log10() - 0.5, (a.lanes as f64).log10() + 0.5),
        _ => (3.0, 5.0),
    };
    let x = |lanes: usize| left + ((lanes as f64).log10() - lo) / (hi - lo) * (w - left - right);
    let y = |v: f64| h - bottom - v / max_y * (h - bottom - top);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"18\" font-size=\"14\">CPU-seconds per 1,000 messages, by service, against lanes held</text>\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for r in &reports {
        let _ = writeln!(out, "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{} lanes</text>", x(r.lanes), h - bottom + 18.0, r.lanes);
    }
    for step in 0..=4 {
        let v = max_y * f64::from(step) / 4.0;
        let _ = writeln!(out, "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.2}</text>", left - 6.0, y(v) + 4.0);
    }
    let names: Vec<&str> = reports.first().map(|r| r.services.iter().map(|s| s.name).collect()).unwrap_or_default();
    for (i, name) in names.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = reports
            .iter()
            .filter_map(|r| r.services.iter().find(|s| s.name == *name).map(|s| format!("{:.1},{:.1}", x(r.lanes), y(s.cpu_s_per_1000))))
            .collect();
        let _ = writeln!(out, "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>", points.join(" "));
        for p in &points {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(out, "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{colour}\"/>");
        }
        let ly = top + 20.0 + 18.0 * i as f64;
        let _ = writeln!(out, "<text x=\"{}\" y=\"{ly:.1}\" fill=\"{colour}\">{name}</text>", w - right + 16.0);
    }
    out.push_str("</svg>\n");
    out
}

/// Each goal, held or not, as `name: value` lines: every service's curve flat within 20%,
/// PostgreSQL at most 2 KB a message, and every message its outcome. A service that costs next
/// to nothing a message (the voice floor, media) is flat when its scales differ by no more
/// than the kernel's clock can tell apart: two ticks a scale.
pub fn verdict(reports: &[Report]) -> Vec<String> {
    let mut lines = Vec::new();
    let names: Vec<&str> = reports.first().map(|r| r.services.iter().map(|s| s.name).collect()).unwrap_or_default();
    for name in names {
        let values: Vec<f64> =
            reports.iter().filter_map(|r| r.services.iter().find(|s| s.name == name)).map(|s| s.cpu_s_per_1000).collect();
        let (min, max) = values.iter().fold((f64::MAX, 0.0_f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        let spread = if min > 0.0 { max / min - 1.0 } else { 0.0 };
        let resolution = reports.iter().map(|r| r.cpu_resolution_s_per_1000).fold(0.0_f64, f64::max);
        let within = FLAT_WITHIN * 100.0;
        let held = match (spread <= FLAT_WITHIN, max - min <= resolution) {
            (true, _) => format!("flat within {within:.0}%"),
            (false, true) => "flat: the scales differ by no more than the clock's two ticks".to_owned(),
            (false, false) => format!("not flat within {within:.0}%"),
        };
        lines.push(format!("day_curve_spread[{name}]: {:.0}% ({held})", spread * 100.0));
    }
    let pg = reports.iter().map(|r| r.pg_bytes_per_message).fold(0.0_f64, f64::max);
    lines.push(format!("day_postgres_bytes_per_message_most: {pg:.0} (goal at most {PG_BYTES_GOAL:.0})"));
    lines.push(format!("day_without_outcome_total: {}", reports.iter().map(|r| r.without_outcome).sum::<usize>()));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::day::ServiceFigures;

    fn report(lanes: usize, cpu: f64) -> Report {
        Report {
            lanes,
            messages: 10_000,
            services: vec![ServiceFigures { name: "voice-floor", cpu_s_per_1000: cpu, peak_rss_mib: 1.0, end_rss_mib: 1.0 }],
            cpu_resolution_s_per_1000: 0.002,
            pg_bytes_per_message: 0.0,
            pg_bytes_per_message_whole_day: 0.0,
            pg_by_relation: Vec::new(),
            receipts_by_kind: Vec::new(),
            jetstream_bytes_per_message: 0.0,
            sustained_per_s: 0.0,
            first_word_p50_ms: 0.0,
            first_word_p99_ms: 0.0,
            answered: 0,
            to_him: 0,
            without_outcome: 0,
        }
    }

    #[test]
    fn day_curve_a_spread_the_clock_cannot_tell_apart_is_flat_and_a_real_one_is_not() {
        let idle = verdict(&[report(1_000, 0.009), report(100_000, 0.011)]);
        assert!(idle[0].contains("22%") && idle[0].contains("the clock's two ticks"), "{idle:?}");
        let busy = verdict(&[report(1_000, 1.0), report(100_000, 1.5)]);
        assert!(busy[0].contains("not flat within 20%"), "{busy:?}");
        let near = verdict(&[report(1_000, 1.0), report(100_000, 1.1)]);
        assert!(near[0].contains("(flat within 20%)"), "{near:?}");
    }
}
