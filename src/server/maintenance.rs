//! Store maintenance while the server runs: garbage collection and scrubbing on a schedule.
//!
//! The store is opened exclusively by the server, so `git xet gc` and `git xet scrub` cannot run
//! beside it; the server runs the same work itself ([`xet_store::Store::gc`],
//! [`xet_store::Store::scrub`]) on blocking threads, one job of each kind at a time, and logs
//! what it found. The first run of each comes one interval after the start, not at the start.

use std::sync::Arc;
use std::time::Duration;

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
    /// How often the server looks for SHA-256 claims to check (see `server::claims`); `None`:
    /// never (claims on small files are still checked as they are registered). Default: every
    /// second.
    pub claims_interval: Option<Duration>,
    /// On shared storage, how long after the start the first full catch-up begins (the node
    /// serves meanwhile; see [`spawn_sync`]). Default: at once; tests delay it to look at a
    /// node that is still catching up.
    pub first_catch_up_after: Duration,
}

impl Default for Maintenance {
    fn default() -> Self {
        Self {
            gc_interval: Some(Duration::from_secs(24 * 3600)),
            gc_grace: xet_store::gc::DEFAULT_GRACE,
            scrub_interval: None,
            claims_interval: Some(super::claims::PASS_INTERVAL),
            first_catch_up_after: Duration::ZERO,
        }
    }
}

/// How often a node on shared storage looks for shards other nodes accepted.
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// How often it lists every shard, for log entries that arrived too late to be seen.
pub(crate) const FULL_SYNC_INTERVAL: Duration = Duration::from_secs(600);

/// For a store on shared storage, the job that keeps this node's index caught up with the
/// other nodes (see `xet_store::sync`): first a full catch-up, at once (the node serves meanwhile
/// and answers misses "try again shortly"), then the shard log every [`SYNC_INTERVAL`];
/// nothing for a directory store.
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
        loop {
            tokio::time::sleep(pause).await;
            pause = SYNC_INTERVAL;
            // Until a full catch-up succeeds, each turn is one.
            let full = store.catching_up() || last_full.elapsed() >= FULL_SYNC_INTERVAL;
            if full {
                last_full = std::time::Instant::now();
            }
            let st = Arc::clone(&store);
            let job = move || {
                if full {
                    st.catch_up_all()
                } else {
                    st.catch_up()
                }
            };
            match tokio::task::spawn_blocking(job).await {
                Ok(Ok(c)) if c.registered > 0 || c.refused > 0 => tracing::info!(
                    registered = c.registered,
                    refused = c.refused,
                    full,
                    "caught up with shards other nodes accepted"
                ),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot catch up with the other nodes"),
                Err(e) => tracing::error!(error = %e, "catching up with the other nodes stopped"),
            }
        }
    }))
}

/// This machine's name, for the holder of a lease (which node collects, in the logs).
fn hostname() -> Option<String> {
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
        let store = Arc::clone(store);
        let options = GcOptions {
            grace: m.gc_grace,
            dry_run: false,
        };
        // On shared storage one node collects: the one holding the lease, renewed at each of
        // its runs for a little longer than the interval; another takes over once it lapses.
        let holder = format!(
            "{}-{}",
            hostname().unwrap_or_else(|| "node".into()),
            xet_client::random_hex(6)
        );
        let lease = every + Duration::from_secs(3600);
        jobs.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let st = Arc::clone(&store);
                let holder = holder.clone();
                let run = move || match st.take_gc_lease(&holder, lease)? {
                    None => st.gc(options).map(Some),
                    Some((other, until)) => {
                        let until = super::lfs::locks::rfc3339(
                            until
                                .duration_since(std::time::UNIX_EPOCH)
                                .map_or(0, |d| d.as_secs()),
                        );
                        tracing::info!(
                            %other,
                            %until,
                            "scheduled garbage collection left to the node that holds the lease"
                        );
                        Ok(None)
                    }
                };
                match tokio::task::spawn_blocking(run).await {
                    Ok(Ok(None)) => {}
                    Ok(Ok(Some(r))) => tracing::info!(
                        removed = r.xorbs_removed,
                        bytes_freed = r.bytes_freed,
                        young = r.xorbs_young,
                        entries_dropped = r.entries_dropped,
                        temp_files_removed = r.temp_files_removed,
                        "scheduled garbage collection done"
                    ),
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "scheduled garbage collection failed")
                    }
                    Err(e) => tracing::error!(error = %e, "scheduled garbage collection stopped"),
                }
            }
        }));
    }
    if let Some(every) = m.scrub_interval {
        jobs.push(spawn_scrub(Arc::clone(store), every));
    }
    jobs
}

/// The scheduled scrub: every `every`, checks every stored xorb and shard and logs what it found.
fn spawn_scrub(store: Arc<Store>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let st = Arc::clone(&store);
            match tokio::task::spawn_blocking(move || st.scrub(&mut |_| {})).await {
                Ok(Ok(r)) if r.found_damage() => tracing::error!(
                    xorbs = r.xorbs_checked,
                    damaged_xorbs = r.damaged_xorbs.len(),
                    damaged_shards = r.damaged_shards.len(),
                    files_affected = r.affected_file_count,
                    "scheduled scrub found damage (see the errors above); affected files \
                     download again once a client pushes them"
                ),
                Ok(Ok(r)) => tracing::info!(
                    xorbs = r.xorbs_checked,
                    bytes = r.bytes_checked,
                    shards = r.shards_checked,
                    "scheduled scrub found no damage"
                ),
                Ok(Err(e)) => tracing::error!(error = %e, "scheduled scrub failed"),
                Err(e) => tracing::error!(error = %e, "scheduled scrub stopped"),
            }
        }
    })
}
