//! The bytes of a checkpoint (see [`crate::checkpoint`]): pure encoding and decoding, no I/O.
//!
//! A checkpoint is named `<16-digit ms>-<BLAKE3 of the body in hex>` ([`CheckpointId`]), so a
//! reader knows a damaged or half-written body from a good one before it reads a row. The body:
//!
//! ```text
//! "git-xet-checkpoint 1\n"
//! rows: table u8, key length u16 LE, key, value length u32 LE, value
//! ```
//!
//! Each row is one row of one of the index tables a checkpoint carries ([`Table`]), whose
//! key and value lengths are checked here ([`Table::check`]) before the index sees them.

use std::fmt;

/// The first bytes of every checkpoint body.
pub const MAGIC: &[u8] = b"git-xet-checkpoint 1\n";

/// A checkpoint's name: when it was written (its writer's clock) and the BLAKE3 hash of its
/// body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckpointId {
    /// Milliseconds since the Unix epoch.
    pub ms: u64,
    /// BLAKE3 of the body.
    pub sum: [u8; 32],
}

impl CheckpointId {
    /// The name of `body` written at `ms`.
    pub fn of(ms: u64, body: &[u8]) -> Self {
        Self {
            ms,
            sum: *blake3::hash(body).as_bytes(),
        }
    }

    /// `<16-digit ms>-<64 hex digits>`, as stored.
    pub fn name(&self) -> String {
        let hex: String = self.sum.iter().map(|b| format!("{b:02x}")).collect();
        format!("{:016}-{hex}", self.ms)
    }

    /// The inverse of [`Self::name`]; `None` for any other name.
    pub fn parse(name: &str) -> Option<Self> {
        let (ms, hex) = name.split_once('-')?;
        if ms.len() != 16 || hex.len() != 64 || !ms.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut sum = [0u8; 32];
        for (i, out) in sum.iter_mut().enumerate() {
            let pair = hex.get(2 * i..2 * i + 2)?;
            if !pair.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return None;
            }
            *out = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(Self {
            ms: ms.parse().ok()?,
            sum,
        })
    }

    /// Whether `body` is the body this name was given for.
    pub fn matches(&self, body: &[u8]) -> bool {
        blake3::hash(body).as_bytes() == &self.sum
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// What a checkpoint's rows are: copies of the rows of index tables, what registering the
/// shards of the bucket gives a node (the node's own knowledge, such as which xorbs it
/// verified, stays out), and the objects in the bucket the checkpoint covers, removed once it
/// is old enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    Shards = 1,
    Files = 2,
    Oids = 3,
    OidFiles = 4,
    Claims = 5,
    Dedup = 6,
    XorbFile = 7,
    FileRepos = 8,
    /// A shard log entry: its time (u64 LE), shard (32), then the repository (UTF-8).
    CoveredLogEntry = 9,
    /// A batch of checked claims, by name (UTF-8).
    CoveredClaimBatch = 10,
    /// A shard object.
    CoveredShard = 11,
}

impl Table {
    /// The index tables, in the order a checkpoint is written.
    pub const INDEX: [Table; 8] = [
        Table::Shards,
        Table::Files,
        Table::Oids,
        Table::OidFiles,
        Table::Claims,
        Table::Dedup,
        Table::XorbFile,
        Table::FileRepos,
    ];

    /// What a checkpoint covers.
    pub const COVERED: [Table; 3] = [
        Table::CoveredLogEntry,
        Table::CoveredClaimBatch,
        Table::CoveredShard,
    ];

    fn from_byte(b: u8) -> Option<Self> {
        Self::INDEX
            .into_iter()
            .chain(Self::COVERED)
            .find(|t| *t as u8 == b)
    }

    /// Whether rows of this table are copies of index rows.
    pub fn is_index(self) -> bool {
        Self::INDEX.contains(&self)
    }

