//! Partial downloads in git-lfs's temp directory: how they are named and locked, which ones a
//! stopped agent left, and how a later download of the same object takes one over.
//!
//! A partial download is `xet-<first 16 hex digits of the oid>-<pid>-<random>.part`, named
//! after the agent process that writes it, and locked (`flock`) by that process for as long
//! as it is written: the lock, not the pid, says whether someone is using it (an agent in
//! another pid namespace shares the directory but not the pids; a pid is used again after
//! its process is gone). Objects of [`RESUMABLE_MIN`] bytes and more are written as a
//! [`PartialFile`]: the file's bytes followed by the record of what is written and checked
//! so far, cut off once the download is complete.
//!
//! - **Taken over, not removed.** A download of an object first looks for a partial file of
//!   that object an earlier download left ([`Parts::adopt`]): one nobody holds the lock of
//!   whose record is of this very download (oid, Xet file hash, size). It takes the lock,
//!   checks it still has the file it opened by that name, renames it under its own pid and
//!   goes on from what the record holds (each stretch read back and checked before it is
//!   kept: see [`xet_client::pipeline::resume`]). Whichever agent process runs the next
//!   download, in whichever git-lfs command, an interrupted one is resumed.
//! - **Kept on failure.** A download that fails (a broken connection, git-lfs gone) leaves
//!   its partial file in place when its record holds something, unlocked, for the next
//!   attempt; otherwise it is removed, as is one whose bytes did not verify.
//! - **Removed when useless** ([`Parts::scan`], the first transfer of each process, before
//!   any of its agents writes one; `git xet fetch` runs several agents in one process):
//!   unlocked files of a process that is gone that are empty, or whose object git-lfs already
//!   has; files of an older naming (no pid) unlocked and not written to for
//!   [`STALE_PART_AGE`]. Others are left for a download to take over, or for git-lfs, which
//!   removes what its temp directory holds once it has not been written to for an hour.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::TransferError;
use xet_client::pipeline::resume::PartialFile;
use xet_format::{FileHash, LfsOid};

/// The suffix of partial downloads in git-lfs's temp directory.
pub(super) const PART_SUFFIX: &str = ".part";

/// A partial download of the older naming (no pid) not written to for this long, whose lock
/// can be taken, is stale (the age covers the moment between another agent creating its file
/// and locking it, and between handing a finished file over and git-lfs moving it).
const STALE_PART_AGE: Duration = Duration::from_secs(5);

/// Objects from this size on are downloaded into a [`PartialFile`] that a later download can
/// resume; smaller ones cost less to fetch again than to record.
pub(crate) const RESUMABLE_MIN: u64 = 1 << 20;

/// `xet-<first 16 hex digits of the oid>-`: the start of the names of `oid`'s partial files.
fn object_prefix(oid: &LfsOid) -> String {
    format!("xet-{}-", &oid.to_hex()[..16])
}

/// `xet-<first 16 hex digits of the oid>-<this process's pid>-`: the name prefix of the
/// partial downloads this process writes.
pub(super) fn part_prefix(oid: &LfsOid) -> String {
    format!("{}{}-", object_prefix(oid), std::process::id())
}

/// The oid's 16 hex digits, the pid and the random part of a partial download's name
/// (`xet-<16 hex>-<pid>-<random>.part`); `None` for names of another shape (the older
/// `xet-<16 hex>-<random>.part`).
fn part_name(name: &str) -> Option<(&str, u32, &str)> {
    let rest = name.strip_prefix("xet-")?.strip_suffix(PART_SUFFIX)?;
    let (oid16, rest) = rest.split_at_checked(16)?;
    if !oid16.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (pid, random) = rest.strip_prefix('-')?.split_once('-')?;
    if pid.is_empty() || random.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((oid16, pid.parse().ok()?, random))
}

