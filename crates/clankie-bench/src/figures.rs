//! How the bench reduces its samples to the figures it prints: a percentile of sorted samples.

/// The `p` quantile (0 to 1) of `sorted`, the nearest sample; NaN for none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
