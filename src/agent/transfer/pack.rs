//! Small objects uploaded together: the agents' side of `X-Xet-Pack` (docs/lfs-agent.md §12.4).
//!
//! git-lfs hands an agent one object at a time and waits for its `complete`, so an agent
//! cannot gather objects itself. `git xet serve`'s batch answer names, on each small object's
//! upload action, the *pack* it belongs to: some of the batch's small objects, itself among
//! them. The first agent to get an object of a pack uploads every member it finds in git-lfs's
//! object store as one session ([`upload_pack`]: shared xorbs, one shard), then writes down
//! which members it registered; the agents that get the other members wait for it and answer
//! theirs at once. Many small files then cost a few xorbs and one shard per pack instead of
//! one of each per file.
//!
//! Coordination is through two files in git-lfs's temp directory (in [`PACK_DIR`]), named after the batch's
//! session id and the pack: `xet-pack-<id>.lock` (held, with `flock`, by the agent uploading
//! the pack and briefly by each agent that looks) and `xet-pack-<id>.done` (the members
//! registered, or why the pack failed), written before the lock is released. An agent that
//! dies releases the lock, and the next one uploads the pack. Anything unexpected (no member
//! file, a failed pack) falls back to uploading the object on its own, which reports its own
//! errors; a failed pack is never tried again by the other agents. The files are removed an
//! hour after their batch.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use super::{named_by_oid, open_upload, Agent, Lease, Operation, Transfer};
use crate::agent::error::TransferError;
use crate::agent::journal::{Direction, Record};
use crate::agent::protocol::ProtocolWriter;
use xet_client::pipeline::upload::{upload_pack, PackMember, PackSummary, UploadProgress};
use xet_format::LfsOid;
use xet_protocol::wire::{Pack, PACK_HEADER};

/// The directory in git-lfs's temp directory that holds the pack files (of fewer entries than
/// the temp directory, where git-lfs and every agent create and rename files).
pub(super) const PACK_DIR: &str = "xet-packs";

/// Pack files older than this are removed (their batch is long over).
pub(super) const STALE_PACK_AGE: Duration = Duration::from_secs(60 * 60);

/// What became of an object that belongs to a pack.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Packed {
    /// Registered with its pack (by this agent or another): answer `complete`.
    Done,
    /// Not in a pack that was registered: upload it on its own.
    Alone,
}

/// The `.done` file of an upload or download pack: the members it registered or wrote, or
/// why it failed.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Outcome {
    #[serde(default)]
    members: Vec<LfsOid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed: Option<String>,
}

impl Outcome {
    /// The outcome of this agent's work on a pack (`doing`: what it did, for the log).
    pub(super) fn concluded(
        done: Result<Vec<LfsOid>, TransferError>,
        oid: &LfsOid,
        doing: &str,
    ) -> Self {
        match done {
            Ok(members) => Self {
                members,
                failed: None,
            },
            Err(e) => {
                let message = xet_protocol::redact::redact(&e.to_string());
                tracing::warn!(%oid, "{doing} the object's pack failed; each object goes on its own: {message}");
                Self::failed(message)
            }
        }
    }

    fn failed(why: String) -> Self {
        Self {
            members: Vec::new(),
            failed: Some(why),
        }
    }

    /// Whether the pack took care of `oid`.
    pub(super) fn has(&self, oid: &LfsOid) -> bool {
        self.failed.is_none() && self.members.contains(oid)
    }

    /// Writes the outcome to `done_path` for the agents of the other members; if it cannot be
    /// written they do the pack again: more work, nothing lost.
    pub(super) fn write_down(&self, done_path: &Path) {
        if let Err(e) = write_outcome(done_path, self) {
            tracing::warn!(path = %done_path.display(), "cannot write down a pack's outcome: {e}");
        }
    }
}

/// The pack named in `t`'s action, if it is one this agent can upload: the header parses,
/// names `t`'s object, and git-lfs's path for it is in its object store (where the other
/// members are found).
pub(super) fn pack_of(t: &Transfer) -> Option<Pack> {
    let text = t.action.as_ref()?.header(PACK_HEADER)?;
    let pack = match Pack::from_header(text) {
        Ok(pack) => pack,
        Err(e) => {
            tracing::debug!(oid = %t.oid, "ignoring the pack sent with the action: {e}");
            return None;
        }
    };
    let path = t.path.as_deref()?;
    (pack
        .0
        .iter()
        .any(|(oid, size)| *oid == t.oid && *size == t.size)
        && named_by_oid(path, &t.oid))
    .then_some(pack)
}

