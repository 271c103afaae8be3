//! What a node knows of stored xorbs' footers without asking storage: the cache of footers of
//! xorbs known intact (`FooterCache`, with when each object was last seen), how much of a
//! xorb to read at a first look (`first_read_len`), and the check of a stored object's bytes
//! (`verify_stored`). Pure state and checks; looking at storage is `crate::integrity`'s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::ObjectStamp;
use xet_format::shard::XorbInfo;
use xet_format::xorb::{ParsedXorb, ReadOptions, XorbFooter, XorbForm, XorbLimits};
use xet_format::XorbHash;

/// Bytes of footers kept in memory (a footer of an 8192-chunk xorb holds about 330 KB).
pub(crate) const FOOTER_CACHE_BYTES: u64 = 64 << 20;

/// On object storage, a xorb up to this size is read whole when its footer is needed: one
/// request instead of two, and its files' reads then need none (see `small_xorbs` and
/// `xorb_cache`). As large as `integrity::CHECK_READ_MAX`: the packs standalone agents gather fit, so a
/// node catching up with another's push of small files serves their downloads from its disk.
pub(crate) const WHOLE_READ_MAX: u64 = 1 << 20;

/// How much of a xorb's end a node reads at its first look when nothing says how long the
/// xorb is (see [`first_read_len`]): all of a small one, the footer of most others.
pub(crate) const FIRST_READ_DEFAULT: u64 = 256 << 10;

/// How much of `xorb`'s end to read at a node's first look at it, given its block in the shard
/// being validated: all of it when the block says it is at most [`WHOLE_READ_MAX`] long
/// (its chunks, their headers and its footer), else just its footer as the block describes
/// it. One request either way when the block tells the truth (a block that does not only
/// costs another read); [`FIRST_READ_DEFAULT`] without a block.
pub(crate) fn first_read_len(block: Option<&XorbInfo>) -> u64 {
    let Some(block) = block else {
        return FIRST_READ_DEFAULT;
    };
    let chunks = block.chunks.len() as u64;
    let tail = xet_format::xorb::footer::v1_len(chunks) + 4;
    let most = u64::from(block.num_bytes_in_xorb)
        .saturating_add(chunks * xet_format::xorb::CHUNK_HEADER_LEN as u64)
        .saturating_add(tail);
    if most <= WHOLE_READ_MAX {
        most
    } else {
        tail.min(WHOLE_READ_MAX)
    }
}

/// How long a xorb object seen intact on object storage is taken as still there without
/// looking again (one request fewer per range read of a xorb read a moment ago).
pub(crate) const STAMP_FRESH: Duration = Duration::from_secs(10);

/// Footers of xorbs known intact, each with the stamp of the object it was read from, within
/// [`FOOTER_CACHE_BYTES`]; when full, the oldest entries go first.
#[derive(Debug, Default)]
pub(crate) struct FooterCache {
    /// Per xorb: the stamp, the footer, the insertion number, and when the object was last
    /// seen with that stamp.
    entries: std::collections::HashMap<XorbHash, (ObjectStamp, Arc<XorbFooter>, u64, Instant)>,
    /// Insertion order: (xorb, insertion number), for eviction.
    order: std::collections::VecDeque<(XorbHash, u64)>,
    bytes: u64,
    inserted: u64,
    /// Xorbs whose object was found missing, and when (on object storage: an upload that
    /// just looked need not look again before it puts the object).
    missing: std::collections::HashMap<XorbHash, Instant>,
}

impl FooterCache {
    fn cost(footer: &XorbFooter) -> u64 {
        footer.num_chunks() as u64 * 40 + 256
    }

    /// The footer of `xorb` if it was read from the object with `stamp`.
    /// Counts as seeing the object again (see [`Self::seen_within`]).
    pub fn get(&mut self, xorb: &XorbHash, stamp: &ObjectStamp) -> Option<Arc<XorbFooter>> {
        match self.entries.get_mut(xorb) {
            Some((s, f, _, seen)) if s == stamp => {
                *seen = Instant::now();
                Some(Arc::clone(f))
            }
            _ => None,
        }
    }

    /// The stamp and footer of `xorb` if its object was seen with that stamp less than
    /// `within` ago.
    pub(crate) fn seen_within(
        &self,
        xorb: &XorbHash,
        within: Duration,
    ) -> Option<(ObjectStamp, Arc<XorbFooter>)> {
        self.entries
            .get(xorb)
            .filter(|(_, _, _, seen)| seen.elapsed() < within)
            .map(|(s, f, _, _)| (*s, Arc::clone(f)))
    }

    /// Notes that `xorb`'s object was just found missing.
    pub(crate) fn note_missing(&mut self, xorb: &XorbHash) {
        if self.missing.len() >= 4096 {
            self.missing.retain(|_, at| at.elapsed() < STAMP_FRESH);
        }
        self.missing.insert(*xorb, Instant::now());
    }

