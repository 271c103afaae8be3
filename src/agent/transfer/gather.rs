//! Small objects of a standalone push uploaded together: packs the agents gather themselves
//! (docs/lfs-agent.md §12.6).
//!
//! In standalone mode no LFS server deals the push's small objects into packs (§12.4), and
//! git-lfs hands each agent one object at a time, waiting for its `complete`: alone, every
//! small file would cost a xorb and a shard, each a request and an object in the store. So an
//! agent given a small object writes it down in a queue the push's agents share (one per
//! endpoint) and waits for the queue's lock. The agent that gets the lock with its object not
//! taken yet leads a round: it takes every object queued so far, its own first, takes the
//! round's own lock, names the round for each member it took ([`Round`]) and lets the queue's
//! lock go; then it uploads them as one pack (`send_pack`: new chunks in shared xorbs, one
//! shard), marks each member it registered and lets the round's lock go. An agent that gets
//! the queue's lock and finds its object marked answers `complete` at once; one that finds it
//! taken by a round waits for that round's lock ([`wait_for_round`]) and then finds its mark.
//! Rounds overlap: the next one starts while the one before goes up (1000 files of 1-100 KiB
//! to a directory store: 1.66 s against 2.39 s when each round waited for the one before,
//! medians of three alternating pushes, 2026-11-27). A round takes the objects that reached
//! the agents since the one before; one that finds fewer than [`SMALL_ROUND`] waits once for
//! more ([`linger_after`]: a tenth of the agent's last round, at most [`LINGER`]).
//!
//! Everything unexpected falls back to the object going up on its own, which reports its own
//! errors: a queue line lost in a race (its agent finds no mark and no round, and leads a
//! round), a failed round or one whose agent died (no mark once its lock is free). The files
//! live in git-lfs's temp directory ([`pack::PACK_DIR`]): `xet-gather-<key>.queue` (lines
//! `oid size`, appended), `.lock` (the queue's lock, held with `flock` while a round is taken),
//! `xet-gather-<key>-round-<id>.lock` (a round's lock, held while it goes up, removed after),
//! `xet-gather-<key>-<oid>.taken` (the id of the round that took a member) and
//! `xet-gather-<key>-<oid>.ok` (a member registered); a member's agent removes its `.taken` and
//! `.ok`; `<key>` hashes the endpoint. Files left by agents that died are removed an hour later
//! with the packs' files.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sha2::Digest as _;

use super::endpoint::Standalone;
use super::pack::{self, Packed};
use super::{named_by_oid, Agent, Transfer};
use crate::agent::error::TransferError;
use crate::agent::protocol::ProtocolWriter;
use xet_format::LfsOid;
use xet_protocol::wire::{Pack, MAX_PACK_MEMBERS};

/// Objects smaller than this are gathered: those that skip looking for earlier versions
/// ([`super::prior::MIN_PRIOR_SIZE`]), which a pack would not use.
pub(super) const GATHER_BELOW: u64 = super::prior::MIN_PRIOR_SIZE;

/// A round that finds fewer objects queued than this waits once for more ([`linger_after`]).
const SMALL_ROUND: usize = 4;

/// How long a small round waits for more objects at most: 10,000 files through a Garage-backed
/// node went up in 5,690 object-store writes instead of 8,205 with a wait of 3 ms, and a wait
/// of 6 ms made the push slower.
const LINGER: Duration = Duration::from_millis(3);

/// How long a small round waits for more objects after the agent's last round took `last`: a
/// tenth of it, at most [`LINGER`], and not at all before the agent has led one. Rounds are
/// taken one at a time, so the wait is paid by the whole push: it is worth it where each round
/// costs requests to object storage (tens of milliseconds), not for a directory store, whose
/// rounds take a few milliseconds (1000 files of 1-100 KiB: 2.92 s with a 3 ms wait, 2.51 s
/// with 0.8 ms, 2.58 s with none; medians of three alternating pushes, 2026-11-27).
fn linger_after(last: Option<Duration>) -> Duration {
    last.map_or(Duration::ZERO, |d| (d / 10).min(LINGER))
}

