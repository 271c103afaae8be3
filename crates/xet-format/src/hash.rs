//! Typed Xet hashes and every hash function of the format (docs/format.md §1).
//!
//! A hash is 32 raw bytes. Each kind of hash gets its own type ([`ChunkHash`], [`XorbHash`],
//! [`FileHash`], [`ShardHash`], [`VerificationHash`]) so that one can never be passed where another
//! is expected. Their text form is the Xet *string form* (§1.2): every 8-byte word is read as a
//! little-endian `u64` and printed as 16 lowercase hex digits. [`LfsOid`] is different: it is a
//! plain SHA-256 digest printed as ordinary hex, and it converts to and from the word-reversed
//! bytes that shards store in `FileMetadataExt` (§1.9).
//!
//! Pure code: no I/O, and nothing here depends on the host byte order.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// Chunk hashes: `blake3_keyed(DATA_KEY, chunk bytes)`; also names local shard files (§1.1).
pub const DATA_KEY: [u8; 32] =
    hex32("6697f5775b9550de3135cbaca597181c9de421109beb2b58b4d0b04b93adf229");
/// Interior nodes of the aggregated hash (§1.4).
pub const INTERNAL_NODE_KEY: [u8; 32] =
    hex32("017ec5c7a5472996fd946666b48a02e65ddd536f37c76dd2f86352e64a53713f");
/// Term verification ("range") hashes (§1.7).
pub const VERIFICATION_KEY: [u8; 32] =
    hex32("7f1857d6ce56ed66127ff913e7a5c3f3a4cd26d5b5db49e64124987f28fb94c3");

/// Decodes 64 plain hex digits at compile time (used only for the key constants above).
const fn hex32(s: &str) -> [u8; 32] {
    const fn nibble(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            // Evaluated at compile time only: a malformed key constant fails the build.
            #[allow(clippy::panic)]
            _ => panic!("key constants are lowercase hex"),
        }
    }
    let b = s.as_bytes();
    assert!(b.len() == 64);
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = (nibble(b[2 * i]) << 4) | nibble(b[2 * i + 1]);
        i += 1;
    }
    out
}

/// Why a hash string did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashParseError {
    #[error("a hash must be 64 hex digits, got {0} characters")]
    Length(usize),
    #[error("invalid hex digit {ch:?} at position {pos} of the hash")]
    Digit { ch: char, pos: usize },
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes exactly 64 hex digits (either case) into 32 bytes in text order.
fn decode_hex32(s: &str) -> Result<[u8; 32], HashParseError> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return Err(HashParseError::Length(s.chars().count()));
    }
    let mut out = [0u8; 32];
    let digit = |pos: usize| {
        hex_val(b[pos]).ok_or_else(|| HashParseError::Digit {
            ch: s.get(pos..).and_then(|t| t.chars().next()).unwrap_or('?'),
            pos,
        })
    };
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = (digit(2 * i)? << 4) | digit(2 * i + 1)?;
    }
    Ok(out)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes 32 bytes as 64 lowercase hex digits, in the given byte order.
fn encode_hex32(bytes: &[u8; 32], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let mut out = [0u8; 64];
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = HEX[(b >> 4) as usize];
        out[2 * i + 1] = HEX[(b & 15) as usize];
    }
    // Only ASCII hex digits were written above.
    f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
}

/// Reverses the bytes inside each 8-byte word: the map between raw bytes and the text order of
/// the Xet string form, and between a SHA-256 digest and its `FileMetadataExt` bytes. It is its
/// own inverse.
pub const fn reverse_words(raw: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut w = 0;
    while w < 4 {
        let mut i = 0;
        while i < 8 {
            out[w * 8 + i] = raw[w * 8 + 7 - i];
            i += 1;
        }
        w += 1;
    }
    out
}

fn word(raw: &[u8; 32], w: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&raw[w * 8..w * 8 + 8]);
    u64::from_le_bytes(b)
}

/// Serde through the string form: a hash is a JSON string of 64 hex digits (the Xet string form
/// for Xet hashes, plain hex for [`LfsOid`]), also as a map key; parsing accepts either case.
macro_rules! serde_as_hex {
    ($name:ident) => {
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Hex;
                impl serde::de::Visitor<'_> for Hex {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " as 64 hex digits"))
                    }
                    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<$name, E> {
                        $name::from_hex(text).map_err(|e| {
                            let shown: String = text.chars().take(80).collect();
                            E::custom(format_args!(
                                concat!("{:?} is not a ", stringify!($name), ": {}"),
                                shown, e
                            ))
                        })
                    }
                }
                deserializer.deserialize_str(Hex)
            }
        }
    };
}

