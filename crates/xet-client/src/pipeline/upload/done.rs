//! Which bytes of an upload are done, for progress that follows the wire: a chunk's bytes count
//! when the chunk was deduplicated against a xorb the target already stores, or when the xorb
//! of this upload that holds it has been stored by the target (its put returned). While a xorb
//! is being sent, its bytes count in proportion to the share of its body that went out
//! ([`Done::sending`]); the rest is held back until it is stored.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use xet_protocol::util::sync::LockAnyway as _;

/// See the module documentation. Clones share the count (an uploader's progress callback
/// holds one).
#[derive(Debug, Default, Clone)]
pub(super) struct Done(Arc<Counts>);

#[derive(Debug, Default)]
pub(super) struct Counts {
    bytes: AtomicU64,
    /// Per xorb of this upload (by sequence number).
    waiting: Mutex<Vec<Slot>>,
}

impl std::ops::Deref for Done {
    type Target = Counts;

    fn deref(&self) -> &Counts {
        &self.0
    }
}

/// One xorb of the upload.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// File bytes in the xorb.
    bytes: u64,
    /// Of those, counted while the xorb was being sent.
    counted: u64,
    /// The target has stored it.
    stored: bool,
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
        let mut w = self.waiting.lock_anyway();
        let slot = Self::slot(&mut w, seq);
        slot.bytes += n;
        if slot.stored {
            self.bytes.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// `sent` of the `total` body bytes of xorb `seq` have gone out: that share of its file
    /// bytes counts (never less than counted before; a retry that starts over does not make
    /// progress go back).
    pub fn sending(&self, seq: u32, sent: u64, total: u64) {
        let mut w = self.waiting.lock_anyway();
        let slot = Self::slot(&mut w, seq);
        if slot.stored || total == 0 {
            return;
        }
        let share =
            (u128::from(slot.bytes) * u128::from(sent.min(total)) / u128::from(total)) as u64;
        if share > slot.counted {
            self.bytes
                .fetch_add(share - slot.counted, Ordering::Relaxed);
            slot.counted = share;
        }
    }

    /// The target stored xorb `seq` of this upload (or already had it).
    pub(crate) fn xorb_stored(&self, seq: u32) {
        let mut w = self.waiting.lock_anyway();
        let slot = Self::slot(&mut w, seq);
        if !slot.stored {
            slot.stored = true;
            self.bytes
                .fetch_add(slot.bytes - slot.counted, Ordering::Relaxed);
            slot.counted = slot.bytes;
        }
    }

    fn slot(w: &mut Vec<Slot>, seq: u32) -> &mut Slot {
        let i = seq as usize;
        if w.len() <= i {
            w.resize(i + 1, Slot::default());
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

    #[test]
    fn a_xorb_being_sent_counts_by_its_share_on_the_wire() {
        let d = Done::default();
        d.in_xorb(0, 1000);
        d.sending(0, 250, 1000);
        assert_eq!(d.get(), 250);
        d.sending(0, 500, 1000);
        assert_eq!(d.get(), 500);
        // A retry starting over does not make it go back.
        d.sending(0, 10, 1000);
        assert_eq!(d.get(), 500);
        d.sending(0, 5000, 1000);
        assert_eq!(d.get(), 1000);
        d.xorb_stored(0);
        assert_eq!(d.get(), 1000, "counted once");
        d.xorb_stored(0);
        assert_eq!(d.get(), 1000);
    }
}