/// The prefix of the gathering files' names in [`pack::PACK_DIR`].
pub(super) const FILE_PREFIX: &str = "xet-gather-";

/// Whether `t` goes up in a gathered pack: a standalone upload (no action from an LFS server)
/// of a small, non-empty object in git-lfs's object store (where the leader finds it).
pub(super) fn gathers(t: &Transfer) -> bool {
    t.action.is_none()
        && gathered_size(t.size)
        && t.path.as_deref().is_some_and(|p| named_by_oid(p, &t.oid))
}

/// Whether an object of `size` bytes is small enough to go up with others (non-empty, under
/// [`GATHER_BELOW`]): in a gathered round or ahead of git-lfs.
pub(super) fn gathered_size(size: u64) -> bool {
    size > 0 && size < GATHER_BELOW
}

/// The name shared by the files of the queue of the endpoint described by `endpoint`.
fn queue_name(endpoint: &str) -> String {
    let digest = sha2::Sha256::digest(endpoint.as_bytes());
    let key: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("{FILE_PREFIX}{key}")
}

impl Agent {
    /// Uploads `t` in a pack gathered with the other agents' small objects, or learns that
    /// another agent's round registered it. [`Packed::Alone`]: upload it on its own.
    pub(super) fn upload_gathered<W: std::io::Write>(
        &mut self,
        t: &Transfer,
        writer: &mut ProtocolWriter<W>,
    ) -> Result<Packed, TransferError> {
        let Some(endpoint) = self.standalone_identity() else {
            return Ok(Packed::Alone);
        };
        let dir = self.made_pack_dir()?;
        let name = queue_name(&endpoint);
        // Registered already: by a round of an earlier object, or ahead of the push (see
        // `upload_ahead`); nothing to queue or wait for.
        if std::fs::remove_file(mark_path(&dir, &name, &t.oid)).is_ok() {
            let _ = std::fs::remove_file(taken_path(&dir, &name, &t.oid));
            return Ok(Packed::Done);
        }
        let queue = dir.join(format!("{name}.queue"));
        append_line(&queue, &format!("{} {}\n", t.oid.to_hex(), t.size))?;
        let (lock, _) = pack::lock_pack(&dir, &name, &t.oid)?;
        match found_for(&dir, &name, &t.oid) {
            Found::Registered => return Ok(Packed::Done),
            Found::TakenBy(round) => {
                // A round still going up took this object: wait for that round, not for the
                // queue's lock (the next round may start meanwhile).
                drop(lock);
                wait_for_round(&dir, &name, &round);
                let registered = std::fs::remove_file(mark_path(&dir, &name, &t.oid)).is_ok();
                return Ok(if registered {
                    Packed::Done
                } else {
                    Packed::Alone
                });
            }
            Found::Nothing => {}
        }
        // This agent leads the next round: everything queued, its own object first.
        let mut members = vec![(t.oid, t.size)];
        take_queued(&queue, &mut members);
        let linger = linger_after(self.last_gathered_round);
        if members.len() < SMALL_ROUND && !linger.is_zero() {
            // The objects git-lfs hands the other agents meanwhile join this round: on object
            // storage each round is a few writes, whatever its size.
            std::thread::sleep(linger);
            take_queued(&queue, &mut members);
        }
        // The round holds its own lock while it goes up, and tells each member's agent which
        // round took its object; then the queue's lock is free for the next round.
        let round = Round::start(&dir, &name, &members[1..]);
        drop(lock);
        // A round of one goes up all the same: the objects queued meanwhile make the next
        // round.
        let started = Instant::now();
        let sent = self.send_pack(t, &Pack(members), 1, writer);
        self.last_gathered_round = Some(started.elapsed());
        let registered: Vec<LfsOid> = match sent {
            Ok(Some(summary)) => summary.files.iter().map(|f| f.oid).collect(),
            Ok(None) => Vec::new(),
            Err(e) => {
                tracing::warn!(
                    oid = %t.oid,
                    "uploading a gathered pack failed; each object goes on its own: {}",
                    xet_protocol::redact::redact(&e.to_string())
                );
                Vec::new()
            }
        };
        for oid in registered.iter().filter(|o| **o != t.oid) {
            if let Err(e) = std::fs::File::create(mark_path(&dir, &name, oid)) {
                // Its agent uploads it again: more work, nothing lost.
                tracing::debug!(%oid, "cannot mark a gathered object as registered: {e}");
            }
        }
        drop(round);
        Ok(if registered.contains(&t.oid) {
            Packed::Done
        } else {
            Packed::Alone
        })
    }