    /// Whether `xorb`'s object was found missing less than `within` ago (and not stored
    /// since by this process).
    pub(crate) fn missing_within(&self, xorb: &XorbHash, within: Duration) -> bool {
        self.missing
            .get(xorb)
            .is_some_and(|at| at.elapsed() < within)
    }

    /// The stamp and footer of `xorb`, however long ago it was seen.
    pub(crate) fn latest(&self, xorb: &XorbHash) -> Option<(ObjectStamp, Arc<XorbFooter>)> {
        self.entries
            .get(xorb)
            .map(|(s, f, _, _)| (*s, Arc::clone(f)))
    }

    /// The footer of `xorb`, whatever object it was read from.
    pub fn any(&self, xorb: &XorbHash) -> Option<Arc<XorbFooter>> {
        self.entries.get(xorb).map(|(_, f, _, _)| Arc::clone(f))
    }

    pub fn insert(&mut self, stamp: ObjectStamp, footer: Arc<XorbFooter>) {
        let xorb = footer.hash;
        self.remove(&xorb);
        self.missing.remove(&xorb);
        self.inserted += 1;
        self.bytes += Self::cost(&footer);
        self.entries
            .insert(xorb, (stamp, footer, self.inserted, Instant::now()));
        self.order.push_back((xorb, self.inserted));
        while self.bytes > FOOTER_CACHE_BYTES && self.entries.len() > 1 {
            let Some((old, n)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&old).is_some_and(|(_, _, m, _)| *m == n) {
                self.remove(&old);
            }
        }
    }

    pub fn remove(&mut self, xorb: &XorbHash) {
        if let Some((_, f, _, _)) = self.entries.remove(xorb) {
            self.bytes -= Self::cost(&f);
        }
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(x, n)| entries.get(x).is_some_and(|(_, _, m, _)| m == n));
        }
    }
}

/// What [`Store::check_xorb`](crate::Store::check_xorb) found.
#[derive(Debug, Clone)]
pub enum XorbHealth {
    /// Stored and intact, with its footer.
    Intact(Arc<XorbFooter>),
    /// Not stored, and not known to have been (never uploaded, or garbage-collected).
    Missing,
    /// The store had it and it is now missing or damaged: why.
    Damaged(String),
}

/// Why `bytes` are not the intact stored form of `xorb`, or its footer.
pub(crate) fn verify_stored(xorb: &XorbHash, bytes: &[u8]) -> Result<XorbFooter, String> {
    let options = ReadOptions {
        expected_hash: Some(*xorb),
        limits: XorbLimits::SERVER,
    };
    let parsed = ParsedXorb::parse_with(bytes, &options)
        .map_err(|e| format!("its {} bytes fail verification: {e}", bytes.len()))?;
    if parsed.form() != XorbForm::Stored {
        return Err(format!(
            "its {} bytes are not a stored xorb (no footer length at the end)",
            bytes.len()
        ));
    }
    match parsed.footer() {
        Some(f) if f.unpacked_chunk_offsets.is_some() => Ok(f.clone()),
        _ => Err("its footer is not a V1 footer".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(i: u16) -> XorbHash {
        let mut b = [0u8; 32];
        b[..2].copy_from_slice(&i.to_le_bytes());
        XorbHash::from_bytes(b)
    }

    fn footer(i: u16, chunks: usize) -> Arc<XorbFooter> {
        Arc::new(XorbFooter {
            hash: name(i),
            chunk_hashes: vec![xet_format::ChunkHash::from_bytes([1; 32]); chunks],
            chunk_boundary_offsets: (1..=chunks as u32).collect(),
            unpacked_chunk_offsets: Some((1..=chunks as u32).collect()),
            buffer: [0; 16],
        })
    }

    #[test]
    fn the_footer_cache_stays_within_its_budget_and_keeps_the_newest() {
        let stamp = ObjectStamp {
            len: 1,
            version: [0; 24],
        };
        let other = ObjectStamp {
            len: 2,
            version: [0; 24],
        };
        let mut cache = FooterCache::default();
        // 8192-chunk footers: about 330 KB each; 400 of them would be 130 MB.
        for i in 0..400u16 {
            cache.insert(stamp, footer(i, 8192));
            assert!(cache.bytes <= FOOTER_CACHE_BYTES, "{}", cache.bytes);
        }
        let newest = name(399);
        assert!(cache.get(&newest, &stamp).is_some());
        assert!(
            cache.get(&newest, &other).is_none(),
            "another object version"
        );
        assert!(
            cache.get(&name(0), &stamp).is_none(),
            "the oldest were evicted"
        );
        let kept = cache.entries.len();
        assert!(kept > 150 && kept < 400, "{kept}");
        cache.remove(&newest);
        assert!(cache.any(&newest).is_none());
        assert!(cache.order.len() <= 2 * cache.entries.len() + 64 + 1);
    }
}
