//! How long the requests of object storage take, by kind: counted where every request of the
//! S3 backend waits for its answer, read by the server's `/metrics`. Atomics only, so that
//! counting costs nothing next to a request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The kinds of request an object store is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageOp {
    /// An object's metadata (HEAD).
    Head,
    /// An object whole or a byte range of it (GET).
    Get,
    /// A new object, or one replaced (PUT).
    Put,
    /// A page of keys (LIST).
    List,
    /// A removal (DELETE).
    Delete,
    /// An object copied under another key (quarantine).
    Copy,
    /// Credentials for presigned URLs.
    Sign,
}

impl StorageOp {
    /// Every kind, in the order metrics list them.
    pub const ALL: [StorageOp; 7] = [
        StorageOp::Head,
        StorageOp::Get,
        StorageOp::Put,
        StorageOp::List,
        StorageOp::Delete,
        StorageOp::Copy,
        StorageOp::Sign,
    ];

    /// The label metrics give it.
    pub fn name(self) -> &'static str {
        match self {
            StorageOp::Head => "head",
            StorageOp::Get => "get",
            StorageOp::Put => "put",
            StorageOp::List => "list",
            StorageOp::Delete => "delete",
            StorageOp::Copy => "copy",
            StorageOp::Sign => "sign",
        }
    }
}

/// Requests and their total time, per kind, since the process started.
#[derive(Debug, Default)]
pub struct StorageTimings {
    count: [AtomicU64; 7],
    micros: [AtomicU64; 7],
    /// Requests sent to another endpoint because one failed.
    failovers: AtomicU64,
}

/// What [`StorageTimings::read`] gives for one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpTotals {
    pub op: StorageOp,
    pub requests: u64,
    pub time: Duration,
}

impl StorageTimings {
    /// Counts one request of kind `op` that took `took`.
    pub fn record(&self, op: StorageOp, took: Duration) {
        let i = op as usize;
        self.count[i].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.micros[i].fetch_add(micros, Ordering::Relaxed);
    }

    /// Counts a request sent to the next endpoint because one failed.
    pub fn record_failover(&self) {
        self.failovers.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests sent to the next endpoint because one failed, since the process started.
    pub fn failovers(&self) -> u64 {
        self.failovers.load(Ordering::Relaxed)
    }

    /// The totals of every kind.
    pub fn read(&self) -> Vec<OpTotals> {
        StorageOp::ALL
            .iter()
            .map(|&op| OpTotals {
                op,
                requests: self.count[op as usize].load(Ordering::Relaxed),
                time: Duration::from_micros(self.micros[op as usize].load(Ordering::Relaxed)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_per_kind() {
        let t = StorageTimings::default();
        t.record(StorageOp::Get, Duration::from_millis(20));
        t.record(StorageOp::Get, Duration::from_millis(5));
        t.record(StorageOp::Put, Duration::from_micros(1500));
        let totals = t.read();
        let of = |op| totals.iter().find(|o| o.op == op).copied().unwrap();
        assert_eq!(of(StorageOp::Get).requests, 2);
        assert_eq!(of(StorageOp::Get).time, Duration::from_millis(25));
        assert_eq!(of(StorageOp::Put).time, Duration::from_micros(1500));
        assert_eq!(of(StorageOp::Head).requests, 0);
        assert_eq!(totals.len(), StorageOp::ALL.len());
    }
}
