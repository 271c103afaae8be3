//! What garbage collection in one process knows ([`Collector`]): its name, the xorbs it is
//! deleting, when it ran, and the sweep records ([`SweepRecord`]) of the other processes on
//! shared storage it read. State and the records' text; the collection itself is `crate::gc`'s.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use xet_format::XorbHash;

/// How far apart the clocks of processes sharing a bucket may be (the shard log's window).
pub(crate) const CLOCK_SKEW_MS: u64 = crate::storage_url::LOG_WINDOW_MS;

/// What garbage collection in one process knows and does: its name, the xorbs it is deleting,
/// the other processes' sweep records it read, when it ran.
#[derive(Debug)]
pub(crate) struct Collector {
    /// Xorbs garbage collection is deleting right now: they count as not stored.
    pub(crate) doomed: std::sync::Mutex<HashSet<XorbHash>>,
    /// The name this process's garbage collections sign their sweep records with (random).
    pub(crate) sweeper_id: String,
    /// The other processes' sweep records as last listed.
    pub(crate) sweeps: std::sync::Mutex<SweepView>,
    /// When this process's running garbage collection started (ms since the epoch), and when
    /// the last one ended; 0: none (see [`crate::Store::gc_running_for`]).
    pub(crate) gc_clock: GcClock,
}

impl Collector {
    pub(crate) fn new() -> Self {
        Self {
            doomed: Default::default(),
            sweeper_id: xet_protocol::random_hex(8),
            sweeps: Default::default(),
            gc_clock: GcClock::default(),
        }
    }
}

/// When this process's garbage collection started and last ended, for operators
/// ([`crate::Store::gc_running_for`], [`crate::Store::gc_last_ended`]).
#[derive(Debug, Default)]
pub(crate) struct GcClock {
    pub(crate) started_ms: std::sync::atomic::AtomicU64,
    pub(crate) ended_ms: std::sync::atomic::AtomicU64,
}

/// Marks a collection as running until dropped.
pub(crate) struct Running<'a>(&'a GcClock);

impl<'a> Running<'a> {
    pub(crate) fn start(clock: &'a GcClock) -> Self {
        clock
            .started_ms
            .store(unix_ms(SystemTime::now()).max(1), Ordering::Relaxed);
        Running(clock)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0
            .ended_ms
            .store(unix_ms(SystemTime::now()).max(1), Ordering::Relaxed);
        self.0.started_ms.store(0, Ordering::Relaxed);
    }
}

/// A sweep record (`gc/sweeps/<ms>-<id>` on shared storage): what a collector is about to
/// delete, until when, and whether it is done. As text:
///
/// ```text
/// git-xet sweep 1
/// holder <id of the collecting process>
/// deadline <unix ms>
/// state running|done
/// <xorb hash>
/// …
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SweepRecord {
    pub holder: String,
    pub deadline_ms: u64,
    pub done: bool,
    /// The xorbs it names; `None` for a record that cannot be read, taken as naming any xorb.
    pub xorbs: Option<HashSet<XorbHash>>,
}

const SWEEP_MAGIC: &str = "git-xet sweep 1";

impl SweepRecord {
    pub(crate) fn to_text(&self) -> String {
        let state = if self.done { "done" } else { "running" };
        let mut text = format!(
            "{SWEEP_MAGIC}\nholder {}\ndeadline {}\nstate {state}\n",
            self.holder, self.deadline_ms
        );
        let mut xorbs: Vec<&XorbHash> = self.xorbs.iter().flatten().collect();
        xorbs.sort();
        for x in xorbs {
            text.push_str(&x.to_hex());
            text.push('\n');
        }
        text
    }

    /// The record in `bytes`; `None` unless it is one, whole.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        if lines.next()? != SWEEP_MAGIC {
            return None;
        }
        let holder = lines.next()?.strip_prefix("holder ")?.to_string();
        let deadline_ms = lines.next()?.strip_prefix("deadline ")?.parse().ok()?;
        let done = match lines.next()?.strip_prefix("state ")? {
            "running" => false,
            "done" => true,
            _ => return None,
        };
        let xorbs = lines
            .map(|l| XorbHash::from_hex(l).ok())
            .collect::<Option<HashSet<_>>>()?;
        Some(Self {
            holder,
            deadline_ms,
            done,
            xorbs: Some(xorbs),
        })
    }

    /// Whether the record names `xorb` (an unreadable record names every xorb).
    pub(crate) fn names(&self, xorb: &XorbHash) -> bool {
        self.xorbs.as_ref().is_none_or(|x| x.contains(xorb))
    }

    /// Whether nothing it names can be deleted any more: done, or past its deadline by more
    /// than the clocks of two processes may differ.
    pub(crate) fn settled(&self, now_ms: u64) -> bool {
        self.done || now_ms > self.deadline_ms.saturating_add(CLOCK_SKEW_MS)
    }
}

/// The time a sweep record's name gives (`<16-digit ms>-<id>`).
pub(crate) fn sweep_name_ms(name: &str) -> Option<u64> {
    let (ms, id) = name.split_once('-')?;
    (ms.len() == 16 && !id.is_empty()).then(|| ms.parse().ok())?
}

/// `t` in milliseconds since the Unix epoch.
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The sweep records a process has read (see `Store::confirm_against_sweeps`).
#[derive(Debug, Default)]
pub(crate) struct SweepView {
    /// When the last listing started.
    pub(crate) listed_at: Option<Instant>,
    /// The records of that listing, by name (a done record is not read again).
    pub(crate) records: HashMap<String, Arc<SweepRecord>>,
}
