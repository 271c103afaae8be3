//! Store maintenance while the server runs: garbage collection and scrubbing on a schedule.
//!
//! The store is opened exclusively by the server, so `git xet gc` and `git xet scrub` cannot run
//! beside it; the server runs the same work itself ([`xet_store::Store::gc`],
//! [`xet_store::Store::scrub`]) on blocking threads, one job of each kind at a time, and logs
//! what it found. The first run of each comes one interval after the start, not at the start.
//! Each garbage collection this node runs is also recorded for the status page
//! ([`xet_store::Store::record_gc_run`]).

use std::sync::Arc;
use std::time::Duration;
use xet_protocol::util::now_ms;

use super::metrics::{storage_error, StorageOperation};
use xet_store::checkpoint::CompactOptions;
use xet_store::stats::GcRun;
use xet_store::{GcOptions, Store};

/// When the server maintains its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maintenance {
    /// How often unused xorbs are collected; `None`: never. Default: daily.
    pub gc_interval: Option<Duration>,
    /// Unused xorbs younger than this are kept. Default: a day.
    pub gc_grace: Duration,
    /// How often every stored object is verified; `None` (the default): never.
    pub scrub_interval: Option<Duration>,
    /// On shared storage, how often a checkpoint of the shard log is written (by one node at
    /// a time, the holder of the `checkpoint` lease; see [`xet_store::checkpoint`]); `None`:
    /// never. Default: hourly.
    pub checkpoint_interval: Option<Duration>,
    /// How old a checkpoint must be before the objects it covers are deleted. Default:
    /// [`xet_store::checkpoint::CHECKPOINT_GRACE`].
    pub checkpoint_grace: Duration,
    /// How often the server looks for SHA-256 claims to check (see `server::claims`); `None`:
    /// never (claims on small files are still checked as they are registered). Default: every
    /// second.
    pub claims_interval: Option<Duration>,
    /// On shared storage, how long after the start the first full catch-up begins (the node
    /// serves meanwhile; see [`spawn_sync`]). Default: at once; tests delay it to look at a
    /// node that is still catching up.
    pub first_catch_up_after: Duration,
    /// On shared storage, the oldest the last successful catch-up with the other nodes may be
    /// for `/ready` to answer 200. Default: [`READY_MAX_LAG`].
    pub ready_max_lag: Duration,
}

/// The default [`Maintenance::ready_max_lag`]: a minute, well above a catch-up's second and the
/// time a full listing of a large bucket takes.
pub const READY_MAX_LAG: Duration = Duration::from_secs(60);

impl Default for Maintenance {
    fn default() -> Self {
        Self {
            gc_interval: Some(Duration::from_secs(24 * 3600)),
            gc_grace: xet_store::gc::DEFAULT_GRACE,
            scrub_interval: None,
            checkpoint_interval: Some(Duration::from_secs(3600)),
            checkpoint_grace: xet_store::checkpoint::CHECKPOINT_GRACE,
            claims_interval: Some(super::claims::PASS_INTERVAL),
            first_catch_up_after: Duration::ZERO,
            ready_max_lag: READY_MAX_LAG,
        }
    }
}

/// How often a node on shared storage looks for shards other nodes accepted.
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// How often it lists every shard, for log entries that arrived too late to be seen.
pub(crate) const FULL_SYNC_INTERVAL: Duration = Duration::from_secs(600);
/// The longest pause between catch-ups that fail: what a node waits at most, once its storage
/// answers again, before it catches up.
const SYNC_RETRY_MAX: Duration = Duration::from_secs(10);
/// The first pause after a scheduled collection or scrub failed (doubling up to its interval).
const MAINTENANCE_RETRY: Duration = Duration::from_secs(60);
/// How often a background job that runs long says so in the log.
const RUNNING_LONG: Duration = Duration::from_secs(60);

/// The pauses of a background job: its interval after a success; after failures in a row, a
/// retry delay that doubles from `first_retry` up to `max`. A job that fails (storage down, a
/// full disk, a panic in it) is tried again, never given up: only the server's shutdown ends it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    every: Duration,
    first_retry: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    pub(crate) fn new(every: Duration, first_retry: Duration, max: Duration) -> Self {
        Self {
            every,
            first_retry,
            max,
            failures: 0,
        }
    }

    /// The pause before the next run, after a run that succeeded or not.
    pub(crate) fn after(&mut self, succeeded: bool) -> Duration {
        if succeeded {
            self.failures = 0;
            return self.every;
        }
        self.failures = self.failures.saturating_add(1);
        let doubled = 2u32.saturating_pow(self.failures.saturating_sub(1).min(20));
        self.first_retry.saturating_mul(doubled).min(self.max)
    }
}