/// Whether git-lfs's storage `objects` holds an object whose oid starts with `oid16`.
fn stored(objects: &Path, oid16: &str) -> bool {
    let dir = objects.join(&oid16[..2]).join(&oid16[2..4]);
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(oid16))
    })
}

/// Whether `file` (opened, and locked by us) is still what `path` names: not renamed by
/// another agent that took it over, nor moved by git-lfs, since it was opened.
#[cfg(unix)]
fn still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn still_at(_file: &File, _path: &Path) -> bool {
    false
}

/// The partial downloads of git-lfs's temp directory that a download may take over, by the
/// first 16 hex digits of their object's oid, as this agent process found them.
#[derive(Debug, Default)]
pub(super) struct Parts {
    by_object: HashMap<String, Vec<PathBuf>>,
}

impl Parts {
    /// Reads `dir` (git-lfs's temp directory), with `remove` removing the partial downloads
    /// stopped agents left that are of no use (see the module documentation; `objects` is
    /// git-lfs's object storage, when known), and keeping note of the others. Removing runs
    /// before this process writes a partial download of its own (a file under this process's
    /// pid is then an earlier process's): once per process and directory, which the caller
    /// sees to. Failures are logged, never fatal.
    pub(super) fn scan(dir: &Path, objects: Option<&Path>, remove: bool) -> Self {
        let mut parts = Parts::default();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return parts;
        };
        let me = std::process::id();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !name.starts_with("xet-") || !name.ends_with(PART_SUFFIX) {
                continue;
            }
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let useless = match part_name(&name) {
                Some((oid16, pid, _)) => {
                    let useless = meta.len() == 0 || objects.is_some_and(|o| stored(o, oid16));
                    if !useless {
                        parts
                            .by_object
                            .entry(oid16.to_ascii_lowercase())
                            .or_default()
                            .push(path.clone());
                    }
                    // The holder's pid decides; a pid that cannot be checked leaves the file
                    // alone. This process has written nothing yet: a file under its pid is an
                    // earlier process's that had the same pid (a container's agents often do).
                    useless
                        && (pid == me || xet_protocol::util::os::process_exists(pid) == Some(false))
                }
                None => meta
                    .modified()
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= STALE_PART_AGE)),
            };
            if useless && remove {
                remove_unlocked(&path);
            }
        }
        parts
    }

    /// Notes a partial file of this process's that a failed download left for the next one.
    fn left(&mut self, oid: &LfsOid, path: PathBuf) {
        self.by_object
            .entry(oid.to_hex()[..16].to_string())
            .or_default()
            .push(path);
    }

    /// Takes over a partial file an earlier download of `oid` (Xet file `file_hash`, `size`
    /// bytes) left in `dir`: the first one nobody holds the lock of whose record is of this
    /// download. It is locked, renamed under this process's pid, and its record read back.
    pub(super) fn adopt(
        &mut self,
        dir: &Path,
        oid: &LfsOid,
        file_hash: &FileHash,
        size: u64,
    ) -> Option<Part> {
        let candidates = self.by_object.remove(&oid.to_hex()[..16])?;
        for path in candidates {
            match take_over(dir, &path, oid, file_hash, size) {
                Ok(Some(part)) => return Some(part),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(path = %path.display(), "cannot take over a partial download: {e}")
                }
            }
        }
        None
    }

    /// Ends a download's use of `part`: see [`Part::end`].
    pub(super) fn end(&mut self, oid: &LfsOid, part: Part) {
        if let Some(path) = part.end() {
            self.left(oid, path);
        }
    }
}

/// Removes `path` if nobody holds its lock (failures are logged).
fn remove_unlocked(path: &Path) {
    let Ok(file) = File::open(path) else {
        return;
    };
    // The lock as well: a holder in another pid namespace still holds it.
    match file.try_lock() {
        Ok(()) if still_at(&file, path) => match std::fs::remove_file(path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed a partial download a stopped agent left")
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot remove a stale partial download: {e}")
            }
        },
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            tracing::debug!(path = %path.display(), "partial download in use by another agent")
        }
        Err(std::fs::TryLockError::Error(e)) => {
            tracing::debug!(path = %path.display(), "cannot lock a partial download: {e}")
        }
    }
}

