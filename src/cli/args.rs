//! The value parsers of flags that take a size or a duration, one of each for every command,
//! with the same words when a value is refused.

use std::time::Duration;

/// A byte size (`500M`, `2G`, `1234`; see [`xet_protocol::util::size::parse_size`]).
pub(crate) fn size(s: &str) -> Result<u64, String> {
    xet_protocol::util::size::parse_size(s).ok_or_else(|| {
        format!("`{s}` is not a size: use bytes or a number with K, M, G or T (e.g. 500M, 2G)")
    })
}

/// A duration (`90`, `0.5`, `30m`, `24h`; see [`xet_protocol::util::duration::parse_duration`]).
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    xet_protocol::util::duration::parse_duration(s).ok_or_else(|| {
        format!(
            "`{s}` is not a duration: use seconds (90, 0.5) or a number with a unit (30s, 10m, \
             24h, 1d)"
        )
    })
}

/// A duration longer than zero (timeouts, lifetimes).
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn positive_duration(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        d if d.is_zero() => Err(format!("`{s}`: give a duration longer than zero")),
        d => Ok(d),
    }
}

/// A grace period of garbage collection (`git xet gc --grace`, `git xet serve --gc-grace`): at
/// least [`xet_store::gc::MIN_GRACE`].
pub(crate) fn grace(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    let min = xet_store::gc::MIN_GRACE;
    if d < min {
        return Err(format!(
            "`{s}` is shorter than the shortest grace period, {}m: a shorter one would have \
             garbage collection delete the xorbs of pushes still in flight, which would then \
             fail and send them again",
            min.as_secs() / 60
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grace_period_shorter_than_the_minimum_is_refused() {
        assert_eq!(grace("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(grace("24h"), Ok(Duration::from_secs(86400)));
        let e = grace("1m").unwrap_err();
        assert!(e.contains("`1m`") && e.contains("10m"), "{e}");
        assert!(grace("0").is_err());
        assert!(grace("soon").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn refusals_say_what_to_write() {
        assert_eq!(size("2G"), Ok(2 << 30));
        assert!(size("two").unwrap_err().contains("500M"));
        assert_eq!(duration("24h"), Ok(Duration::from_secs(86400)));
        assert_eq!(positive_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(duration("soon").unwrap_err().contains("24h"));
        assert!(positive_duration("0")
            .unwrap_err()
            .contains("longer than zero"));
    }
}