    /// Uploads `packs` of a push's small objects (oid and size, as git-lfs's pre-push selects
    /// them) before git-lfs hands them to its agents, each as one session (a xorb and a shard),
    /// and marks each registered object as a round does: the agents git-lfs then hands them to
    /// answer `complete` at once. Members not in git-lfs's object store with that size are left
    /// to the agents. Returns how many were registered. Standalone mode only; elsewhere nothing
    /// is done.
    pub(super) fn upload_ahead(
        &mut self,
        packs: &[Vec<(LfsOid, u64)>],
    ) -> Result<usize, TransferError> {
        let Some(endpoint) = self.standalone_identity() else {
            return Ok(0);
        };
        let dir = self.made_pack_dir()?;
        let name = queue_name(&endpoint);
        let store = crate::agent::settings::objects_beside(&self.lfs_temp_dir()?);
        let mut writer = ProtocolWriter::new(std::io::sink());
        let mut registered = 0;
        for members in packs.iter().filter(|p| p.len() >= 2) {
            let first = members[0];
            let t = Transfer {
                oid: first.0,
                size: first.1,
                path: Some(xet_client::object_chunks::object_path(&store, &first.0)),
                action: None,
            };
            let sent = match self.send_pack(&t, &Pack(members.clone()), 2, &mut writer) {
                Ok(Some(summary)) => summary.files,
                Ok(None) => continue,
                Err(e) => {
                    // The agents upload them as usual, and say what is wrong if it still is.
                    tracing::warn!(
                        "uploading small objects ahead of the push failed: {}",
                        xet_protocol::redact::redact(&e.to_string())
                    );
                    break;
                }
            };
            for file in &sent {
                if std::fs::File::create(mark_path(&dir, &name, &file.oid)).is_ok() {
                    registered += 1;
                }
            }
        }
        Ok(registered)
    }

    /// What names the standalone endpoint in the gathering files (its URL or directory),
    /// without opening it; `None` when it cannot be resolved (the upload on its own then says
    /// why).
    fn standalone_identity(&mut self) -> Option<String> {
        match self.resolved_standalone() {
            Ok(Standalone::Remote(r)) => Some(r.describe()),
            Ok(Standalone::Dir(dir, _, _)) => Some(dir.display().to_string()),
            Err(_) => None,
        }
    }
}

fn mark_path(dir: &Path, name: &str, oid: &LfsOid) -> PathBuf {
    dir.join(format!("{name}-{}.ok", oid.to_hex()))
}

/// What an agent holding the queue's lock finds for its object `oid`.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// Registered by a round that is over (its mark, now removed).
    Registered,
    /// Taken by the round with this id, still going up.
    TakenBy(String),
    /// Neither: the agent leads a round.
    Nothing,
}

/// What `oid`'s agent finds: its mark and the note of the round that took it are both removed
/// here (a note left behind would send a later push of the object to wait for a round long
/// over).
fn found_for(dir: &Path, name: &str, oid: &LfsOid) -> Found {
    let taken = taken_path(dir, name, oid);
    let round = std::fs::read_to_string(&taken).ok();
    if round.is_some() {
        let _ = std::fs::remove_file(&taken);
    }
    if std::fs::remove_file(mark_path(dir, name, oid)).is_ok() {
        return Found::Registered;
    }
    round.map_or(Found::Nothing, |r| Found::TakenBy(r.trim().to_string()))
}

/// Where a round that took `oid` names itself for `oid`'s agent.
fn taken_path(dir: &Path, name: &str, oid: &LfsOid) -> PathBuf {
    dir.join(format!("{name}-{}.taken", oid.to_hex()))
}

