//! The 8-byte chunk header (docs/format.md §3.2) and the compression scheme codes.
//!
//! | Offset | Size | Field | Notes |
//! |---|---|---|---|
//! | 0 | 1 | `version` | 0; readers reject anything else |
//! | 1 | 3 | `compressed_length` | u24 LE, payload bytes after the header, ≤ 262144 |
//! | 4 | 1 | `compression_scheme` | 0 = None, 1 = LZ4, 2 = BG4-LZ4 |
//! | 5 | 3 | `uncompressed_length` | u24 LE, ≤ 131072 |
//!
//! Zero lengths are allowed. A header position whose first seven bytes are the footer ident
//! `XETBLOB` is not a chunk: the footer starts there ([`HeaderError::FooterIdent`]). No valid
//! header can look like that, because byte 4 of the ident (`L`, 76) is not a scheme code.

use std::fmt;

use super::footer::FOOTER_IDENT;

/// Bytes in a chunk header.
pub const CHUNK_HEADER_LEN: usize = 8;
/// Largest uncompressed chunk (`MAX_CHUNK_SIZE` = 2 × 64 KiB).
pub const MAX_CHUNK_LEN: u32 = 131_072;
/// Largest `compressed_length` a reader accepts (2 × [`MAX_CHUNK_LEN`]).
pub const MAX_COMPRESSED_LEN: u32 = 2 * MAX_CHUNK_LEN;

/// The only chunk header version.
const VERSION: u8 = 0;

/// How a chunk's payload is encoded. xet-core's `Auto` (99) is a writer setting, never written;
/// see [`CompressionPolicy`](super::CompressionPolicy) for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CompressionScheme {
    /// The payload is the chunk's bytes.
    None,
    /// The payload is one LZ4 frame of the chunk's bytes.
    Lz4,
    /// The payload is one LZ4 frame of the BG4-split chunk bytes.
    Bg4Lz4,
}

impl CompressionScheme {
    /// The byte written in chunk headers.
    pub const fn code(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Lz4 => 1,
            Self::Bg4Lz4 => 2,
        }
    }

    /// The scheme of a header byte, if it names one.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::None),
            1 => Some(Self::Lz4),
            2 => Some(Self::Bg4Lz4),
            _ => None,
        }
    }

    /// The name xet-core uses (`none`, `lz4`, `bg4-lz4`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Lz4 => "lz4",
            Self::Bg4Lz4 => "bg4-lz4",
        }
    }
}

impl fmt::Display for CompressionScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why 8 bytes are not a valid chunk header. The messages follow §3.2's reader checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("the footer ident XETBLOB starts here, not a chunk header")]
    FooterIdent,
    #[error("chunk header version {0} is not supported (only 0)")]
    Version(u8),
    #[error("unknown compression scheme {0} (expected 0, 1 or 2)")]
    Scheme(u8),
    #[error("compressed_length {0} exceeds 262144")]
    CompressedTooLong(u32),
    #[error("uncompressed_length {0} exceeds 131072")]
    UncompressedTooLong(u32),
}

/// A validated chunk header: both lengths are within the limits, so it always encodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkHeader {
    scheme: CompressionScheme,
    compressed_len: u32,
    uncompressed_len: u32,
}

impl ChunkHeader {
    /// A header, if both lengths are within the limits of §3.2.
    pub fn new(
        scheme: CompressionScheme,
        compressed_len: u32,
        uncompressed_len: u32,
    ) -> Result<Self, HeaderError> {
        if compressed_len > MAX_COMPRESSED_LEN {
            return Err(HeaderError::CompressedTooLong(compressed_len));
        }
        if uncompressed_len > MAX_CHUNK_LEN {
            return Err(HeaderError::UncompressedTooLong(uncompressed_len));
        }
        Ok(Self {
            scheme,
            compressed_len,
            uncompressed_len,
        })
    }

    pub fn scheme(&self) -> CompressionScheme {
        self.scheme
    }

    /// Payload bytes after the header.
    pub fn compressed_len(&self) -> u32 {
        self.compressed_len
    }

    pub fn uncompressed_len(&self) -> u32 {
        self.uncompressed_len
    }

    /// Header plus payload.
    pub fn chunk_len(&self) -> u64 {
        CHUNK_HEADER_LEN as u64 + u64::from(self.compressed_len)
    }