/// [`Parts::adopt`] of the file at `path`: `None` when it is in use, gone, or holds no
/// record of this download (it is left as it is: it may be a finished file git-lfs is about
/// to move).
fn take_over(
    dir: &Path,
    path: &Path,
    oid: &LfsOid,
    file_hash: &FileHash,
    size: u64,
) -> std::io::Result<Option<Part>> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    if !still_at(&file, path) {
        return Ok(None);
    }
    let Some(record) = PartialFile::reopen(file.try_clone()?, oid, file_hash, size)? else {
        return Ok(None);
    };
    // Under this process's name, so that the clean-up of other agents sees whose it is.
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let random = name.as_deref().and_then(part_name).map(|(_, _, r)| r);
    let Some(random) = random else {
        return Ok(None);
    };
    let mine = dir.join(format!("{}{random}{PART_SUFFIX}", part_prefix(oid)));
    if mine != path {
        std::fs::rename(path, &mine)?;
    }
    let temp_path = tempfile::TempPath::try_from_path(&mine)?;
    tracing::info!(
        %oid,
        from = %path.display(),
        recorded_bytes = record.found(),
        "taking over the partial download an earlier download left"
    );
    Ok(Some(Part {
        tmp: Some(tempfile::NamedTempFile::from_parts(file, temp_path)),
        record: Some(record),
        discard: std::cell::Cell::new(false),
    }))
}

/// A new partial download of `oid` (Xet file `file_hash`, `size` bytes) in git-lfs's temp
/// directory `dir`, locked while it is written, so that no other agent removes or takes it
/// (a killed agent's lock goes with it).
pub(super) fn new_part(
    dir: &Path,
    oid: &LfsOid,
    file_hash: &FileHash,
    size: u64,
) -> Result<Part, TransferError> {
    let local = |e| TransferError::Local {
        what: "cannot create a file in",
        path: dir.to_path_buf(),
        source: e,
    };
    // Read and write for all but what the umask takes away (`open(2)` applies it), as git-lfs
    // creates its objects: git-lfs moves this file into its store as it is.
    let mut tmp = tempfile::Builder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        tmp.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = tmp
        .prefix(&part_prefix(oid))
        .suffix(PART_SUFFIX)
        .tempfile_in(dir)
        .map_err(local)?;
    // Waits out another agent that looks at the new file the moment it appears (it lets go
    // at once: the file holds no record).
    if let Err(e) = tmp.as_file().lock() {
        tracing::debug!(path = %tmp.path().display(), "cannot lock the partial download: {e}");
    }
    let record = if size >= RESUMABLE_MIN {
        let file = tmp.as_file().try_clone().map_err(local)?;
        Some(PartialFile::create(file, oid, file_hash, size).map_err(local)?)
    } else {
        None
    };
    Ok(Part {
        tmp: Some(tmp),
        record,
        discard: std::cell::Cell::new(false),
    })
}

/// A partial download being written: its file (locked), and for a resumable object its
/// record.
pub(super) struct Part {
    tmp: Option<tempfile::NamedTempFile>,
    record: Option<PartialFile>,
    /// What is written is not to be trusted by a next download.
    discard: std::cell::Cell<bool>,
}

impl Part {
    pub(super) fn path(&self) -> &Path {
        self.tmp.as_ref().map_or(Path::new(""), |t| t.path())
    }

    /// The record of a resumable download.
    pub(super) fn record(&self) -> Option<&PartialFile> {
        self.record.as_ref()
    }

    /// The file (for a download without a record).
    pub(super) fn file(&self) -> Option<&File> {
        self.tmp.as_ref().map(|t| t.as_file())
    }