/// The lock file of the round `id`.
fn round_lock_path(dir: &Path, name: &str, id: &str) -> PathBuf {
    dir.join(format!("{name}-round-{id}.lock"))
}

/// Rounds this process has led, for their ids.
static ROUNDS_LED: AtomicU64 = AtomicU64::new(0);

/// A round going up: its lock, held until it is dropped (after the members' marks are
/// written), when the lock file is removed.
struct Round {
    /// The held lock and its path; `None` when the lock file could not be had, and then the
    /// members' agents find no round named and lead their own.
    lock: Option<(std::fs::File, PathBuf)>,
}

impl Round {
    /// Takes the lock of a new round and writes, for each of `others`, which round took it.
    fn start(dir: &Path, name: &str, others: &[(LfsOid, u64)]) -> Self {
        let id = format!(
            "{}-{}",
            std::process::id(),
            ROUNDS_LED.fetch_add(1, Ordering::Relaxed)
        );
        let path = round_lock_path(dir, name, &id);
        let locked = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .and_then(|f| f.lock().map(|()| f));
        let lock = match locked {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(path = %path.display(), "cannot lock a gathering round: {e}");
                return Self { lock: None };
            }
        };
        for (oid, _) in others {
            if let Err(e) = std::fs::write(taken_path(dir, name, oid), &id) {
                // Its agent, finding neither a mark nor a round, leads a round of its own.
                tracing::debug!(%oid, "cannot name the round that took a gathered object: {e}");
            }
        }
        Self {
            lock: Some((lock, path)),
        }
    }
}

impl Drop for Round {
    fn drop(&mut self) {
        if let Some((lock, path)) = self.lock.take() {
            // Removed while held: an agent that opens it later finds it gone (the round is
            // over), one that opened it before gets the lock once it is released.
            let _ = std::fs::remove_file(&path);
            drop(lock);
        }
    }
}

/// Waits until the round `id` is over: its lock is free, or its file is gone. An id that is
/// not one this module writes is not waited for.
fn wait_for_round(dir: &Path, name: &str, id: &str) {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        return;
    }
    if let Ok(f) = std::fs::File::open(round_lock_path(dir, name, id)) {
        // A lock that cannot be taken (a filesystem without locks) is not waited for: the
        // object then goes up again on its own if its mark is not there yet.
        let _ = f.lock();
    }
}

/// Appends one line to the queue in one write (O_APPEND: lines of agents appending at once do
/// not interleave).
fn append_line(queue: &Path, line: &str) -> Result<(), TransferError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(queue)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| TransferError::Local {
            what: "cannot queue an object for a gathered upload",
            path: queue.to_path_buf(),
            source: e,
        })
}

/// Takes the queue's lines: the file is renamed away first, so lines appended from now on go
/// to a new queue (a line written into the renamed file after it was read is lost, and its
/// agent leads a round of its own). Lines that do not parse are skipped.
fn drain(queue: &Path) -> Vec<(LfsOid, u64)> {
    let taken = queue.with_extension(format!("taken-{}", std::process::id()));
    if std::fs::rename(queue, &taken).is_err() {
        return Vec::new();
    }
    let text = std::fs::read_to_string(&taken).unwrap_or_default();
    let _ = std::fs::remove_file(&taken);
    parse_queue(&text)
}

/// Adds the queued objects to a round's `members`, each once, up to [`MAX_PACK_MEMBERS`]
/// (the agents of those left out find no mark and lead a round of their own).
fn take_queued(queue: &Path, members: &mut Vec<(LfsOid, u64)>) {
    for (oid, size) in drain(queue) {
        if members.len() < MAX_PACK_MEMBERS && !members.iter().any(|(o, _)| *o == oid) {
            members.push((oid, size));
        }
    }
}