/// Where git-lfs keeps `oid`, given where it keeps `known` (`…/objects/ab/cd/abcd…`).
fn sibling(known: &Path, oid: &LfsOid) -> Option<PathBuf> {
    let objects = known.parent()?.parent()?.parent()?;
    Some(xet_client::object_chunks::object_path(objects, oid))
}

/// The name shared by the pack's files: the batch's session, the CAS and the members (the
/// pack's header, `members`).
pub(super) fn pack_id(t: &Transfer, members: &str) -> String {
    let mut sha = sha2::Sha256::new();
    if let Some(action) = &t.action {
        for name in ["X-Xet-Session-Id", "X-Xet-Cas-Url"] {
            sha.update(action.header(name).unwrap_or("").as_bytes());
            sha.update([0]);
        }
    }
    sha.update(members.as_bytes());
    let digest = sha.finalize();
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// Takes the lock of the pack whose files are named `<name>.lock` and `<name>.done` in `dir`
/// (waiting while another agent holds it), for the object `oid`. Returns the held lock and the
/// path of the outcome file.
pub(super) fn lock_pack(
    dir: &Path,
    name: &str,
    oid: &LfsOid,
) -> Result<(std::fs::File, PathBuf), TransferError> {
    let lock_path = dir.join(format!("{name}.lock"));
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| TransferError::Local {
            what: "cannot create a pack's lock file",
            path: lock_path.clone(),
            source: e,
        })?;
    let waited = Instant::now();
    lock.lock().map_err(|e| TransferError::Local {
        what: "cannot lock a pack's lock file",
        path: lock_path.clone(),
        source: e,
    })?;
    if waited.elapsed() > Duration::from_millis(50) {
        tracing::debug!(%oid, waited_secs = waited.elapsed().as_secs_f64(), "waited for another agent's pack");
    }
    Ok((lock, dir.join(format!("{name}.done"))))
}

/// How many concluded packs an agent remembers (a fetch of 10,000 small objects has about
/// 1,000): beyond it the memo starts again, and packs are looked up in their files.
const REMEMBERED_PACKS: usize = 4096;

impl Agent {
    /// The outcome of the pack whose files are `<name>.lock` and `<name>.done` in `dir`, for
    /// the object `oid`: remembered if this agent saw the pack concluded, else read from its
    /// outcome file once its lock is free, else `work`'s, written down for the other agents.
    pub(super) fn pack_outcome(
        &mut self,
        dir: &Path,
        name: &str,
        oid: &LfsOid,
        work: impl FnOnce(&mut Self) -> Outcome,
    ) -> Result<Arc<Outcome>, TransferError> {
        if let Some(known) = self.concluded_packs.get(name) {
            return Ok(Arc::clone(known));
        }
        let (lock, done_path) = lock_pack(dir, name, oid)?;
        let outcome = match read_outcome(&done_path) {
            Some(outcome) => outcome,
            None => {
                let outcome = work(self);
                outcome.write_down(&done_path);
                outcome
            }
        };
        drop(lock);
        if self.concluded_packs.len() >= REMEMBERED_PACKS {
            self.concluded_packs.clear();
        }
        let outcome = Arc::new(outcome);
        self.concluded_packs
            .insert(name.to_string(), Arc::clone(&outcome));
        Ok(outcome)
    }

    /// Uploads `t`'s pack if no agent has yet, or learns what the one that did registered.
    pub(super) fn upload_in_pack<W: std::io::Write>(
        &mut self,
        t: &Transfer,
        pack: &Pack,
        writer: &mut ProtocolWriter<W>,
    ) -> Result<Packed, TransferError> {
        let dir = self.made_pack_dir()?;
        let name = format!("xet-pack-{}", pack_id(t, &pack.to_header()));
        let outcome = self.pack_outcome(&dir, &name, &t.oid, |agent| {
            match agent.send_pack(t, pack, 2, writer) {
                Ok(None) => Outcome::failed("fewer than two members here".into()),
                sent => Outcome::concluded(
                    sent.map(|s| {
                        s.map_or_else(Vec::new, |s| s.files.iter().map(|f| f.oid).collect())
                    }),
                    &t.oid,
                    "uploading",
                ),
            }
        })?;
        Ok(if outcome.has(&t.oid) {
            Packed::Done
        } else {
            Packed::Alone
        })
    }

