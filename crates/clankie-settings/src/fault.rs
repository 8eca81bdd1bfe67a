//! Named fault points, for tests that need a process to die at an exact place.
//!
//! `CLANKIE_FAULT` holds a comma-separated list of point names. A process that
//! reaches a listed point exits at once with [`EXIT_CODE`], as a crash there
//! would: nothing after the point runs, no ack, no cleanup. Unset, a point
//! costs one environment lookup.

/// The exit code of an injected fault, so a test can tell it from a real failure.
pub const EXIT_CODE: i32 = 86;

/// Exits the process here when `CLANKIE_FAULT` names `point`.
pub fn point(point: &'static str) {
    if std::env::var("CLANKIE_FAULT").is_ok_and(|v| named(&v, point)) {
        eprintln!("fault injected at {point}: exiting with code {EXIT_CODE}");
        std::process::exit(EXIT_CODE);
    }
}

fn named(list: &str, point: &str) -> bool {
    list.split(',').any(|p| p.trim() == point)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_listed_point_fires() {
        assert!(super::named("media.before_ack", "media.before_ack"));
        assert!(super::named("a, media.before_ack", "media.before_ack"));
        assert!(!super::named("media.before_ack_x", "media.before_ack"));
        assert!(!super::named("", "media.before_ack"));
    }
}
