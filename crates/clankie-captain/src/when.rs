//! When a person means, read in their time zone: "in 10 minutes", "5s", "tomorrow 9:00",
//! "9 tomorrow", "friday 7pm", "2026-12-24 18:00", or an RFC 3339 time. The model passes what
//! was said as it was said, so a time is resolved here, in one place, and the answer can say
//! the time it resolved to.

use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

/// Why a time could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhenError {
    #[error("I couldn't read that time. Try \"in 10 minutes\", \"tomorrow 9:00\", \"friday 19:00\" or \"2026-12-24 18:00\".")]
    Unreadable,
    #[error("That time has passed ({0}).")]
    Past(String),
}

/// A time zone by its IANA name; the empty name is UTC.
pub fn zone(name: &str) -> Option<TimeZone> {
    let name = name.trim();
    if name.is_empty() || name.eq_ignore_ascii_case("utc") {
        return Some(TimeZone::UTC);
    }
    TimeZone::get(name).ok()
}

/// What a person wrote, as a time to come, read in `zone` at `now`.
pub fn resolve(text: &str, now: Timestamp, zone: &TimeZone) -> Result<Zoned, WhenError> {
    let text = text.trim().to_lowercase();
    if let Ok(at) = text.to_uppercase().parse::<Timestamp>() {
        return to_come(at.to_zoned(zone.clone()), now);
    }
    if let Some(after) = duration(&text) {
        let at = now.checked_add(after).map_err(|_| WhenError::Unreadable)?;
        return to_come(at.to_zoned(zone.clone()), now);
    }
    let here = now.to_zoned(zone.clone());
    let (day, time) = day_and_time(&text, here.date())?;
    let at = |date: Date| date.to_datetime(time).to_zoned(zone.clone()).map_err(|_| WhenError::Unreadable);
    match day {
        Day::On(date) => to_come(at(date)?, now),
        // No day named: the next time the clock shows it, today or tomorrow.
        Day::Next => {
            let today = at(here.date())?;
            if today.timestamp() > now { Ok(today) } else { at(here.date().tomorrow().map_err(|_| WhenError::Unreadable)?) }
        }
        Day::Weekday(weekday) => {
            let mut date = here.date();
            for _ in 0..8 {
                if date.weekday() == weekday {
                    let candidate = at(date)?;
                    if candidate.timestamp() > now {
                        return Ok(candidate);
                    }
                }
                date = date.tomorrow().map_err(|_| WhenError::Unreadable)?;
            }
            Err(WhenError::Unreadable)
        }
    }
}

/// How a resolved time is said back: the day, the clock and the zone.
pub fn spoken(at: &Zoned) -> String {
    let zone = at.time_zone().iana_name().unwrap_or("UTC").to_owned();
    format!("{} ({zone})", at.strftime("%a %-d %b %Y, %H:%M"))
}

fn to_come(at: Zoned, now: Timestamp) -> Result<Zoned, WhenError> {
    if at.timestamp() <= now { Err(WhenError::Past(spoken(&at))) } else { Ok(at) }
}