    /// Empties the file (and its record) for a download that starts over.
    pub(super) fn restart(&self, oid: &LfsOid) -> std::io::Result<()> {
        match (&self.record, &self.tmp) {
            (Some(record), _) => record.restart(oid),
            (None, Some(tmp)) => tmp.as_file().set_len(0),
            (None, None) => Ok(()),
        }
    }

    /// What is written did not verify: the file goes when the download ends.
    pub(super) fn discard(&self) {
        self.discard.set(true);
    }

    /// The download is complete: the record is cut off and the file handed over (unlocked)
    /// under its path.
    pub(super) fn keep(mut self) -> Result<PathBuf, TransferError> {
        if let Some(record) = self.record.take() {
            record.finish().map_err(TransferError::Keep)?;
        }
        let Some(tmp) = self.tmp.take() else {
            return Err(TransferError::Keep(std::io::Error::other(
                "the partial download is gone",
            )));
        };
        let (_, path) = tmp.keep().map_err(|e| TransferError::Keep(e.error))?;
        Ok(path)
    }

    /// The download failed: the file stays, unlocked, when its record holds something a
    /// next download can take over (its path is returned), and is removed otherwise.
    fn end(mut self) -> Option<PathBuf> {
        let resumable = self
            .record
            .take()
            .is_some_and(|r| r.resumable() > 0 && !self.discard.get());
        let tmp = self.tmp.take()?;
        if !resumable {
            return None; // dropped: removed
        }
        match tmp.keep() {
            Ok((_, path)) => {
                tracing::info!(path = %path.display(), "partial download kept for the next attempt");
                Some(path)
            }
            Err(e) => {
                tracing::debug!("cannot keep the partial download: {}", e.error);
                None
            }
        }
    }
}

