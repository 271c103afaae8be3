//! Byte sizes as people write and read them: `500M`, `2G`, `1.5 GiB`.

/// Parses a size: a number of bytes with an optional binary suffix `K`, `M`, `G` or `T`
/// (powers of 1024, case-insensitive, optionally followed by `B` or `iB`), e.g. `500M`, `2G`,
/// `1.5G`, `10KiB`, `1234`. Surrounding whitespace is ignored. `None` for anything else, and for
/// sizes that do not fit in a `u64`.
pub fn parse_size(s: &str) -> Option<u64> {
    let lower = s.trim().to_ascii_lowercase();
    let (body, unit_required) = match lower.strip_suffix("ib") {
        Some(b) => (b, true),
        None => (lower.strip_suffix('b').unwrap_or(&lower), false),
    };
    let (number, shift) = match body.as_bytes().last()? {
        b'k' => (&body[..body.len() - 1], 10),
        b'm' => (&body[..body.len() - 1], 20),
        b'g' => (&body[..body.len() - 1], 30),
        b't' => (&body[..body.len() - 1], 40),
        _ if unit_required => return None,
        _ => (body, 0),
    };
    let number = number.trim_end();
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(1u64 << shift);
    }
    let f: f64 = number.parse().ok()?;
    let bytes = f * (1u64 << shift) as f64;
    (bytes.is_finite() && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// The size in binary units with one decimal, e.g. `1.5 GiB`, or in bytes below 1 KiB
/// (`1023 B`).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("500M"), Some(500 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("2GB"), Some(2 << 30));
        assert_eq!(parse_size("10k"), Some(10 << 10));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("1234"), Some(1234));
        assert_eq!(parse_size("1234B"), Some(1234));
        assert_eq!(parse_size(" 0 "), Some(0));
        for bad in [
            "",
            "G",
            "-1G",
            "12X",
            "1 2",
            "abc",
            "1e3",
            "99999999999T",
            "5iB",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn sizes_format() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(5 << 30), "5.0 GiB");
        assert_eq!(format_size(3 << 50), "3.0 PiB");
        assert_eq!(format_size(u64::MAX), "16384.0 PiB");
    }
}
