//! The syntax of HTTP `Range: bytes=…` headers (RFC 9110 §14.1.2), parsed once for every route
//! that takes one, and [`GrantedRanges`], the byte ranges a presigned URL grants. What a range
//! means for a given object (clamping, suffixes, how many are allowed) is the caller's business.

use std::ops::RangeInclusive;

/// One range of a `bytes=` range set, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRangeSpec {
    /// `first-last` (inclusive), or `first-` (`last: None`: to the end).
    From { first: u64, last: Option<u64> },
    /// `-n`: the last `n` bytes.
    Suffix(u64),
}

/// Why a `Range` value is not a valid byte range set; the messages complete "Range … ".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RangeSyntaxError {
    #[error("is not a byte range")]
    NotBytes,
    #[error("names no range")]
    Empty,
    #[error("has no '-'")]
    NoDash,
    #[error("is malformed")]
    Malformed,
    #[error("has a number that is too large")]
    TooLarge,
    #[error("ends before it starts")]
    Backwards,
}

/// Parses `bytes=SPEC[,SPEC…]` (unit case-insensitive, whitespace around numbers and list
/// elements allowed, empty list elements skipped). Numbers are decimal digits only.
pub fn parse_byte_ranges(value: &str) -> Result<Vec<ByteRangeSpec>, RangeSyntaxError> {
    let value = value.trim();
    let list = value
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case("bytes="))
        .map(|_| &value[6..])
        .ok_or(RangeSyntaxError::NotBytes)?;
    let mut out = Vec::new();
    for spec in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (a, b) = spec.split_once('-').ok_or(RangeSyntaxError::NoDash)?;
        let (a, b) = (a.trim(), b.trim());
        out.push(if a.is_empty() {
            ByteRangeSpec::Suffix(number(b)?)
        } else {
            let first = number(a)?;
            let last = if b.is_empty() { None } else { Some(number(b)?) };
            if last.is_some_and(|l| l < first) {
                return Err(RangeSyntaxError::Backwards);
            }
            ByteRangeSpec::From { first, last }
        });
    }
    if out.is_empty() {
        return Err(RangeSyntaxError::Empty);
    }
    Ok(out)
}

fn number(text: &str) -> Result<u64, RangeSyntaxError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RangeSyntaxError::Malformed);
    }
    text.parse().map_err(|_| RangeSyntaxError::TooLarge)
}

/// The byte ranges (inclusive) of an object that a presigned URL grants: sorted, none empty,
/// overlapping and adjacent ones merged, at most [`GrantedRanges::MAX`]. A request is served
/// only if every range it asks for lies within one of them ([`GrantedRanges::covers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantedRanges(Vec<RangeInclusive<u64>>);

/// Why the ranges of a presigned URL cannot be read; the messages complete "the ranges … ".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GrantSyntaxError {
    #[error("are empty")]
    Empty,
    #[error("are more than {max}", max = GrantedRanges::MAX)]
    TooMany,
    #[error("are not START-END pairs of decimal numbers")]
    Malformed,
    #[error("are not sorted, separate and merged")]
    NotCanonical,
}

impl GrantedRanges {
    /// At most this many ranges per grant (a v2 reconstruction entry has at most 256).
    pub const MAX: usize = 1024;

    /// The grant of `ranges` (any order; overlapping and adjacent ones are merged); `None`
    /// when there is none or one ends before it starts.
    pub fn new(ranges: impl IntoIterator<Item = RangeInclusive<u64>>) -> Option<Self> {
        let mut all: Vec<RangeInclusive<u64>> = ranges.into_iter().collect();
        if all.is_empty() || all.iter().any(|r| r.end() < r.start()) {
            return None;
        }
        all.sort_by_key(|r| (*r.start(), *r.end()));
        let mut merged: Vec<RangeInclusive<u64>> = Vec::with_capacity(all.len());
        for r in all {
            match merged.last_mut() {
                Some(last) if *r.start() <= last.end().saturating_add(1) => {
                    if r.end() > last.end() {
                        *last = *last.start()..=*r.end();
                    }
                }
                _ => merged.push(r),
            }
        }
        (merged.len() <= Self::MAX).then_some(Self(merged))
    }

    /// The ranges, sorted and separate.
    pub fn ranges(&self) -> &[RangeInclusive<u64>] {
        &self.0
    }

    /// Whether `range` lies within one granted range.
    pub fn covers(&self, range: &RangeInclusive<u64>) -> bool {
        // The last granted range starting at or before `range`.
        let i = self.0.partition_point(|g| g.start() <= range.start());
        i > 0 && self.0[i - 1].end() >= range.end() && range.start() <= range.end()
    }

