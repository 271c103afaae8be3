//! Git LFS pointer files: strict parsing and canonical formatting.
//!
//! A pointer is the small text blob git stores in place of a large file:
//!
//! ```text
//! version https://git-lfs.github.com/spec/v1
//! oid sha256:7f83b1657ff1fc53b92dc18148a1d65dfc2d4b1fa3d677284addd200126d9069
//! size 12
//! ```
//!
//! Each line is `key value\n`. `version` comes first, then any extension lines
//! (`ext-<digit>-<name> sha256:<hex>`, in priority order), then `oid`, then `size`. There is
//! exactly one valid encoding of a pointer, so [`Pointer::parse`] accepts only that encoding
//! (byte for byte what [`Pointer::encode`] writes), apart from the two historical version URLs
//! git-lfs still reads. Blobs of 1024 bytes or more are never pointers. An empty blob is an empty
//! file, not a pointer: git-lfs never converts empty files.

use std::fmt;

use super::hash::LfsOid;

/// The version URL every pointer is written with.
pub const VERSION_URL: &str = "https://git-lfs.github.com/spec/v1";
/// Version URLs accepted when reading (git-lfs's aliases, compared byte for byte).
pub const ACCEPTED_VERSIONS: [&str; 3] = [
    VERSION_URL,
    "https://hawser.github.com/spec/v1",
    "http://git-media.io/v/2",
];
/// A blob this long or longer is not a pointer (git-lfs's `blobSizeCutoff`).
pub const MAX_POINTER_LEN: usize = 1024;

/// One extension line: `ext-<priority>-<name> sha256:<oid>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointerExtension {
    /// 0 to 9; lines are ordered by it and no two share one.
    pub priority: u8,
    /// `[A-Za-z0-9_]+`.
    pub name: String,
    /// SHA-256 of the extension's input.
    pub oid: LfsOid,
}

/// A parsed Git LFS pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    pub oid: LfsOid,
    pub size: u64,
    pub extensions: Vec<PointerExtension>,
}

/// Why a blob is not a valid pointer. Line numbers count from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    #[error("empty blob: an empty file is stored as itself, not as a pointer")]
    Empty,
    #[error("{0} bytes is too large for a pointer (limit {MAX_POINTER_LEN})")]
    TooLarge(usize),
    #[error("pointer is not valid UTF-8")]
    NotUtf8,
    #[error("pointer does not end with a newline")]
    NoFinalNewline,
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("missing `{0}` line")]
    Missing(&'static str),
}

fn line_err(line: usize, reason: impl Into<String>) -> PointerError {
    PointerError::Line {
        line,
        reason: reason.into(),
    }
}

/// Parses `sha256:<64 lowercase hex>`.
fn parse_oid(value: &str, line: usize) -> Result<LfsOid, PointerError> {
    let hex = value.strip_prefix("sha256:").ok_or_else(|| {
        line_err(
            line,
            format!("oid {value:?} is not of the form sha256:<hex>"),
        )
    })?;
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(line_err(
            line,
            format!("oid {hex:?} is not 64 lowercase hex digits"),
        ));
    }
    LfsOid::from_hex(hex).map_err(|e| line_err(line, e.to_string()))
}

/// Parses a canonical decimal size: digits only, no sign, no leading zeros, at most `i64::MAX`
/// (git-lfs stores sizes as `int64`).
fn parse_size(value: &str, line: usize) -> Result<u64, PointerError> {
    let canonical = !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_digit())
        && (value == "0" || !value.starts_with('0'));
    if !canonical {
        return Err(line_err(
            line,
            format!("size {value:?} is not a canonical decimal number"),
        ));
    }
    match value.parse::<u64>() {
        Ok(n) if n <= i64::MAX as u64 => Ok(n),
        _ => Err(line_err(line, format!("size {value} is out of range"))),
    }
}

/// Parses `ext-<digit>-<name>` into (priority, name).
fn parse_extension_key(key: &str, line: usize) -> Result<(u8, String), PointerError> {
    let bad = || {
        line_err(
            line,
            format!("{key:?} is not an extension key ext-<digit>-<name>"),
        )
    };
    let rest = key.strip_prefix("ext-").ok_or_else(bad)?;
    let mut parts = rest.splitn(2, '-');
    let digit = parts.next().ok_or_else(bad)?;
    let name = parts.next().ok_or_else(bad)?;
    if digit.len() != 1 || !digit.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(bad());
    }
    Ok((digit.as_bytes()[0] - b'0', name.to_string()))
}

impl Pointer {
    /// A pointer with no extensions.
    pub fn new(oid: LfsOid, size: u64) -> Self {
        Self {
            oid,
            size,
            extensions: Vec::new(),
        }
    }

    /// True if `blob` is small enough that it could be a pointer and starts like one; a cheap
    /// check before [`Pointer::parse`].
    pub fn looks_like_pointer(blob: &[u8]) -> bool {
        blob.len() < MAX_POINTER_LEN && blob.starts_with(b"version ")
    }