    /// Whether a row of this table may have this key and value (the lengths the index's
    /// tables are written with; see `crate::index`).
    pub fn check(self, key: &[u8], value: &[u8]) -> bool {
        let (k, v) = (key.len(), value.len());
        match self {
            // Files (u32), registration time (u64), then flags.
            Table::Shards => k == 32 && (12..=64).contains(&v),
            // Size, first shard, then 44 bytes per term.
            Table::Files => k == 32 && v >= 40 && (v - 40).is_multiple_of(44),
            Table::Oids => k == 32 && v == 32,
            Table::OidFiles => k == 64 && v == 0,
            // Time, size, then the uploader's name.
            Table::Claims => k == 64 && v >= 16 && std::str::from_utf8(&value[16..]).is_ok(),
            Table::Dedup => k == 32 && v == 36,
            Table::XorbFile => k == 32 && v == 32,
            // File, then the repository's name.
            Table::FileRepos => k > 32 && v == 0 && std::str::from_utf8(&key[32..]).is_ok(),
            Table::CoveredLogEntry => k >= 40 && v == 0 && std::str::from_utf8(&key[40..]).is_ok(),
            Table::CoveredClaimBatch => k > 0 && v == 0 && std::str::from_utf8(key).is_ok(),
            Table::CoveredShard => k == 32 && v == 0,
        }
    }
}

/// One row of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row<'a> {
    pub table: Table,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Why a checkpoint body cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint {id}: its {len} bytes do not hash to its name (damaged or cut short)")]
    Sum { id: CheckpointId, len: usize },
    #[error("checkpoint {id}: it does not start as a checkpoint does")]
    Magic { id: CheckpointId },
    #[error("checkpoint {id}, offset {offset}: {what}")]
    Row {
        id: CheckpointId,
        offset: usize,
        what: &'static str,
    },
}

/// Appends `row` to a body being written. A key longer than 65,535 bytes cannot be written
/// (no table has one: a repository name is at most a few hundred bytes).
pub fn push_row(body: &mut Vec<u8>, table: Table, key: &[u8], value: &[u8]) -> bool {
    let (Ok(k), Ok(v)) = (u16::try_from(key.len()), u32::try_from(value.len())) else {
        return false;
    };
    body.push(table as u8);
    body.extend_from_slice(&k.to_le_bytes());
    body.extend_from_slice(key);
    body.extend_from_slice(&v.to_le_bytes());
    body.extend_from_slice(value);
    true
}

/// The rows of the body of checkpoint `id`, after checking that the body is the one `id`
/// names and starts as a checkpoint does. Each row is checked as it is read: the iterator
/// gives an error for the first bad one and stops.
pub fn rows(id: CheckpointId, body: &[u8]) -> Result<Rows<'_>, CheckpointError> {
    if !id.matches(body) {
        return Err(CheckpointError::Sum {
            id,
            len: body.len(),
        });
    }
    if !body.starts_with(MAGIC) {
        return Err(CheckpointError::Magic { id });
    }
    Ok(Rows {
        id,
        body,
        offset: MAGIC.len(),
    })
}

/// The rows of a checkpoint body ([`rows`]).
#[derive(Debug)]
pub struct Rows<'a> {
    id: CheckpointId,
    body: &'a [u8],
    offset: usize,
}

impl<'a> Rows<'a> {
    /// `len` bytes at the current offset, moving past them.
    fn take(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], CheckpointError> {
        let end = self
            .offset
            .checked_add(len)
            .filter(|&end| end <= self.body.len())
            .ok_or(CheckpointError::Row {
                id: self.id,
                offset: self.offset,
                what,
            })?;
        let bytes = &self.body[self.offset..end];
        self.offset = end;
        Ok(bytes)
    }

    fn row(&mut self) -> Result<Row<'a>, CheckpointError> {
        let (id, start) = (self.id, self.offset);
        let bad = move |what| CheckpointError::Row {
            id,
            offset: start,
            what,
        };
        let table = self.take(1, "a row is cut short")?[0];
        let table = Table::from_byte(table).ok_or(bad("a row names no table"))?;
        let key_len = self.take(2, "a row is cut short")?;
        let key_len = usize::from(u16::from_le_bytes([key_len[0], key_len[1]]));
        let key = self.take(key_len, "a key runs past the end")?;
        let value_len = self.take(4, "a row is cut short")?;
        let value_len =
            u32::from_le_bytes([value_len[0], value_len[1], value_len[2], value_len[3]]);
        let value_len = usize::try_from(value_len).map_err(|_| bad("a value is too long"))?;
        let value = self.take(value_len, "a value runs past the end")?;
        if !table.check(key, value) {
            return Err(bad(
                "a row's key or value has the wrong length for its table",
            ));
        }
        Ok(Row { table, key, value })
    }
}