    /// The query-parameter form: `START-END` pairs joined by `,` (what a URL signature covers).
    pub fn to_param(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|r| format!("{}-{}", r.start(), r.end()))
            .collect();
        parts.join(",")
    }

    /// Reads [`Self::to_param`]'s form back, strictly: only that canonical form is accepted.
    pub fn parse_param(text: &str) -> Result<Self, GrantSyntaxError> {
        if text.is_empty() {
            return Err(GrantSyntaxError::Empty);
        }
        let mut out: Vec<RangeInclusive<u64>> = Vec::new();
        for pair in text.split(',') {
            if out.len() == Self::MAX {
                return Err(GrantSyntaxError::TooMany);
            }
            let (a, b) = pair.split_once('-').ok_or(GrantSyntaxError::Malformed)?;
            let canonical_number = |t: &str| {
                let digits = !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
                let no_leading_zero = t == "0" || !t.starts_with('0');
                if !digits || !no_leading_zero {
                    return Err(GrantSyntaxError::Malformed);
                }
                t.parse::<u64>().map_err(|_| GrantSyntaxError::Malformed)
            };
            let (start, end) = (canonical_number(a)?, canonical_number(b)?);
            if end < start {
                return Err(GrantSyntaxError::NotCanonical);
            }
            if let Some(last) = out.last() {
                if start <= last.end().saturating_add(1) {
                    return Err(GrantSyntaxError::NotCanonical);
                }
            }
            out.push(start..=end);
        }
        Ok(Self(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ByteRangeSpec::*;

    #[test]
    fn range_sets_parse() {
        assert_eq!(
            parse_byte_ranges("bytes=0-99"),
            Ok(vec![From {
                first: 0,
                last: Some(99)
            }])
        );
        assert_eq!(
            parse_byte_ranges(" BYTES= 5 - 7 , -3,, 9- "),
            Ok(vec![
                From {
                    first: 5,
                    last: Some(7)
                },
                Suffix(3),
                From {
                    first: 9,
                    last: None
                }
            ])
        );
        let bad = [
            ("items=0-1", RangeSyntaxError::NotBytes),
            ("bytes", RangeSyntaxError::NotBytes),
            ("", RangeSyntaxError::NotBytes),
            ("bytes= , ", RangeSyntaxError::Empty),
            ("bytes=5", RangeSyntaxError::NoDash),
            ("bytes=a-b", RangeSyntaxError::Malformed),
            ("bytes=-", RangeSyntaxError::Malformed),
            ("bytes=+1-2", RangeSyntaxError::Malformed),
            ("bytes=99999999999999999999-", RangeSyntaxError::TooLarge),
            ("bytes=5-4", RangeSyntaxError::Backwards),
        ];
        for (text, want) in bad {
            assert_eq!(parse_byte_ranges(text), Err(want), "{text}");
        }
    }

    #[test]
    fn grants_merge_cover_and_round_trip() {
        let g = GrantedRanges::new([10..=19, 0..=4, 5..=7, 30..=40, 35..=36]).unwrap();
        assert_eq!(g.ranges(), &[0..=7, 10..=19, 30..=40]);
        assert_eq!(g.to_param(), "0-7,10-19,30-40");
        assert_eq!(GrantedRanges::parse_param("0-7,10-19,30-40"), Ok(g.clone()));
        for inside in [0..=7, 2..=3, 10..=19, 30..=30, 40..=40] {
            assert!(g.covers(&inside), "{inside:?}");
        }
        for outside in [0..=8, 7..=10, 8..=9, 20..=20, 41..=41, 29..=30, 0..=40] {
            assert!(!g.covers(&outside), "{outside:?}");
        }
        assert_eq!(GrantedRanges::new(Vec::new()), None);
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = GrantedRanges::new([5..=4]);
        assert_eq!(backwards, None);
        let too_many = (0..=GrantedRanges::MAX as u64).map(|i| 3 * i..=3 * i);
        assert_eq!(GrantedRanges::new(too_many), None);
        let edge = GrantedRanges::new([u64::MAX - 1..=u64::MAX, 0..=0]).unwrap();
        assert!(edge.covers(&(u64::MAX..=u64::MAX)));
    }

    #[test]
    fn grant_params_are_strict() {
        use GrantSyntaxError::*;
        let cases = [
            ("", Empty),
            ("5", Malformed),
            ("a-b", Malformed),
            ("-5", Malformed),
            ("05-6", Malformed),
            ("1-+2", Malformed),
            (" 1-2", Malformed),
            ("1-2,", Malformed),
            ("99999999999999999999-1", Malformed),
            ("5-4", NotCanonical),
            ("0-4,5-9", NotCanonical),
            ("10-20,0-4", NotCanonical),
            ("0-9,5-20", NotCanonical),
        ];
        for (text, want) in cases {
            assert_eq!(GrantedRanges::parse_param(text), Err(want), "{text:?}");
        }
        let many = vec!["0-0"; 1]
            .into_iter()
            .chain((1..=GrantedRanges::MAX).map(|_| "x"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(GrantedRanges::parse_param(&many), Err(Malformed));
        let over: Vec<String> = (0..=GrantedRanges::MAX as u64)
            .map(|i| format!("{}-{}", 3 * i, 3 * i))
            .collect();
        assert_eq!(GrantedRanges::parse_param(&over.join(",")), Err(TooMany));
        assert_eq!(
            GrantedRanges::parse_param("0-0,2-2").unwrap().ranges(),
            &[0..=0, 2..=2]
        );
    }
}