/// Runs `job` on a blocking thread and waits for it, saying in the log every minute that it
/// still runs. A failure or a panic is logged (`what` says what was being done), counted under
/// `op` in `gitxet_storage_errors_total`, and gives `None`.
pub(crate) async fn run_job<T, E>(
    op: StorageOperation,
    what: &'static str,
    job: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Option<T>
where
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let started = std::time::Instant::now();
    let mut handle = tokio::task::spawn_blocking(job);
    let outcome = loop {
        match tokio::time::timeout(RUNNING_LONG, &mut handle).await {
            Ok(outcome) => break outcome,
            Err(_) => tracing::warn!(
                secs = started.elapsed().as_secs(),
                "still {what}: storage is slow or does not answer"
            ),
        }
    };
    match outcome {
        Ok(Ok(value)) => Some(value),
        Ok(Err(e)) => {
            storage_error(op);
            tracing::warn!(error = %e, "failed {what}; trying again later");
            None
        }
        Err(e) => {
            storage_error(op);
            tracing::error!(error = %e, "failed {what} (a panic, a bug); trying again later");
            None
        }
    }
}

/// For a store on shared storage, the job that keeps this node's index caught up with the
/// other nodes (see `xet_store::sync`): first a full catch-up, at once (the node serves meanwhile
/// and answers misses "try again shortly"), then the shard log every [`SYNC_INTERVAL`];
/// nothing for a directory store. A catch-up that fails is tried again after a pause that
/// grows to [`SYNC_RETRY_MAX`], for as long as the server runs.
pub(crate) fn spawn_sync(
    store: &Arc<Store>,
    m: Maintenance,
) -> Option<tokio::task::JoinHandle<()>> {
    if !store.is_shared() {
        return None;
    }
    let store = Arc::clone(store);
    Some(tokio::spawn(async move {
        let mut last_full = std::time::Instant::now();
        let mut pause = m.first_catch_up_after;
        let mut backoff = Backoff::new(SYNC_INTERVAL, SYNC_INTERVAL, SYNC_RETRY_MAX);
        loop {
            tokio::time::sleep(pause).await;
            // Until a full catch-up succeeds, each turn is one.
            let full = store.catching_up() || last_full.elapsed() >= FULL_SYNC_INTERVAL;
            let st = Arc::clone(&store);
            let job = move || {
                if full {
                    st.catch_up_all()
                } else {
                    st.catch_up()
                }
            };
            let done = run_job(
                StorageOperation::CatchUp,
                "catching up with the other nodes",
                job,
            )
            .await;
            if let Some(c) = &done {
                if full {
                    last_full = std::time::Instant::now();
                }
                if c.registered > 0 || c.refused > 0 {
                    tracing::info!(
                        registered = c.registered,
                        refused = c.refused,
                        full,
                        "caught up with shards other nodes accepted"
                    );
                }
            }
            pause = backoff.after(done.is_some());
        }
    }))
}

/// This machine's name, for the holder of a lease (which node collects, in the logs).
pub(crate) fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.".contains(c)))
    .then(|| name.to_string())
}

/// Starts the scheduled jobs; abort the returned tasks to stop them.
pub fn spawn(store: &Arc<Store>, m: Maintenance) -> Vec<tokio::task::JoinHandle<()>> {
    let mut jobs = Vec::new();
    if let Some(every) = m.gc_interval {
        let options = GcOptions {
            grace: m.gc_grace,
            dry_run: false,
        };
        jobs.push(spawn_leased(
            store,
            every,
            Leased {
                lease: "gc",
                op: StorageOperation::Gc,
                what: "collecting garbage",
            },
            move |st| {
                let started = now_ms();
                let outcome = st.gc(options);
                let record = match &outcome {
                    Ok(r) => GcRun::done(started, now_ms(), r),
                    Err(e) => GcRun::failed(
                        started,
                        now_ms(),
                        xet_protocol::redact::redact(&e.to_string()),
                    ),
                };
                // For the status page; the collection's outcome stands either way.
                if let Err(e) = st.record_gc_run(&record) {
                    tracing::warn!(error = %e, "cannot record the garbage collection");
                }
                outcome
            },
            |r| {
                tracing::info!(
                    removed = r.xorbs_removed,
                    bytes_freed = r.bytes_freed,
                    young = r.xorbs_young,
                    entries_dropped = r.entries_dropped,
                    temp_files_removed = r.temp_files_removed,
                    "scheduled garbage collection done"
                );
            },
        ));
    }
    if let (Some(every), true) = (m.checkpoint_interval, store.is_shared()) {
        let options = CompactOptions {
            grace: m.checkpoint_grace,
        };
        jobs.push(spawn_leased(
            store,
            every,
            Leased {
                lease: "checkpoint",
                op: StorageOperation::Checkpoint,
                what: "writing a checkpoint of the shard log",
            },
            move |st| st.compact(options),
            // The store logs what it wrote and removed.
            |_| {},
        ));
    }
    if let Some(every) = m.scrub_interval {
        jobs.push(spawn_scrub(Arc::clone(store), every));
    }
    jobs
}