    /// The 8 header bytes.
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        // Both lengths are < 2^24 (checked in `new`), so three bytes hold them.
        let c = self.compressed_len.to_le_bytes();
        let u = self.uncompressed_len.to_le_bytes();
        [
            VERSION,
            c[0],
            c[1],
            c[2],
            self.scheme.code(),
            u[0],
            u[1],
            u[2],
        ]
    }

    /// Parses 8 header bytes with every reader check of §3.2.
    pub fn decode(bytes: &[u8; CHUNK_HEADER_LEN]) -> Result<Self, HeaderError> {
        if starts_footer(bytes) {
            return Err(HeaderError::FooterIdent);
        }
        // A fixed-size array: destructuring it cannot fail. (The reader takes these 8 bytes from
        // its `Cursor`, which checked they are present.)
        let [version, c0, c1, c2, scheme_code, u0, u1, u2] = *bytes;
        let compressed_len = u32::from_le_bytes([c0, c1, c2, 0]);
        let uncompressed_len = u32::from_le_bytes([u0, u1, u2, 0]);
        if version != VERSION {
            return Err(HeaderError::Version(version));
        }
        let scheme =
            CompressionScheme::from_code(scheme_code).ok_or(HeaderError::Scheme(scheme_code))?;
        Self::new(scheme, compressed_len, uncompressed_len)
    }
}

/// True if `bytes` start with the footer ident `XETBLOB`: at a chunk-header position, the chunk
/// region has ended and the footer starts.
pub fn starts_footer(bytes: &[u8]) -> bool {
    bytes.starts_with(&FOOTER_IDENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_documented_bytes() {
        let h = ChunkHeader::new(CompressionScheme::Lz4, 30, 1000).unwrap();
        assert_eq!(h.encode(), [0, 0x1e, 0, 0, 1, 0xe8, 0x03, 0]);
        assert_eq!(ChunkHeader::decode(&h.encode()), Ok(h));
        assert_eq!(h.chunk_len(), 38);
    }

    #[test]
    fn limits_are_inclusive() {
        let max = ChunkHeader::new(CompressionScheme::None, MAX_COMPRESSED_LEN, MAX_CHUNK_LEN);
        let max = max.unwrap();
        assert_eq!(ChunkHeader::decode(&max.encode()), Ok(max));
        let zero = ChunkHeader::new(CompressionScheme::Bg4Lz4, 0, 0).unwrap();
        assert_eq!(ChunkHeader::decode(&zero.encode()), Ok(zero));
        assert_eq!(
            ChunkHeader::new(CompressionScheme::None, MAX_COMPRESSED_LEN + 1, 0),
            Err(HeaderError::CompressedTooLong(262_145))
        );
        assert_eq!(
            ChunkHeader::new(CompressionScheme::None, 0, MAX_CHUNK_LEN + 1),
            Err(HeaderError::UncompressedTooLong(131_073))
        );
    }

    #[test]
    fn reader_checks() {
        let ok = [0, 1, 0, 0, 0, 1, 0, 0];
        assert!(ChunkHeader::decode(&ok).is_ok());
        let mut v = ok;
        v[0] = 1;
        assert_eq!(ChunkHeader::decode(&v), Err(HeaderError::Version(1)));
        for code in [3u8, 76, 99, 255] {
            let mut s = ok;
            s[4] = code;
            assert_eq!(ChunkHeader::decode(&s), Err(HeaderError::Scheme(code)));
        }
        let too_long = [0, 0x01, 0x00, 0x04, 0, 0, 0, 0];
        assert_eq!(
            ChunkHeader::decode(&too_long),
            Err(HeaderError::CompressedTooLong(0x040001))
        );
        let too_big = [0, 0, 0, 0, 0, 0x01, 0x00, 0x02];
        assert_eq!(
            ChunkHeader::decode(&too_big),
            Err(HeaderError::UncompressedTooLong(0x020001))
        );
        assert_eq!(
            ChunkHeader::decode(b"XETBLOB\x01"),
            Err(HeaderError::FooterIdent)
        );
        // Without the ident check, "XETBLOB" would fail on its version byte 'X'.
        assert_eq!(
            ChunkHeader::decode(b"XETBLOC\x01"),
            Err(HeaderError::Version(b'X'))
        );
    }

    #[test]
    fn scheme_codes_round_trip() {
        for s in [
            CompressionScheme::None,
            CompressionScheme::Lz4,
            CompressionScheme::Bg4Lz4,
        ] {
            assert_eq!(CompressionScheme::from_code(s.code()), Some(s));
        }
        assert_eq!(CompressionScheme::from_code(99), None);
        assert_eq!(CompressionScheme::Bg4Lz4.to_string(), "bg4-lz4");
    }
}