    /// Uploads the members of `pack` found in git-lfs's object store (`None` when fewer than
    /// `least` are there) and records each in the transfer journal.
    pub(super) fn send_pack<W: std::io::Write>(
        &mut self,
        t: &Transfer,
        pack: &Pack,
        least: usize,
        writer: &mut ProtocolWriter<W>,
    ) -> Result<Option<PackSummary>, TransferError> {
        let Some(own) = t.path.as_deref() else {
            return Ok(None);
        };
        let mut files = members_here(own, pack);
        if files.len() < least.max(1) {
            return Ok(None);
        }
        let lease = self.endpoint(t, Operation::Upload)?;
        let endpoint = lease.get();
        writer
            .progress(&t.oid, 1)
            .map_err(TransferError::Progress)?;
        let mut options = xet_client::pipeline::upload::UploadOptions {
            sha256_declared_by_namer: !crate::agent::settings::hash_uploads_forced(),
            ..self.options.upload
        };
        if matches!(lease, Lease::Owned(_)) {
            options.parallel_puts = 1;
        }
        let mut stdout_gone = None;
        let total: u64 = files.iter().map(|(_, _, size)| size).sum();
        let mut report = |p: UploadProgress| {
            // The pack's progress, shown as this object's (the others complete at once).
            let done = p.bytes_done.saturating_mul(t.size) / total.max(1);
            if let Err(e) = writer.progress(&t.oid, done.min(t.size.saturating_sub(1))) {
                stdout_gone.get_or_insert(e);
            }
        };
        let mut attempt = send_files(endpoint, &mut files, &options, &mut report);
        if let Err(e) = &attempt {
            if e.is_lost_xorb() {
                // As for one object: the cache has dropped the xorb; the second pass sends it.
                tracing::warn!(oid = %t.oid, "{}; uploading the pack again", xet_protocol::redact::redact(&e.to_string()));
                for (file, _, _) in &mut files {
                    use std::io::Seek as _;
                    file.rewind().map_err(|e| TransferError::Local {
                        what: "cannot read a pack member again",
                        path: own.to_path_buf(),
                        source: e,
                    })?;
                }
                attempt = send_files(endpoint, &mut files, &options, &mut report);
            }
        }
        let summary = attempt.map_err(|e| TransferError::Upload {
            endpoint: endpoint.describe(),
            source: Box::new(e),
        })?;
        if let Some(e) = stdout_gone {
            return Err(TransferError::Progress(e));
        }
        tracing::info!(
            oid = %t.oid,
            members = summary.files.len(),
            bytes = total,
            uploaded_bytes = summary.uploaded_bytes,
            new_xorbs = summary.new_xorbs,
            "uploaded a pack"
        );
        let described = xet_protocol::redact::redact(&endpoint.describe());
        drop(lease);
        for record in records(&summary, &described) {
            self.record(record);
        }
        Ok(Some(summary))
    }
}

/// The members of `pack` in git-lfs's object store beside `own` (the path of one of them),
/// opened, of the declared size. A member missing here (another clone's object) or of another
/// size is left to the agent git-lfs hands it to, which uploads it or says what is wrong.
fn members_here(own: &Path, pack: &Pack) -> Vec<(std::fs::File, LfsOid, u64)> {
    let mut files = Vec::with_capacity(pack.0.len());
    for (oid, size) in &pack.0 {
        let Some(path) = sibling(own, oid) else {
            continue;
        };
        match open_upload(&path) {
            Ok(file) if file.metadata().is_ok_and(|m| m.len() == *size) => {
                files.push((file, *oid, *size))
            }
            _ => {
                tracing::debug!(%oid, "pack member not in git-lfs's object store; left to its agent")
            }
        }
    }
    files
}