    /// Parses a pointer blob, accepting only its canonical encoding.
    pub fn parse(blob: &[u8]) -> Result<Self, PointerError> {
        if blob.is_empty() {
            return Err(PointerError::Empty);
        }
        if blob.len() >= MAX_POINTER_LEN {
            return Err(PointerError::TooLarge(blob.len()));
        }
        let text = std::str::from_utf8(blob).map_err(|_| PointerError::NotUtf8)?;
        let body = text
            .strip_suffix('\n')
            .ok_or(PointerError::NoFinalNewline)?;

        let mut version = None;
        let mut extensions: Vec<PointerExtension> = Vec::new();
        let mut oid = None;
        let mut size = None;
        for (i, raw) in body.split('\n').enumerate() {
            let line = i + 1;
            let (key, value) = raw
                .split_once(' ')
                .ok_or_else(|| line_err(line, format!("{raw:?} is not `key value`")))?;
            if value.contains('\r') {
                return Err(line_err(line, "carriage return in value"));
            }
            if size.is_some() {
                return Err(line_err(line, format!("extra line after size: {raw:?}")));
            }
            match key {
                "version" if line == 1 => {
                    if !ACCEPTED_VERSIONS.contains(&value) {
                        return Err(line_err(line, format!("unknown version {value:?}")));
                    }
                    version = Some(value);
                }
                _ if version.is_none() => {
                    return Err(line_err(
                        line,
                        format!("expected `version` first, got {key:?}"),
                    ));
                }
                "oid" if oid.is_none() => oid = Some(parse_oid(value, line)?),
                "size" if oid.is_some() => size = Some(parse_size(value, line)?),
                k if k.starts_with("ext-") && oid.is_none() => {
                    let (priority, name) = parse_extension_key(k, line)?;
                    if let Some(prev) = extensions.last() {
                        if priority <= prev.priority {
                            return Err(line_err(
                                line,
                                format!(
                                    "extension priority {priority} is out of order or repeated"
                                ),
                            ));
                        }
                    }
                    let oid = parse_oid(value, line)?;
                    extensions.push(PointerExtension {
                        priority,
                        name,
                        oid,
                    });
                }
                other => {
                    return Err(line_err(line, format!("unexpected key {other:?}")));
                }
            }
        }
        let oid = oid.ok_or(PointerError::Missing("oid"))?;
        let size = size.ok_or(PointerError::Missing("size"))?;
        Ok(Self {
            oid,
            size,
            extensions,
        })
    }

    /// The canonical encoding, always with the current version URL.
    pub fn encode(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "version {VERSION_URL}")?;
        for ext in &self.extensions {
            writeln!(f, "ext-{}-{} sha256:{}", ext.priority, ext.name, ext.oid)?;
        }
        writeln!(f, "oid sha256:{}", self.oid)?;
        writeln!(f, "size {}", self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO: &str = "version https://git-lfs.github.com/spec/v1\n\
        oid sha256:7f83b1657ff1fc53b92dc18148a1d65dfc2d4b1fa3d677284addd200126d9069\n\
        size 12\n";

    #[test]
    fn parses_and_formats_canonical_pointer() {
        let p = Pointer::parse(HELLO.as_bytes()).unwrap();
        assert_eq!(p.oid, LfsOid::of(b"Hello World!"));
        assert_eq!(p.size, 12);
        assert_eq!(p.encode(), HELLO);
        assert!(Pointer::looks_like_pointer(HELLO.as_bytes()));
    }

    #[test]
    fn accepts_historical_versions_and_writes_current() {
        let old = HELLO.replace(VERSION_URL, "https://hawser.github.com/spec/v1");
        let p = Pointer::parse(old.as_bytes()).unwrap();
        assert_eq!(p.encode(), HELLO);
    }

    #[test]
    fn extensions_round_trip_in_priority_order() {
        let text = format!(
            "version {VERSION_URL}\next-0-foo sha256:{a}\next-1-bar_2 sha256:{a}\noid sha256:{a}\nsize 0\n",
            a = "a".repeat(64)
        );
        let p = Pointer::parse(text.as_bytes()).unwrap();
        assert_eq!(p.extensions.len(), 2);
        assert_eq!(p.extensions[1].name, "bar_2");
        assert_eq!(p.encode(), text);
        let swapped = text.replace("ext-0-foo", "ext-2-foo");
        assert!(Pointer::parse(swapped.as_bytes()).is_err());
    }

    #[test]
    fn rejects_non_canonical_forms() {
        let cases: Vec<String> = vec![
            HELLO.trim_end().to_string(),                         // no final newline
            HELLO.replace("size 12", "size 012"),                 // leading zero
            HELLO.replace("size 12", "size -1"),                  // sign
            HELLO.replace("size 12", "size 9223372036854775808"), // > i64::MAX
            HELLO.replace("7f83", "7F83"),                        // uppercase oid
            HELLO.replace("sha256:", "sha1:"),                    // wrong oid type
            HELLO.replace("\n", "\r\n"),                          // CRLF
            HELLO.replace("size 12\n", "size 12\nfoo bar\n"),     // extra line
            HELLO.replace("version https://git-lfs.github.com/spec/v1\n", ""), // no version
            format!("{HELLO}\n"),                                 // trailing empty line
            HELLO.replace("oid ", "oid  "),                       // double space
            HELLO.replace("https://", "http://"),                 // unknown version
            HELLO.replace("size 12\n", ""),                       // missing size
        ];
        for case in cases {
            assert!(
                Pointer::parse(case.as_bytes()).is_err(),
                "accepted {case:?}"
            );
        }
        assert_eq!(Pointer::parse(b""), Err(PointerError::Empty));
        assert_eq!(
            Pointer::parse(&[b'x'; 1024]),
            Err(PointerError::TooLarge(1024))
        );
        assert_eq!(Pointer::parse(&[0xff, b'\n']), Err(PointerError::NotUtf8));
    }

    #[test]
    fn errors_name_the_line() {
        let bad = HELLO.replace("size 12", "size twelve");
        let err = Pointer::parse(bad.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: size \"twelve\" is not a canonical decimal number"
        );
    }
}