fn parse_queue(text: &str) -> Vec<(LfsOid, u64)> {
    text.lines()
        .filter_map(|line| {
            let (oid, size) = line.split_once(' ')?;
            Some((LfsOid::from_hex(oid).ok()?, size.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_lines_parse_and_bad_ones_are_skipped() {
        let a = LfsOid::of(b"a");
        let b = LfsOid::of(b"b");
        let text = format!(
            "{} 12\nnonsense\n{} x\n{} 7\n",
            a.to_hex(),
            b.to_hex(),
            b.to_hex()
        );
        assert_eq!(parse_queue(&text), vec![(a, 12), (b, 7)]);
    }

    #[test]
    fn a_drained_queue_is_gone_and_the_next_line_starts_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("xet-gather-k.queue");
        let a = LfsOid::of(b"a");
        let b = LfsOid::of(b"b");
        append_line(&queue, &format!("{} 1\n", a.to_hex())).unwrap();
        append_line(&queue, &format!("{} 2\n", b.to_hex())).unwrap();
        assert_eq!(drain(&queue), vec![(a, 1), (b, 2)]);
        assert!(drain(&queue).is_empty());
        append_line(&queue, &format!("{} 3\n", a.to_hex())).unwrap();
        assert_eq!(drain(&queue), vec![(a, 3)]);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_round_lingers_a_tenth_of_the_last_one_at_most_three_milliseconds() {
        assert_eq!(linger_after(None), Duration::ZERO);
        assert_eq!(
            linger_after(Some(Duration::from_millis(8))),
            Duration::from_micros(800)
        );
        assert_eq!(linger_after(Some(Duration::from_millis(30))), LINGER);
        assert_eq!(linger_after(Some(Duration::from_millis(190))), LINGER);
        assert_eq!(linger_after(Some(Duration::ZERO)), Duration::ZERO);
    }

    #[test]
    fn a_member_waits_for_the_round_that_took_it_and_no_longer() {
        let dir = tempfile::tempdir().unwrap();
        let (dir, name) = (dir.path().to_path_buf(), "xet-gather-k");
        let a = LfsOid::of(b"a");
        let round = Round::start(&dir, name, &[(a, 1)]);
        let id = std::fs::read_to_string(taken_path(&dir, name, &a)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let (dir, id) = (dir.clone(), id.clone());
            std::thread::spawn(move || {
                wait_for_round(&dir, name, &id);
                tx.send(()).unwrap();
            })
        };
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the member did not wait for its round"
        );
        drop(round);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the member goes on when its round is over");
        waiter.join().unwrap();
        // The round's file is gone; a round that is over, or a name that is no round's, is
        // not waited for.
        assert!(!round_lock_path(&dir, name, &id).exists());
        wait_for_round(&dir, name, &id);
        wait_for_round(&dir, name, "../../x");
        let b = LfsOid::of(b"b");
        let second = Round::start(&dir, name, &[(b, 2)]);
        let other = std::fs::read_to_string(taken_path(&dir, name, &b)).unwrap();
        assert_ne!(other, id, "each round has its own lock");
        drop(second);
    }

    #[test]
    fn an_agent_finds_its_mark_or_its_round_and_leaves_neither_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (dir, name) = (dir.path(), "xet-gather-k");
        let a = LfsOid::of(b"a");
        assert_eq!(found_for(dir, name, &a), Found::Nothing);
        // Taken by a round still going up.
        std::fs::write(taken_path(dir, name, &a), "12-3").unwrap();
        assert_eq!(found_for(dir, name, &a), Found::TakenBy("12-3".into()));
        assert!(!taken_path(dir, name, &a).exists());
        // Taken by a round that is over and registered it.
        std::fs::write(taken_path(dir, name, &a), "12-4").unwrap();
        std::fs::write(mark_path(dir, name, &a), "").unwrap();
        assert_eq!(found_for(dir, name, &a), Found::Registered);
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0, "nothing left");
        assert_eq!(found_for(dir, name, &a), Found::Nothing);
    }

    #[test]
    fn endpoints_do_not_share_queues() {
        assert_ne!(queue_name("http://x"), queue_name("http://y"));
        assert_eq!(queue_name("http://x"), queue_name("http://x"));
        assert!(queue_name("/srv/store").starts_with(FILE_PREFIX));
    }
}