impl<'a> Iterator for Rows<'a> {
    type Item = Result<Row<'a>, CheckpointError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.offset >= self.body.len() {
            return None;
        }
        let row = self.row();
        if row.is_err() {
            // Nothing after a bad row is trusted.
            self.offset = self.body.len();
        }
        Some(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(rows: &[(Table, Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        for (t, k, v) in rows {
            assert!(push_row(&mut b, *t, k, v));
        }
        b
    }

    fn sample() -> Vec<(Table, Vec<u8>, Vec<u8>)> {
        vec![
            (Table::Shards, vec![1; 32], vec![0; 13]),
            (Table::Files, vec![2; 32], vec![0; 40 + 44 * 2]),
            (
                Table::FileRepos,
                [vec![2; 32], b"team/a".to_vec()].concat(),
                vec![],
            ),
            (Table::Dedup, vec![3; 32], vec![4; 36]),
        ]
    }

    #[test]
    fn rows_read_back_as_written_under_their_name() {
        let rows_in = sample();
        let b = body(&rows_in);
        let id = CheckpointId::of(1_700_000_000_123, &b);
        assert_eq!(CheckpointId::parse(&id.name()), Some(id));
        let out: Vec<_> = rows(id, &b).unwrap().map(Result::unwrap).collect();
        assert_eq!(out.len(), rows_in.len());
        for (row, (t, k, v)) in out.iter().zip(&rows_in) {
            assert_eq!(
                (row.table, row.key, row.value),
                (*t, k.as_slice(), v.as_slice())
            );
        }
    }

    #[test]
    fn a_body_cut_short_or_changed_is_refused_before_any_row() {
        let b = body(&sample());
        let id = CheckpointId::of(5, &b);
        for cut in [0, 1, MAGIC.len(), b.len() - 1] {
            assert!(matches!(
                rows(id, &b[..cut]),
                Err(CheckpointError::Sum { .. })
            ));
        }
        let mut changed = b.clone();
        changed[MAGIC.len() + 5] ^= 1;
        assert!(matches!(
            rows(id, &changed),
            Err(CheckpointError::Sum { .. })
        ));
    }

    #[test]
    fn bad_rows_under_a_matching_name_stop_the_reading_with_an_offset() {
        // A body whose name matches but whose rows are wrong (written by a faulty writer).
        let mut b = body(&sample());
        b.extend_from_slice(&[Table::Oids as u8, 32, 0]);
        b.extend_from_slice(&[9; 32]);
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&[1, 2, 3]);
        let id = CheckpointId::of(5, &b);
        let all: Vec<_> = rows(id, &b).unwrap().collect();
        assert_eq!(all.len(), sample().len() + 1);
        assert!(matches!(
            all.last(),
            Some(Err(CheckpointError::Row { what, .. })) if what.contains("wrong length")
        ));
        for tail in [vec![99u8], vec![1, 255, 255], vec![1, 32, 0, 1]] {
            let mut b = body(&sample());
            b.extend_from_slice(&tail);
            let id = CheckpointId::of(5, &b);
            assert!(rows(id, &b).unwrap().last().unwrap().is_err());
        }
        let wrong = b"not a checkpoint".to_vec();
        let id = CheckpointId::of(5, &wrong);
        assert!(matches!(
            rows(id, &wrong),
            Err(CheckpointError::Magic { .. })
        ));
    }

    #[test]
    fn names_other_than_checkpoint_names_are_not_parsed() {
        for name in ["", "12-ab", "000000000000000x-", "0000000000000001"] {
            assert_eq!(CheckpointId::parse(name), None, "{name}");
        }
        let good = CheckpointId {
            ms: 7,
            sum: [0xab; 32],
        }
        .name();
        assert_eq!(CheckpointId::parse(&good.to_uppercase()), None);
        assert_eq!(CheckpointId::parse(&format!("{good}0")), None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_under_their_own_name_never_panic(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let b = [MAGIC, tail.as_slice()].concat();
            let id = CheckpointId::of(1, &b);
            for r in rows(id, &b).unwrap().flatten() {
                proptest::prop_assert!(r.table.check(r.key, r.value));
            }
        }
    }
}