/// "in 10 minutes", "5s", "1h 30m", "an hour and a half" is not read; "in an hour" is.
fn duration(text: &str) -> Option<SignedDuration> {
    let text = text.strip_prefix("in ").unwrap_or(text);
    let mut tokens = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || c == ',') {
        // "90s", "1h30m": split where digits and letters meet.
        let mut rest = word;
        while !rest.is_empty() {
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            let (part, tail) = if digits > 0 {
                rest.split_at(digits)
            } else {
                rest.split_at(rest.len() - rest.trim_start_matches(|c: char| !c.is_ascii_digit()).len())
            };
            tokens.push(part);
            rest = tail;
        }
    }
    let tokens: Vec<&str> = tokens.into_iter().filter(|t| !t.is_empty() && *t != "and").collect();
    if tokens.is_empty() || tokens.len() % 2 != 0 {
        return None;
    }
    let mut total: i64 = 0;
    for pair in tokens.chunks(2) {
        let n: i64 = match pair[0] {
            "a" | "an" | "one" => 1,
            n => n.parse().ok()?,
        };
        let unit = match pair[1] {
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
            "d" | "day" | "days" => 86_400,
            "w" | "week" | "weeks" => 7 * 86_400,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    (total > 0).then(|| SignedDuration::from_secs(total))
}

enum Day {
    On(Date),
    Next,
    Weekday(Weekday),
}

/// The day and the clock time of "tomorrow 9:00", "9 tomorrow", "friday at 7pm", "2026-12-24 18:00".
fn day_and_time(text: &str, today: Date) -> Result<(Day, Time), WhenError> {
    let (mut day, mut time, mut pm) = (None, None, None);
    for word in text.split_whitespace() {
        match word {
            "at" | "on" | "next" | "this" | "o'clock" => continue,
            "am" | "a.m." => pm = Some(false),
            "pm" | "p.m." => pm = Some(true),
            "today" | "tonight" => day = Some(Day::On(today)),
            "tomorrow" => day = Some(Day::On(today.tomorrow().map_err(|_| WhenError::Unreadable)?)),
            "noon" | "midday" => time = Some(Time::constant(12, 0, 0, 0)),
            "midnight" => time = Some(Time::constant(0, 0, 0, 0)),
            w if weekday(w).is_some() => day = weekday(w).map(Day::Weekday),
            w if w.len() >= 10 && w.as_bytes()[4] == b'-' => {
                let date = w.get(..10).and_then(|d| d.parse::<Date>().ok()).ok_or(WhenError::Unreadable)?;
                day = Some(Day::On(date));
                // "2026-12-24t18:00", as ISO 8601 writes a local time.
                if let Some(clock) = w.get(10..).filter(|c| !c.is_empty()) {
                    time = Some(clock.strip_prefix('t').and_then(clock_time).ok_or(WhenError::Unreadable)?);
                }
            }
            w => {
                let (clock, meridiem) = match w.strip_suffix("am").or_else(|| w.strip_suffix("a.m.")) {
                    Some(c) => (c, Some(false)),
                    None => match w.strip_suffix("pm").or_else(|| w.strip_suffix("p.m.")) {
                        Some(c) => (c, Some(true)),
                        None => (w, None),
                    },
                };
                if meridiem.is_some() {
                    pm = meridiem;
                }
                time = Some(clock_time(clock).ok_or(WhenError::Unreadable)?);
            }
        }
    }
    let mut time = time.ok_or(WhenError::Unreadable)?;
    match pm {
        Some(_) if time.hour() == 0 || time.hour() > 12 => return Err(WhenError::Unreadable),
        Some(true) if time.hour() < 12 => {
            time = Time::new(time.hour() + 12, time.minute(), time.second(), 0).map_err(|_| WhenError::Unreadable)?
        }
        Some(false) if time.hour() == 12 => time = Time::new(0, time.minute(), time.second(), 0).map_err(|_| WhenError::Unreadable)?,
        _ => {}
    }
    Ok((day.unwrap_or(Day::Next), time))
}

fn clock_time(clock: &str) -> Option<Time> {
    let mut parts = clock.split([':', '.']);
    let hour: i8 = parts.next()?.parse().ok()?;
    let minute: i8 = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    let second: i8 = parts.next().map_or(Some(0), |s| s.parse().ok())?;
    if parts.next().is_some() {
        return None;
    }
    Time::new(hour, minute, second, 0).ok()
}

fn weekday(word: &str) -> Option<Weekday> {
    let day = match word.get(..3)? {
        "mon" => Weekday::Monday,
        "tue" => Weekday::Tuesday,
        "wed" => Weekday::Wednesday,
        "thu" => Weekday::Thursday,
        "fri" => Weekday::Friday,
        "sat" => Weekday::Saturday,
        "sun" => Weekday::Sunday,
        _ => return None,
    };
    word.chars().all(|c| c.is_ascii_alphabetic()).then_some(day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Result<String, WhenError> {
        // Monday 7 December 2026, 18:30 in Berlin (17:30 UTC).
        let now: Timestamp = "2026-12-07T17:30:00Z".parse().unwrap();
        resolve(text, now, &zone("Europe/Berlin").unwrap()).map(|z| z.strftime("%F %T %Z").to_string())
    }

    #[test]
    fn remind_times_are_read_in_the_persons_zone() {
        assert_eq!(at("in 5 seconds").unwrap(), "2026-12-07 18:30:05 CET");
        assert_eq!(at("5s").unwrap(), "2026-12-07 18:30:05 CET");
        assert_eq!(at("in 1h 30m").unwrap(), "2026-12-07 20:00:00 CET");
        assert_eq!(at("in an hour").unwrap(), "2026-12-07 19:30:00 CET");
        assert_eq!(at("tomorrow 9:00").unwrap(), "2026-12-08 09:00:00 CET");
        assert_eq!(at("9 tomorrow").unwrap(), "2026-12-08 09:00:00 CET");
        assert_eq!(at("tomorrow at 9am").unwrap(), "2026-12-08 09:00:00 CET");
        assert_eq!(at("7pm").unwrap(), "2026-12-07 19:00:00 CET", "later today");
        assert_eq!(at("18:00").unwrap(), "2026-12-08 18:00:00 CET", "passed today: tomorrow");
        assert_eq!(at("friday 19:00").unwrap(), "2026-12-11 19:00:00 CET");
        assert_eq!(at("monday 9:00").unwrap(), "2026-12-14 09:00:00 CET", "this monday's has passed");
        assert_eq!(at("2026-12-24 18:00").unwrap(), "2026-12-24 18:00:00 CET");
        assert_eq!(at("2026-12-24T18:00").unwrap(), "2026-12-24 18:00:00 CET");
        assert_eq!(at("2027-07-01 09:00").unwrap(), "2027-07-01 09:00:00 CEST", "summer time is the zone's");
        assert_eq!(at("2026-12-08T08:00:00Z").unwrap(), "2026-12-08 09:00:00 CET");
        assert_eq!(at("12am tomorrow").unwrap(), "2026-12-08 00:00:00 CET");
    }

    #[test]
    fn remind_a_time_in_the_past_or_unreadable_is_refused() {
        assert!(matches!(at("2026-12-07 09:00"), Err(WhenError::Past(_))));
        assert!(matches!(at("today 9:00"), Err(WhenError::Past(_))));
        assert!(matches!(at("2026-12-07T17:00:00Z"), Err(WhenError::Past(_))));
        for bad in ["", "soon", "in five minutes", "25:00", "13pm", "tomorrow", "in 5 fortnights", "2026-13-01 09:00"] {
            assert_eq!(at(bad), Err(WhenError::Unreadable), "{bad:?}");
        }
    }

    #[test]
    fn remind_zones_are_iana_names() {
        assert!(zone("").is_some());
        assert!(zone("UTC").is_some());
        assert!(zone("America/New_York").is_some());
        assert!(zone("Mars/Olympus").is_none());
        assert_eq!(
            spoken(&resolve("tomorrow 9:00", "2026-12-07T17:30:00Z".parse().unwrap(), &zone("Europe/Berlin").unwrap()).unwrap()),
            "Tue 8 Dec 2026, 09:00 (Europe/Berlin)"
        );
    }
}