macro_rules! xet_hash {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name([u8; 32]);

        impl $name {
            /// The all-zero hash.
            pub const ZERO: Self = Self([0u8; 32]);

            /// Wraps 32 raw bytes, as they appear inside binary structures.
            pub const fn from_bytes(raw: [u8; 32]) -> Self {
                Self(raw)
            }

            /// The 32 raw bytes, as they appear inside binary structures.
            pub const fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            /// The 32 raw bytes by value.
            pub const fn to_bytes(self) -> [u8; 32] {
                self.0
            }

            /// Parses the Xet string form (§1.2): 64 hex digits, upper- or lowercase.
            pub fn from_hex(s: &str) -> Result<Self, HashParseError> {
                Ok(Self(reverse_words(&decode_hex32(s)?)))
            }

            /// The Xet string form (§1.2), 64 lowercase hex digits.
            pub fn to_hex(&self) -> String {
                self.to_string()
            }

            /// True for the all-zero hash.
            pub fn is_zero(&self) -> bool {
                self.0 == [0u8; 32]
            }

            /// `hash % n` of §1.2: the last 8-byte word, little-endian, modulo `n`.
            pub fn modulo(&self, n: u64) -> u64 {
                word(&self.0, 3) % n
            }

            /// The truncated hash of §1.2 (first word, little-endian): the key of shard lookup
            /// tables.
            pub fn truncated(&self) -> u64 {
                word(&self.0, 0)
            }

            /// The four little-endian words, first word first: the ordering xet-core uses.
            pub fn words(&self) -> [u64; 4] {
                [word(&self.0, 0), word(&self.0, 1), word(&self.0, 2), word(&self.0, 3)]
            }
        }

        impl Ord for $name {
            fn cmp(&self, other: &Self) -> Ordering {
                self.words().cmp(&other.words())
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                encode_hex32(&reverse_words(&self.0), f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }

        impl FromStr for $name {
            type Err = HashParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::from_hex(s)
            }
        }

        serde_as_hex!($name);
    };
}

xet_hash!(
    /// `blake3_keyed(DATA_KEY, uncompressed chunk bytes)` (§1.3). Inside a keyed global-dedup
    /// shard the same field holds a keyed chunk hash (§1.8, see [`keyed_chunk_hash`]).
    ChunkHash
);
xet_hash!(
    /// The aggregated hash of a xorb's chunks (§1.5); names the xorb on the wire.
    XorbHash
);
xet_hash!(
    /// The hash of a whole file (§1.6); an empty file hashes to zero.
    FileHash
);
xet_hash!(
    /// `blake3_keyed(DATA_KEY, complete shard bytes)`: names local shard files (§4.10).
    ShardHash
);
xet_hash!(
    /// A term verification ("range") hash (§1.7).
    VerificationHash
);
xet_hash!(
    /// The 32-byte key a global-dedup shard uses to key its chunk hashes (§1.8); zero means
    /// "not keyed".
    HmacKey
);

impl ChunkHash {
    /// Hashes one uncompressed chunk.
    pub fn of(data: &[u8]) -> Self {
        Self(*blake3::keyed_hash(&DATA_KEY, data).as_bytes())
    }

    /// Global-dedup eligibility by hash alone: `hash % 1024 == 0` (§5.1).
    pub fn is_global_dedup_eligible(&self) -> bool {
        self.modulo(1024) == 0
    }
}

impl ShardHash {
    /// Hashes the complete bytes of a shard (footer included).
    pub fn of(shard_bytes: &[u8]) -> Self {
        Self(*blake3::keyed_hash(&DATA_KEY, shard_bytes).as_bytes())
    }
}

/// `blake3_keyed(key, raw chunk hash)` (§1.8). With a zero key the shard is not keyed and the
/// hash is returned unchanged, which is how readers should compare against an unkeyed shard.
pub fn keyed_chunk_hash(key: &HmacKey, hash: &ChunkHash) -> ChunkHash {
    if key.is_zero() {
        return *hash;
    }
    ChunkHash(*blake3::keyed_hash(&key.0, &hash.0).as_bytes())
}

/// A chunk as the hashes see it: its hash and its uncompressed length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkRef {
    pub hash: ChunkHash,
    pub len: u64,
}

impl ChunkRef {
    pub fn new(hash: ChunkHash, len: u64) -> Self {
        Self { hash, len }
    }
}