fn send_files(
    endpoint: &dyn xet_protocol::Endpoint,
    files: &mut [(std::fs::File, LfsOid, u64)],
    options: &xet_client::pipeline::upload::UploadOptions,
    report: &mut dyn FnMut(UploadProgress),
) -> Result<PackSummary, xet_client::pipeline::upload::UploadError> {
    let mut members: Vec<PackMember<'_>> = files
        .iter_mut()
        .map(|(file, oid, size)| PackMember {
            reader: file,
            oid: *oid,
            size: *size,
        })
        .collect();
    upload_pack(endpoint, &mut members, options, report)
}

/// The journal records of a pack's members: the bytes sent are shared out by the bytes each
/// member did not find stored.
fn records(summary: &PackSummary, endpoint: &str) -> Vec<Record> {
    let new: Vec<u64> = summary
        .files
        .iter()
        .map(|f| f.size.saturating_sub(f.dedup_bytes))
        .collect();
    let all_new: u64 = new.iter().sum();
    let mut shares: Vec<u64> = new
        .iter()
        .map(|&n| {
            (u128::from(summary.uploaded_bytes) * u128::from(n) / u128::from(all_new.max(1))) as u64
        })
        .collect();
    // What rounding left goes to the member with the most new bytes.
    let rest = summary.uploaded_bytes - shares.iter().sum::<u64>().min(summary.uploaded_bytes);
    if let Some(most) = (0..new.len()).max_by_key(|&i| new[i]) {
        shares[most] += rest;
    }
    summary
        .files
        .iter()
        .zip(shares)
        .map(|(f, share)| {
            let mut record = Record::new(Direction::Upload, &f.oid, &f.file_hash, f.size);
            record.dedup_bytes = f.dedup_bytes;
            record.transferred_bytes = share;
            record.endpoint = endpoint.to_string();
            record
        })
        .collect()
}

/// A pack's outcome file, if it is there and parses.
fn read_outcome(path: &Path) -> Option<Outcome> {
    let text = std::fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Writes the outcome whole (a temporary file renamed into place).
fn write_outcome(path: &Path, outcome: &Outcome) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(&serde_json::to_vec(outcome).map_err(std::io::Error::other)?)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Removes the pack files of batches over [`STALE_PACK_AGE`] ago from `dir`: the lock and
/// outcome files of upload and download packs, and the members a download pack wrote that
/// git-lfs never took.
pub(super) fn remove_stale_packs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let upload =
            name.starts_with("xet-pack-") && (name.ends_with(".lock") || name.ends_with(".done"));
        if !upload
            && !name.starts_with(super::download_pack::FILE_PREFIX)
            && !name.starts_with(super::gather::FILE_PREFIX)
        {
            continue;
        }
        let old = entry
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .and_then(|m| m.modified().ok())
            .is_some_and(|t| t.elapsed().is_ok_and(|age| age >= STALE_PACK_AGE));
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_found_beside_the_object() {
        let a = LfsOid::of(b"a");
        let b = LfsOid::of(b"b");
        let ha = a.to_hex();
        let own = PathBuf::from(format!(
            "/r/.git/lfs/objects/{}/{}/{ha}",
            &ha[0..2],
            &ha[2..4]
        ));
        let hb = b.to_hex();
        assert_eq!(
            sibling(&own, &b).unwrap(),
            PathBuf::from(format!(
                "/r/.git/lfs/objects/{}/{}/{hb}",
                &hb[0..2],
                &hb[2..4]
            ))
        );
    }

    #[test]
    fn sent_bytes_are_shared_out_by_new_bytes() {
        let f = |n: u8, size, dedup_bytes| xet_client::pipeline::upload::PackedFile {
            oid: LfsOid::of(&[n]),
            file_hash: xet_format::FileHash::ZERO,
            size,
            dedup_bytes,
        };
        let summary = PackSummary {
            files: vec![f(1, 100, 0), f(2, 300, 100), f(3, 50, 50)],
            uploaded_bytes: 1000,
            ..Default::default()
        };
        let r = records(&summary, "http://x");
        let sent: Vec<u64> = r.iter().map(|r| r.transferred_bytes).collect();
        assert_eq!(sent, vec![333, 667, 0]);
        assert_eq!(r[1].dedup_bytes, 100);
    }
}
