//! Which bytes of an upload are done, for progress that follows the wire: a chunk's bytes count
//! when the chunk was deduplicated against a xorb the target already stores, or when the xorb
//! of this upload that holds it has been stored by the target (its put returned). Bytes that
//! wait for a xorb still being built or sent are held back per xorb until it is stored.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Done {
    bytes: AtomicU64,
    /// Per xorb of this upload (by sequence number): the bytes waiting for it, and whether the
    /// target has stored it.
    waiting: Mutex<Vec<(u64, bool)>>,
}

impl Done {
    /// File bytes done so far.
    pub fn get(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// `n` bytes matched a xorb the target already stores.
    pub fn deduplicated(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` bytes are in xorb `seq` of this upload (packed into it, or matching a chunk of it).
    pub fn in_xorb(&self, seq: u32, n: u64) {
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let slot = Self::slot(&mut w, seq);
        if slot.1 {
            self.bytes.fetch_add(n, Ordering::Relaxed);
        } else {
            slot.0 += n;
        }
    }

    /// The target stored xorb `seq` of this upload (or already had it).
    pub fn xorb_stored(&self, seq: u32) {
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let slot = Self::slot(&mut w, seq);
        slot.1 = true;
        self.bytes
            .fetch_add(std::mem::take(&mut slot.0), Ordering::Relaxed);
    }

    fn slot(w: &mut Vec<(u64, bool)>, seq: u32) -> &mut (u64, bool) {
        let i = seq as usize;
        if w.len() <= i {
            w.resize(i + 1, (0, false));
        }
        &mut w[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_count_once_their_xorb_is_stored() {
        let d = Done::default();
        d.deduplicated(100);
        d.in_xorb(0, 10);
        d.in_xorb(1, 20);
        assert_eq!(d.get(), 100);
        d.xorb_stored(1);
        assert_eq!(d.get(), 120);
        // A later match into a stored xorb counts at once; into a pending one, later.
        d.in_xorb(1, 5);
        d.in_xorb(0, 7);
        assert_eq!(d.get(), 125);
        d.xorb_stored(0);
        assert_eq!(d.get(), 142);
    }
}