/// The aggregated (merkle) hash of §1.4 over `(hash, size)` pairs, as raw bytes.
fn aggregate(items: &[([u8; 32], u64)]) -> [u8; 32] {
    match items.len() {
        0 => return [0u8; 32],
        1 => return items[0].0,
        _ => {}
    }
    let mut level: Vec<([u8; 32], u64)> = items.to_vec();
    let mut text = String::with_capacity(9 * 90);
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len() / 3 + 1);
        let mut i = 0;
        while i < level.len() {
            let k = cut(&level[i..]);
            next.push(merge(&level[i..i + k], &mut text));
            i += k;
        }
        level = next;
    }
    level[0].0
}

/// How many items of `rest` form the next group (§1.4): groups end at an item whose hash is
/// `0 mod 4`, never at positions 0 or 1, and hold at most 9 items.
fn cut(rest: &[([u8; 32], u64)]) -> usize {
    if rest.len() <= 2 {
        return rest.len();
    }
    let end = rest.len().min(9);
    for (j, item) in rest.iter().enumerate().take(end).skip(2) {
        if word(&item.0, 3).is_multiple_of(4) {
            return j + 1;
        }
    }
    end
}

/// One interior node: `blake3_keyed(INTERNAL_NODE_KEY, "<S> : <size>\n" for each item)`.
fn merge(items: &[([u8; 32], u64)], text: &mut String) -> ([u8; 32], u64) {
    use std::fmt::Write as _;
    text.clear();
    let mut total: u64 = 0;
    for (hash, size) in items {
        // Writing into a String cannot fail.
        let _ = writeln!(text, "{} : {}", ChunkHash(*hash), size);
        total = total.wrapping_add(*size);
    }
    (
        *blake3::keyed_hash(&INTERNAL_NODE_KEY, text.as_bytes()).as_bytes(),
        total,
    )
}

fn pairs(chunks: &[ChunkRef]) -> Vec<([u8; 32], u64)> {
    chunks.iter().map(|c| (c.hash.0, c.len)).collect()
}

/// The aggregated hash of an arbitrary `(hash, size)` list, as a raw hash (§1.4). Exposed for
/// the known-answer tests, whose inputs are not real chunks.
pub fn aggregated_hash(items: &[([u8; 32], u64)]) -> [u8; 32] {
    aggregate(items)
}

/// The hash of a xorb holding `chunks` in this order (§1.5).
pub fn xorb_hash(chunks: &[ChunkRef]) -> XorbHash {
    XorbHash(aggregate(&pairs(chunks)))
}

/// The hash of a file made of `chunks` in file order (§1.6), with the zero salt.
pub fn file_hash(chunks: &[ChunkRef]) -> FileHash {
    file_hash_with_salt(chunks, &[0u8; 32])
}

/// The salted file hash (§1.6). An empty chunk list hashes to zero whatever the salt.
pub fn file_hash_with_salt(chunks: &[ChunkRef], salt: &[u8; 32]) -> FileHash {
    if chunks.is_empty() {
        return FileHash::ZERO;
    }
    let root = aggregate(&pairs(chunks));
    FileHash(*blake3::keyed_hash(salt, &root).as_bytes())
}

/// The verification hash of a term covering `chunks` (raw unkeyed hashes, in xorb order) (§1.7).
pub fn verification_hash<'a>(chunks: impl IntoIterator<Item = &'a ChunkHash>) -> VerificationHash {
    let mut h = blake3::Hasher::new_keyed(&VERIFICATION_KEY);
    for c in chunks {
        h.update(&c.0);
    }
    VerificationHash(*h.finalize().as_bytes())
}

/// A Git LFS object id: the SHA-256 of the file's content, printed as ordinary lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct LfsOid([u8; 32]);

impl LfsOid {
    /// Wraps a SHA-256 digest in its usual byte order.
    pub const fn from_digest(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// SHA-256 of `data`.
    pub fn of(data: &[u8]) -> Self {
        use sha2::Digest as _;
        Self(sha2::Sha256::digest(data).into())
    }

    /// The digest in its usual byte order.
    pub const fn digest(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 32 bytes a shard's `FileMetadataExt` stores: each 8-byte word reversed (§1.9).
    pub fn to_metadata_ext_bytes(&self) -> [u8; 32] {
        reverse_words(&self.0)
    }

    /// Reads the 32 bytes of a shard's `FileMetadataExt` (§1.9).
    pub fn from_metadata_ext_bytes(raw: &[u8; 32]) -> Self {
        Self(reverse_words(raw))
    }

    /// Parses 64 hex digits (either case).
    pub fn from_hex(s: &str) -> Result<Self, HashParseError> {
        Ok(Self(decode_hex32(s)?))
    }

    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for LfsOid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        encode_hex32(&self.0, f)
    }
}

serde_as_hex!(LfsOid);

impl fmt::Debug for LfsOid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LfsOid({self})")
    }
}

