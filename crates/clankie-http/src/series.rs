//! The series the alert rules read, present from a service's first scrape. Prometheus knows a
//! counter only once it is exported: one first seen at 1 shows no `increase`, so a rule on the
//! first event (a fatal close, an outbox row given up, a dropped span) would never fire for it.
//! Each service registers the series it owns at zero as it starts; a test scrapes the running
//! services and finds every series a rule reads, with the labels the rule reads.

/// One series: its name and its label pairs.
pub type Series = (&'static str, &'static [(&'static str, &'static str)]);

/// Every service exports these.
pub const EVERY_SERVICE: &[Series] = &[("clankie_trace_spans_dropped_total", &[])];

/// Registers `counters` at zero; a counter already counting keeps its count.
pub fn counters_at_zero(counters: &[Series]) {
    // Registered with the process's recorder: before it is installed they would go nowhere.
    let _ = crate::metrics_handle();
    for (name, labels) in counters.iter().chain(EVERY_SERVICE) {
        let labels: Vec<metrics::Label> = labels.iter().map(|(k, v)| metrics::Label::new(*k, *v)).collect();
        metrics::counter!(*name, labels).increment(0);
    }
}
