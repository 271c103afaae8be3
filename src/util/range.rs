//! The syntax of HTTP `Range: bytes=…` headers (RFC 9110 §14.1.2), parsed once for every route
//! that takes one. What a range means for a given object (clamping, suffixes, how many are
//! allowed) is the caller's business.

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
}