impl FromStr for LfsOid {
    type Err = HashParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_hex(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_hex(s: &str) -> [u8; 32] {
        decode_hex32(s).unwrap()
    }

    #[test]
    fn string_form_reverses_each_word() {
        let raw: [u8; 32] = core::array::from_fn(|i| i as u8);
        let h = ChunkHash::from_bytes(raw);
        assert_eq!(
            h.to_hex(),
            "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918"
        );
        assert_eq!(ChunkHash::from_hex(&h.to_hex()).unwrap(), h);
        assert_eq!(ChunkHash::from_hex(&h.to_hex().to_uppercase()).unwrap(), h);
        assert_eq!(h.modulo(1024), 280);
        assert_eq!(h.truncated(), 0x0706050403020100);
    }

    #[test]
    fn parse_errors_name_the_problem() {
        assert_eq!(XorbHash::from_hex("abc"), Err(HashParseError::Length(3)));
        let bad = format!("{}g", "0".repeat(63));
        assert_eq!(
            XorbHash::from_hex(&bad),
            Err(HashParseError::Digit { ch: 'g', pos: 63 })
        );
        // Multi-byte characters must not cause a slicing panic.
        let uni = format!("{}é", "0".repeat(62));
        assert!(XorbHash::from_hex(&uni).is_err());
    }

    #[test]
    fn hello_world_vectors() {
        let c = ChunkHash::of(b"Hello World!");
        assert_eq!(
            c.as_bytes(),
            &raw_hex("a29cfb08e608d4d8726dd8659a90b9134b3240d5d8e42d5fcb28e2a6e763a3e8")
        );
        let chunks = [ChunkRef::new(c, 12)];
        assert_eq!(xorb_hash(&chunks).to_bytes(), c.to_bytes());
        assert_eq!(
            file_hash(&chunks).to_hex(),
            "a9dae0ad88b060bdd7e7c87abdcf95b132c95a0414b06d4f6beb68d287b87165"
        );
        assert_eq!(file_hash(&[]), FileHash::ZERO);
    }

    #[test]
    fn lfs_oid_metadata_ext_is_word_reversed() {
        let oid = LfsOid::of(b"Hello World!");
        assert_eq!(
            oid.to_hex(),
            "7f83b1657ff1fc53b92dc18148a1d65dfc2d4b1fa3d677284addd200126d9069"
        );
        assert_eq!(
            oid.to_metadata_ext_bytes(),
            raw_hex("53fcf17f65b1837f5dd6a14881c12db92877d6a31f4b2dfc69906d1200d2dd4a")
        );
        assert_eq!(
            LfsOid::from_metadata_ext_bytes(&oid.to_metadata_ext_bytes()),
            oid
        );
    }

    #[test]
    fn ordering_compares_le_words() {
        let a =
            ChunkHash::from_hex("145f5e1efbbf517ab84c6e7f90b3185011cfac8aa88587f0208ba2e45cc22de1")
                .unwrap();
        let b =
            ChunkHash::from_hex("d8d408e608fb9ca213b9909a65d86d725f2de4d8d540324be8a363e7a6e228cb")
                .unwrap();
        assert!(a < b);
    }

    #[test]
    fn serde_uses_the_string_form() {
        let text = "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918";
        let hash = FileHash::from_hex(text).unwrap();
        assert_eq!(serde_json::to_string(&hash).unwrap(), format!("\"{text}\""));
        let back: FileHash = serde_json::from_str(&format!("\"{}\"", text.to_uppercase())).unwrap();
        assert_eq!(back, hash);
        let oid = LfsOid::of(b"Hello World!");
        let json = serde_json::to_string(&oid).unwrap();
        assert_eq!(json, format!("\"{}\"", oid.to_hex()));
        assert_eq!(serde_json::from_str::<LfsOid>(&json).unwrap(), oid);

        // As map keys, in the order of the hashes (which is the order of their strings).
        let map: std::collections::BTreeMap<XorbHash, u8> =
            serde_json::from_str(&format!("{{\"{text}\": 1, \"{}\": 2}}", "ff".repeat(32)))
                .unwrap();
        assert_eq!(map.len(), 2);
        let again = serde_json::to_string(&map).unwrap();
        assert!(again.starts_with(&format!("{{\"{text}\":1")), "{again}");

        let err = serde_json::from_str::<XorbHash>("\"abc\"").unwrap_err();
        assert!(
            err.to_string().contains("\"abc\" is not a XorbHash"),
            "{err}"
        );
        assert!(serde_json::from_str::<ChunkHash>("42").is_err());
    }
}
