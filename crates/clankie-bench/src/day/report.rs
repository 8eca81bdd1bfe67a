//! What one day measured, and the `name: value` lines the bench prints of it.

/// One service's cost over the day.
#[derive(Debug, Clone)]
pub struct ServiceFigures {
    pub name: &'static str,
    pub cpu_s_per_1000: f64,
    pub peak_rss_mib: f64,
    pub end_rss_mib: f64,
}

/// What a day measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub lanes: usize,
    pub messages: usize,
    pub services: Vec<ServiceFigures>,
    /// The least difference in CPU-seconds per 1,000 messages the kernel's clock can show: two
    /// ticks (one at each reading) over the day's messages.
    pub cpu_resolution_s_per_1000: f64,
    /// PostgreSQL's growth a message at steady state: over the day's second half, after the
    /// store was vacuumed at its midpoint as autovacuum would, so rows updated in place cost
    /// what they hold rather than their dead versions too.
    pub pg_bytes_per_message: f64,
    /// The growth a message over the whole day, from an empty start, with nothing vacuumed.
    pub pg_bytes_per_message_whole_day: f64,
    /// Where PostgreSQL's bytes went at steady state: each table (without its indexes) and each
    /// index that grew by at least 10 bytes a message, largest first.
    pub pg_by_relation: Vec<(String, f64)>,
    /// Receipts a message, by kind, largest first.
    pub receipts_by_kind: Vec<(String, f64)>,
    pub jetstream_bytes_per_message: f64,
    pub sustained_per_s: f64,
    pub first_word_p50_ms: f64,
    pub first_word_p99_ms: f64,
    /// Messages to him that were answered, of those sent and not deleted.
    pub answered: usize,
    pub to_him: usize,
    /// Messages (not deleted) with neither an outcome nor a refusal's receipt.
    pub without_outcome: usize,
}

impl Report {
    /// `name: value` lines, as every bench part prints them.
    pub fn lines(&self) -> Vec<String> {
        let l = self.lanes;
        let mut out = vec![
            format!("day_{l}_lanes_messages: {}", self.messages),
            format!("day_{l}_lanes_sustained_messages_per_s: {:.1}", self.sustained_per_s),
            format!("day_{l}_lanes_first_word_p50_ms: {:.0}", self.first_word_p50_ms),
            format!("day_{l}_lanes_first_word_p99_ms: {:.0}", self.first_word_p99_ms),
            format!("day_{l}_lanes_answered: {} of {}", self.answered, self.to_him),
            format!("day_{l}_lanes_postgres_bytes_per_message: {:.0}", self.pg_bytes_per_message),
            format!("day_{l}_lanes_postgres_bytes_per_message_whole_day: {:.0}", self.pg_bytes_per_message_whole_day),
            format!("day_{l}_lanes_jetstream_bytes_per_message: {:.0}", self.jetstream_bytes_per_message),
            format!("day_{l}_lanes_without_outcome: {}", self.without_outcome),
        ];
        for (relation, bytes) in &self.pg_by_relation {
            out.push(format!("day_{l}_lanes_postgres_bytes_per_message[{relation}]: {bytes:.0}"));
        }
        for (kind, per) in &self.receipts_by_kind {
            out.push(format!("day_{l}_lanes_receipts_per_message[{kind}]: {per:.3}"));
        }
        for s in &self.services {
            out.push(format!("day_{l}_lanes_cpu_s_per_1000_messages[{}]: {:.3}", s.name, s.cpu_s_per_1000));
            out.push(format!("day_{l}_lanes_peak_rss_mib[{}]: {:.1}", s.name, s.peak_rss_mib));
            out.push(format!("day_{l}_lanes_end_rss_mib[{}]: {:.1}", s.name, s.end_rss_mib));
        }
        out
    }
}
