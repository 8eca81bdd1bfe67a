//! Named fault points, for tests that need a process to die at an exact place.
//!
//! `CLANKIE_FAULT` holds a comma-separated list of point names. A process that
//! reaches a listed point exits at once with [`EXIT_CODE`], as a crash there
//! would: nothing after the point runs, no ack, no cleanup. Unset, a point
//! costs one environment lookup.
//!
//! `CLANKIE_FAULT_HOLD` holds `point=ms` pairs: a process reaching a listed
//! point waits that long there (the caller sleeps for [`hold`]'s answer), as a
//! slow disk or peer would make it.
//!
//! `CLANKIE_FAULT_PANIC` holds point names where the process panics, once per
//! point, as a bug there would: the supervisor's tests restart what it hit.

/// The exit code of an injected fault, so a test can tell it from a real failure.
pub const EXIT_CODE: i32 = 86;

/// Exits the process here when `CLANKIE_FAULT` names `point`.
pub fn point(point: &'static str) {
    if std::env::var("CLANKIE_FAULT").is_ok_and(|v| named(&v, point)) {
        eprintln!("fault injected at {point}: exiting with code {EXIT_CODE}");
        std::process::exit(EXIT_CODE);
    }
}

/// Panics here the first time it is reached, when `CLANKIE_FAULT_PANIC` names `point`.
pub fn panic_once(point: &'static str) {
    static FIRED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    if !std::env::var("CLANKIE_FAULT_PANIC").is_ok_and(|v| named(&v, point)) {
        return;
    }
    {
        let mut fired = FIRED.lock().unwrap_or_else(|p| p.into_inner());
        if fired.contains(&point) {
            return;
        }
        fired.push(point);
    }
    eprintln!("fault injected at {point}: panicking");
    panic!("fault injected: a panic at a named point");
}

/// How long to wait at `point`, when `CLANKIE_FAULT_HOLD` names it.
pub fn hold(point: &'static str) -> Option<std::time::Duration> {
    let list = std::env::var("CLANKIE_FAULT_HOLD").ok()?;
    let held = held_for(&list, point)?;
    eprintln!("fault injected at {point}: holding {} ms", held.as_millis());
    Some(held)
}

fn held_for(list: &str, point: &str) -> Option<std::time::Duration> {
    list.split(',')
        .filter_map(|p| p.trim().split_once('='))
        .find(|(name, _)| name.trim() == point)?
        .1
        .trim()
        .parse()
        .ok()
        .map(std::time::Duration::from_millis)
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

    #[test]
    fn a_hold_names_its_point_and_milliseconds() {
        use std::time::Duration;
        assert_eq!(super::held_for("media.fetch=40000", "media.fetch"), Some(Duration::from_secs(40)));
        assert_eq!(super::held_for("a=1, media.fetch = 250", "media.fetch"), Some(Duration::from_millis(250)));
        assert_eq!(super::held_for("media.fetch", "media.fetch"), None);
        assert_eq!(super::held_for("media.fetch=x", "media.fetch"), None);
        assert_eq!(super::held_for("media.fetched=5", "media.fetch"), None);
    }
}
