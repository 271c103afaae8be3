//! A few large byte buffers kept for reuse: the multi-MiB ranges a download fetches (up to a
//! xorb, 64 MiB) would otherwise each be a fresh mapping whose every page is faulted in and
//! zeroed, which was a tenth of a download's CPU time. Bounded: at most [`KEPT`] buffers wait
//! here, so the memory held besides the buffers in use is at most [`KEPT`] ranges.

use crate::util::sync::LockAnyway as _;
use std::sync::Mutex;

/// Buffers smaller than this are not worth keeping.
pub(crate) const MIN_KEPT: usize = 1 << 20;

/// Buffers kept at most.
pub const KEPT: usize = 1;

/// Buffers waiting for reuse.
struct Pool(Mutex<Vec<Vec<u8>>>);

static POOL: Pool = Pool(Mutex::new(Vec::new()));

impl Pool {
    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.0.lock_anyway()
    }

    fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity >= MIN_KEPT {
            let mut kept = self.kept();
            let best = (kept.iter().enumerate())
                .filter(|(_, b)| b.capacity() >= capacity)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            if let Some(i) = best {
                return kept.swap_remove(i);
            }
        }
        Vec::with_capacity(capacity)
    }

    fn give(&self, mut buf: Vec<u8>) {
        if buf.capacity() < MIN_KEPT {
            return;
        }
        buf.clear();
        let mut kept = self.kept();
        if kept.len() < KEPT {
            kept.push(buf);
            return;
        }
        if let Some((i, smallest)) = (kept.iter().enumerate()).min_by_key(|(_, b)| b.capacity()) {
            if smallest.capacity() < buf.capacity() {
                kept[i] = buf;
            }
        }
    }
}

/// An empty buffer with room for at least `capacity` bytes: a kept one if one is large enough
/// (the smallest such), else a new one.
pub fn take(capacity: usize) -> Vec<u8> {
    POOL.take(capacity)
}

/// Gives a buffer back for a later [`take`]: kept if it is large and there is room (or it is
/// larger than the smallest kept one, which goes instead), else freed.
pub fn give(buf: Vec<u8>) {
    POOL.give(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_are_reused_and_few_are_kept() {
        let pool = Pool(Mutex::new(Vec::new()));
        let small = pool.take(2 << 20);
        let large = pool.take(5 << 20);
        let p_large = large.as_ptr();
        pool.give(small);
        pool.give(large); // kept instead of the smaller one once the pool is full
        pool.give(vec![0u8; 100]); // too small to keep
        assert!(pool.kept().len() <= KEPT);
        // The smallest kept buffer that fits, emptied.
        let again = pool.take(4 << 20);
        assert_eq!(again.as_ptr(), p_large);
        assert!(again.is_empty() && again.capacity() >= 5 << 20);
        // Nothing kept fits: a new buffer.
        assert!(pool.take(6 << 20).capacity() >= 6 << 20);
        // Small requests never take from the pool.
        pool.give(again);
        assert_eq!(pool.take(1000).capacity(), 1000);
        assert_eq!(pool.kept().len(), 1);
        let _ = pool.take(1 << 20);
        assert!(pool.kept().is_empty());
    }
}