/// A scheduled job that one node of a cluster runs at a time (see [`spawn_leased`]).
struct Leased {
    /// The lease's name in the bucket (`leases/<name>`).
    lease: &'static str,
    /// Where its failures are counted.
    op: StorageOperation,
    /// What it does, for the log.
    what: &'static str,
}

/// Runs `job` every `every` on a blocking thread, and `done` with what it reported. On shared
/// storage one node runs it: the one holding lease `leased.lease`, renewed at each of its runs
/// for a little longer than the interval; another takes over once it lapses.
fn spawn_leased<T: Send + 'static>(
    store: &Arc<Store>,
    every: Duration,
    leased: Leased,
    job: impl Fn(&Store) -> Result<T, xet_store::StoreError> + Send + Sync + Copy + 'static,
    done: impl Fn(&T) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let store = Arc::clone(store);
    let holder = format!(
        "{}-{}",
        hostname().unwrap_or_else(|| "node".into()),
        xet_protocol::random_hex(6)
    );
    let lease = every + Duration::from_secs(3600);
    tokio::spawn(async move {
        let mut backoff = Backoff::new(every, MAINTENANCE_RETRY.min(every), every);
        let mut pause = every;
        loop {
            tokio::time::sleep(pause).await;
            let st = Arc::clone(&store);
            let holder = holder.clone();
            let run = move || match st.take_lease(leased.lease, &holder, lease)? {
                None => job(&st).map(Some),
                Some((other, until)) => {
                    let until = super::lfs::locks::rfc3339(
                        until
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs()),
                    );
                    tracing::info!(
                        %other,
                        %until,
                        job = leased.what,
                        "scheduled job left to the node that holds its lease"
                    );
                    Ok(None)
                }
            };
            let outcome = run_job(leased.op, leased.what, run).await;
            if let Some(Some(r)) = &outcome {
                done(r);
            }
            pause = backoff.after(outcome.is_some());
        }
    })
}

/// The scheduled scrub: every `every`, checks every stored xorb and shard and logs what it found
/// (a scrub that fails is tried again after a pause that doubles from a minute).
fn spawn_scrub(store: Arc<Store>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Backoff::new(every, MAINTENANCE_RETRY.min(every), every);
        let mut pause = every;
        loop {
            tokio::time::sleep(pause).await;
            let st = Arc::clone(&store);
            let done = run_job(StorageOperation::Scrub, "scrubbing the store", move || {
                st.scrub(&mut |_| {})
            })
            .await;
            match &done {
                Some(r) if r.found_damage() => tracing::error!(
                    xorbs = r.xorbs_checked,
                    damaged_xorbs = r.damaged_xorbs.len(),
                    damaged_shards = r.damaged_shards.len(),
                    files_affected = r.affected_file_count,
                    "scheduled scrub found damage (see the errors above); affected files \
                     download again once a client pushes them"
                ),
                Some(r) => tracing::info!(
                    xorbs = r.xorbs_checked,
                    bytes = r.bytes_checked,
                    shards = r.shards_checked,
                    "scheduled scrub found no damage"
                ),
                None => {}
            }
            pause = backoff.after(done.is_some());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_after_failures_and_come_back_after_a_success() {
        let s = Duration::from_secs;
        let mut b = Backoff::new(s(1), s(1), s(10));
        let pauses: Vec<Duration> = [false, false, false, false, false, true, false]
            .into_iter()
            .map(|ok| b.after(ok))
            .collect();
        assert_eq!(pauses, [s(1), s(2), s(4), s(8), s(10), s(1), s(1)]);
        // A daily job retries after a minute, then less and less often, never beyond a day.
        let mut b = Backoff::new(s(86400), s(60), s(86400));
        assert_eq!(b.after(false), s(60));
        for _ in 0..40 {
            assert!(b.after(false) <= s(86400));
        }
        assert_eq!(b.after(true), s(86400));
    }

    #[test]
    fn a_job_that_fails_or_panics_is_counted_and_the_next_one_runs() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let errors = || crate::server::metrics::storage_errors_of(StorageOperation::Scrub);
        let before = errors();
        runtime.block_on(async {
            let failed: Option<()> = run_job(StorageOperation::Scrub, "testing", || {
                Err("the disk is full")
            })
            .await;
            assert_eq!(failed, None);
            let panicked: Option<()> = run_job(StorageOperation::Scrub, "testing", || {
                if true {
                    panic!("a bug");
                }
                Ok::<(), String>(())
            })
            .await;
            assert_eq!(panicked, None);
            let fine = run_job(StorageOperation::Scrub, "testing", || Ok::<_, String>(7)).await;
            assert_eq!(fine, Some(7));
        });
        assert_eq!(errors(), before + 2);
    }
}
