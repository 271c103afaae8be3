//! Durations as people write them, one parser for every flag and variable: a number of
//! seconds (`90`, `0.5`) or a number with units as `humantime` reads them (`30s`, `10m`, `24h`,
//! `1d`, `1h 30m`, `250ms`).

use std::time::Duration;

/// The longest duration accepted (about 31 years): beyond it, `Instant` arithmetic overflows.
const MAX_SECS: f64 = 1e9;

/// Parses a duration (see the module documentation); `None` for anything else, negative or
/// not finite numbers, and durations over about 31 years.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = s.parse().ok()?;
        return (secs.is_finite() && (0.0..=MAX_SECS).contains(&secs))
            .then(|| Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(s)
        .ok()
        .filter(|d| d.as_secs_f64() <= MAX_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_seconds_and_units_are_read() {
        let s = Duration::from_secs;
        assert_eq!(parse_duration("90"), Some(s(90)));
        assert_eq!(parse_duration(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Some(s(0)));
        assert_eq!(parse_duration("30s"), Some(s(30)));
        assert_eq!(parse_duration("10m"), Some(s(600)));
        assert_eq!(parse_duration("24h"), Some(s(86400)));
        assert_eq!(parse_duration("1d"), Some(s(86400)));
        assert_eq!(parse_duration("1h 30m"), Some(s(5400)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        for bad in [
            "",
            "-1",
            "x",
            "1.2.3",
            "10 parsecs",
            "1e3",
            "inf",
            "99999999999",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