impl Drop for Part {
    /// A part dropped without [`Part::keep`] or [`Parts::end`] is kept or removed as `end`
    /// would.
    fn drop(&mut self) {
        if self.tmp.is_some() {
            let part = Part {
                tmp: self.tmp.take(),
                record: self.record.take(),
                discard: std::cell::Cell::new(self.discard.get()),
            };
            let _ = part.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_client::pipeline::download::WriteAt;
    use xet_client::pipeline::resume::Extent;
    use xet_format::{ChunkHash, ChunkRef, XorbHash};

    /// A partial file of `oid` (Xet file `hash`, 4 MiB) in `dir` under another process's
    /// name, recording its first 1000 bytes.
    fn left_behind(dir: &Path, oid: &LfsOid, hash: &FileHash, pid: u32) -> PathBuf {
        let path = dir.join(format!("{}{pid}-x1y2{PART_SUFFIX}", object_prefix(oid)));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        let part = PartialFile::create(file, oid, hash, 4 << 20).unwrap();
        let bytes = vec![1u8; 1000];
        part.write_all_at(&bytes, 0).unwrap();
        part.record(&Extent {
            at: 0,
            xorb: XorbHash::from_bytes([3; 32]),
            from: (0, 0),
            to: (1, 1008),
            chunks: vec![ChunkRef::new(ChunkHash::of(&bytes), 1000)],
        })
        .unwrap();
        path
    }

    /// git-lfs moves an agent's file into its store as it is, and creates its own objects
    /// readable by all but what the umask takes away: a new partial download is made so.
    #[test]
    fn a_new_partial_download_has_the_mode_git_lfs_gives_objects() {
        use std::os::unix::fs::PermissionsExt as _;
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let umask = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .map(|m| u32::from_str_radix(m.trim(), 8).unwrap())
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let oid = LfsOid::of(b"an object");
        let part = new_part(dir.path(), &oid, &FileHash::from_bytes([5; 32]), 10).unwrap();
        let mode = std::fs::metadata(part.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask, "umask {umask:o}");
    }

    #[test]
    fn a_partial_download_is_taken_over_only_when_nobody_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let oid = LfsOid::of(b"an object");
        let hash = FileHash::from_bytes([5; 32]);
        let path = left_behind(dir.path(), &oid, &hash, 4_000_000);
        let mut parts = Parts::scan(dir.path(), None, true);

        // Its writer holds it (alive, or in another pid namespace): left alone.
        let holder = File::open(&path).unwrap();
        holder.lock().unwrap();
        assert!(parts.adopt(dir.path(), &oid, &hash, 4 << 20).is_none());
        assert!(path.exists());
        drop(holder);

        // Of another download (another Xet file): left alone too.
        let mut parts = Parts::scan(dir.path(), None, true);
        let other = FileHash::from_bytes([6; 32]);
        assert!(parts.adopt(dir.path(), &oid, &other, 4 << 20).is_none());
        assert!(path.exists());

        // Nobody's: taken over, under this process's name, with what it recorded.
        let mut parts = Parts::scan(dir.path(), None, true);
        let part = parts
            .adopt(dir.path(), &oid, &hash, 4 << 20)
            .expect("taken over");
        assert!(!path.exists());
        let name = part
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        assert!(name.starts_with(&part_prefix(&oid)), "{name}");
        assert_eq!(part.record().map(|r| r.found()), Some(1000));
        // Held by its new owner while it is used.
        let again = File::open(part.path()).unwrap();
        assert!(again.try_lock().is_err());
        drop(again);

        // Given up with something recorded: kept for the next attempt, unlocked.
        let kept = part.path().to_path_buf();
        parts.end(&oid, part);
        assert!(kept.exists());
        assert!(File::open(&kept).unwrap().try_lock().is_ok());
        let part = parts
            .adopt(dir.path(), &oid, &hash, 4 << 20)
            .expect("taken again by the same process");
        // What did not verify goes.
        part.discard();
        let path = part.path().to_path_buf();
        parts.end(&oid, part);
        assert!(!path.exists());
    }

    #[test]
    fn useless_partial_downloads_of_gone_agents_are_removed_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path().join("objects");
        let oid = LfsOid::of(b"stored");
        let hex = oid.to_hex();
        std::fs::create_dir_all(objects.join(&hex[..2]).join(&hex[2..4])).unwrap();
        std::fs::write(objects.join(&hex[..2]).join(&hex[2..4]).join(&hex), b"x").unwrap();
        let hash = FileHash::from_bytes([5; 32]);
        // A pid no process has: a child that has exited.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stored = left_behind(dir.path(), &oid, &hash, dead);
        let other = LfsOid::of(b"not stored");
        let resumable = left_behind(dir.path(), &other, &hash, dead);
        let empty = dir
            .path()
            .join(format!("{}{dead}-e{PART_SUFFIX}", object_prefix(&other)));
        std::fs::write(&empty, b"").unwrap();
        let mut parts = Parts::scan(dir.path(), Some(&objects), true);
        assert!(!stored.exists() && !empty.exists());
        assert!(resumable.exists());
        assert!(parts.adopt(dir.path(), &other, &hash, 4 << 20).is_some());
    }

    #[test]
    fn names_of_partial_downloads() {
        let oid = LfsOid::of(b"x");
        let name = format!("{}a1B2c3{PART_SUFFIX}", part_prefix(&oid));
        let (oid16, pid, random) = part_name(&name).unwrap();
        assert_eq!(
            (oid16, pid, random),
            (&oid.to_hex()[..16], std::process::id(), "a1B2c3")
        );
        for other in [
            "xet-0123456789abcdef-killed.part",
            "xet-0123456789abcdef-12-x.txt",
            "xet-0123456789abcdeg-12-x.part",
            "xet-0123456789abcdef--x.part",
            "xet-0123456789abcdef-12-.part",
        ] {
            assert_eq!(part_name(other), None, "{other}");
        }
    }
}
