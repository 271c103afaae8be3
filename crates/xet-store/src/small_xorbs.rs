//! Whole small xorbs kept in memory for a minute, on object storage.
//!
//! A download of many small files asks a node for many small ranges, each its own request; the
//! files of one push are packed into shared xorbs (docs/lfs-agent.md §12.4), so those ranges
//! fall in a few xorbs. On object storage each range read is a request to the bucket, and
//! checking the xorb first is another: a node reads a registered xorb of at most
//! [`SMALL_XORB_MAX`] whole at its first range instead (one of at most 1 MiB already at its
//! first check), with no look first (its chunks verified against its name), once for the
//! requests that want it at the same moment, and answers the next ranges and checks of it from
//! memory. A xorb of at most 1 MiB whose footer a node needs (catching up with another
//! node's shard, say) is read whole for it and kept too (and on the node's disk, see
//! [`crate::xorb_cache`]). At most
//! [`SMALL_XORBS_BYTES`] are kept, oldest out first, each for [`SMALL_XORB_TTL`] (xorbs never
//! change; the limit only bounds how long a xorb garbage-collected by another node stays
//! readable here).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xet_format::XorbHash;

/// Xorbs up to this size are read whole.
pub const SMALL_XORB_MAX: u64 = 4 << 20;

/// Bytes of small xorbs kept in memory at most.
pub const SMALL_XORBS_BYTES: u64 = 64 << 20;

/// How long a xorb read whole is served from memory.
pub const SMALL_XORB_TTL: Duration = Duration::from_secs(60);

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct SmallXorbs {
    entries: HashMap<XorbHash, (Arc<Vec<u8>>, Instant, u64)>,
    /// Insertion order: (xorb, insertion number), for eviction.
    order: VecDeque<(XorbHash, u64)>,
    bytes: u64,
    inserted: u64,
}

impl SmallXorbs {
    /// The bytes of `xorb`, if read whole less than [`SMALL_XORB_TTL`] ago.
    pub fn get(&self, xorb: &XorbHash) -> Option<Arc<Vec<u8>>> {
        self.entries
            .get(xorb)
            .filter(|(_, at, _)| at.elapsed() < SMALL_XORB_TTL)
            .map(|(bytes, _, _)| Arc::clone(bytes))
    }

    /// Keeps `bytes`, the whole object of `xorb` (nothing larger than [`SMALL_XORB_MAX`]).
    pub fn insert(&mut self, xorb: XorbHash, bytes: Arc<Vec<u8>>) {
        let len = bytes.len() as u64;
        if len > SMALL_XORB_MAX {
            return;
        }
        self.remove(&xorb);
        self.inserted += 1;
        self.bytes += len;
        self.entries
            .insert(xorb, (bytes, Instant::now(), self.inserted));
        self.order.push_back((xorb, self.inserted));
        while self.bytes > SMALL_XORBS_BYTES {
            let Some((old, n)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&old).is_some_and(|(_, _, m)| *m == n) {
                self.remove(&old);
            }
        }
    }

    pub fn remove(&mut self, xorb: &XorbHash) {
        if let Some((bytes, _, _)) = self.entries.remove(xorb) {
            self.bytes -= bytes.len() as u64;
        }
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(x, n)| entries.get(x).is_some_and(|(_, _, m)| m == n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(i: u32) -> XorbHash {
        XorbHash::from_bytes({
            let mut b = [0u8; 32];
            b[..4].copy_from_slice(&i.to_le_bytes());
            b
        })
    }

    #[test]
    fn bounded_in_bytes_oldest_out_first() {
        let mut cache = SmallXorbs::default();
        for i in 0..40u32 {
            cache.insert(name(i), Arc::new(vec![i as u8; 3 << 20]));
            assert!(cache.bytes <= SMALL_XORBS_BYTES);
        }
        assert!(cache.get(&name(0)).is_none(), "the oldest went first");
        assert_eq!(cache.get(&name(39)).unwrap()[0], 39);
        cache.insert(name(99), Arc::new(vec![0; (SMALL_XORB_MAX + 1) as usize]));
        assert!(cache.get(&name(99)).is_none(), "too large to keep");
        cache.remove(&name(39));
        assert!(cache.get(&name(39)).is_none());
    }
}
