//! Writing a work tree's Git LFS files as git's checkout would, without git: which paths git
//! would pass through git-lfs's smudge filter and nothing else ([`smudged_as_is`]), and
//! recording in git's index that such a file now holds its content ([`record_written`]), so
//! that git takes it as unchanged by its stat data instead of running the clean filter (which
//! reads and hashes the whole file) to find out.
//!
//! git compares an index entry with its file by stat data (times, inode, size, owner), unless
//! the entry is "racily clean": its file was modified in the same second as the index was
//! written, or later, so a change within that second would not show in the times. git and
//! libgit2 check such entries by content. A file written here is given a modification time
//! ([`settled_mtime`]) before the index it is recorded in was last written, so that neither
//! looks at its content again.
//!
//! The same stat data tells which LFS object a checked-out file holds without reading it
//! ([`checked_out_objects`]), as git tells that a file is unchanged.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use git2::{IndexEntry, IndexTime, Oid, Repository};

use super::{Git, GitError};
use xet_format::LfsOid;

/// Why the index could not be updated (libgit2's error beside the message, not its source:
/// see [`super::objects::ObjectsError`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum IndexError {
    #[error("cannot read git's index: {}", super::objects::said(.0))]
    Read(git2::Error),
    #[error("cannot write git's index: {}", super::objects::said(.0))]
    Write(git2::Error),
}

/// For each of `paths` (`/`-separated, from the work tree's root), whether git's checkout
/// writes it as git-lfs's smudge filter gives it, byte for byte: `filter=lfs` and `-text`, as
/// `git lfs track` sets them (no end-of-line or encoding conversion after the filter).
pub(crate) fn smudged_as_is(git: &Git, paths: &[&str]) -> Result<Vec<bool>, GitError> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = Command::new("git");
    if let Some(d) = git.dir() {
        cmd.current_dir(d);
    }
    cmd.args(["check-attr", "-z", "--stdin", "filter", "text"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(GitError::Spawn)?;
    let mut input = Vec::new();
    for p in paths {
        input.extend_from_slice(p.as_bytes());
        input.push(0);
    }
    let mut stdin = child.stdin.take();
    // Written by another thread: git answers while it reads, and a full pipe each way would
    // stop both.
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            let _ = s.write_all(&input);
        }
    });
    let out = child.wait_with_output().map_err(GitError::Spawn)?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(GitError::Failed {
            args: "check-attr -z --stdin filter text".to_string(),
            code: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(parse_check_attr(&out.stdout, paths))
}

/// `git check-attr -z` output (path, attribute, value; NUL after each) for `filter` and
/// `text`, as [`smudged_as_is`] answers it. A path git did not answer for is not as is.
fn parse_check_attr(out: &[u8], paths: &[&str]) -> Vec<bool> {
    let mut lfs = std::collections::HashMap::<&[u8], (bool, bool)>::new();
    let mut fields = out.split(|b| *b == 0);
    while let (Some(path), Some(attr), Some(value)) = (fields.next(), fields.next(), fields.next())
    {
        let e = lfs.entry(path).or_default();
        match attr {
            b"filter" => e.0 = value == b"lfs",
            b"text" => e.1 = value == b"unset",
            _ => {}
        }
    }
    paths
        .iter()
        .map(|p| lfs.get(p.as_bytes()) == Some(&(true, true)))
        .collect()
}

/// The modification time to give files written before [`record_written`] records them in the
/// index of `repo`: a whole second before the index file's own, so that none of them is
/// racily clean. An index last written more than a few seconds ago is written again first
/// (unchanged), so that the files do not get an old time. `None` without an index file.
pub(crate) fn settled_mtime(repo: &Repository) -> Option<SystemTime> {
    let path = repo.path().join("index");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut stamp = modified(&path)?;
    let old = SystemTime::now()
        .duration_since(stamp)
        .is_ok_and(|age| age > Duration::from_secs(5));
    if old {
        let mut index = repo.index().ok()?;
        index.write().ok()?;
        stamp = modified(&path)?;
    }
    let secs = stamp.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs.saturating_sub(1)))
}

/// Records in the index of `repo` that each of `files` (path from the work tree's root, and
/// the blob its index entry must name) was written as git's checkout would: its entry takes the
/// file's current stat data. An entry that names another blob (something else is staged), or
/// a file that is gone, is left as it is. Returns how many entries were updated.
pub(crate) fn record_written(
    repo: &Repository,
    files: &[(String, Oid)],
) -> Result<usize, IndexError> {
    let Some(root) = repo.workdir().map(Path::to_path_buf) else {
        return Ok(0);
    };
    let mut index = repo.index().map_err(IndexError::Read)?;
    let mut updated = 0;
    for (path, blob) in files {
        let Some(entry) = index.get_path(Path::new(path), 0) else {
            continue;
        };
        if entry.id != *blob {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(root.join(path)) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let entry = with_stat(entry, &meta);
        index.add(&entry).map_err(IndexError::Write)?;
        updated += 1;
    }
    if updated > 0 {
        index.write().map_err(IndexError::Write)?;
    }
    Ok(updated)
}

/// Index entry flags: "assume unchanged" (`git update-index --assume-unchanged`), and in the
/// extended flags "skip worktree" (sparse checkouts). git does not compare such a file with its
/// entry, so the entry says nothing about the file.
const ASSUME_VALID: u16 = 0x8000;
const SKIP_WORKTREE: u16 = 0x4000;

/// The LFS objects that the work-tree files at `paths` (`/`-separated, from the work tree's
/// root) hold, as git's index tells without reading them: a path is in the answer when its
/// index entry is an LFS pointer and its file's stat data is the entry's (git takes it as
/// unchanged), and the entry is not racily clean (its file modified in the second the index
/// was written, or later). A path the index cannot vouch for (no entry, not a pointer, changed
/// since, assumed unchanged, not on this platform) is left out: its file may hold anything.
pub(crate) fn checked_out_objects<'a>(
    repo: &Repository,
    paths: impl IntoIterator<Item = &'a str>,
) -> HashMap<String, LfsOid> {
    let mut out = HashMap::new();
    let Some(root) = repo.workdir() else {
        return out;
    };
    let written = std::fs::metadata(repo.path().join("index"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
    let (Some(written), Ok(index), Ok(odb)) = (written, repo.index(), repo.odb()) else {
        return out;
    };
    for path in paths {
        if path.is_empty() || out.contains_key(path) {
            continue;
        }
        let Some(entry) = index.get_path(Path::new(path), 0) else {
            continue;
        };
        if entry.flags & ASSUME_VALID != 0 || entry.flags_extended & SKIP_WORKTREE != 0 {
            continue;
        }
        // Racily clean: a change within the index's second would not show in the times.
        if i64::from(entry.mtime.seconds()) >= written.as_secs() as i64 {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(root.join(path)) else {
            continue;
        };
        if !meta.is_file() || !same_stat(&entry, &meta) {
            continue;
        }
        if let Some(pointer) = super::history::pointer(repo, &odb, entry.id) {
            out.insert(path.to_owned(), pointer.oid);
        }
    }
    out
}

/// Whether `meta` is the stat data `entry` recorded (as git compares them).
#[cfg(unix)]
fn same_stat(entry: &IndexEntry, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    index_time(meta.mtime(), meta.mtime_nsec()) == entry.mtime
        && index_time(meta.ctime(), meta.ctime_nsec()) == entry.ctime
        && meta.dev() as u32 == entry.dev
        && meta.ino() as u32 == entry.ino
        && meta.uid() == entry.uid
        && meta.gid() == entry.gid
        && meta.len() as u32 == entry.file_size
}

/// Without the full stat data the entry cannot vouch for its file.
#[cfg(not(unix))]
fn same_stat(_entry: &IndexEntry, _meta: &std::fs::Metadata) -> bool {
    false
}

/// `entry` with the stat data of `meta`, as git records it (sizes and times as 32-bit fields).
#[cfg(unix)]
fn with_stat(mut entry: IndexEntry, meta: &std::fs::Metadata) -> IndexEntry {
    use std::os::unix::fs::MetadataExt;
    entry.ctime = index_time(meta.ctime(), meta.ctime_nsec());
    entry.mtime = index_time(meta.mtime(), meta.mtime_nsec());
    entry.dev = meta.dev() as u32;
    entry.ino = meta.ino() as u32;
    entry.uid = meta.uid();
    entry.gid = meta.gid();
    entry.file_size = meta.len() as u32;
    entry
}

/// A time as the index records it (32-bit seconds and nanoseconds).
#[cfg(unix)]
fn index_time(secs: i64, nanos: i64) -> IndexTime {
    IndexTime::new(secs as i32, nanos as u32)
}

#[cfg(not(unix))]
fn with_stat(mut entry: IndexEntry, meta: &std::fs::Metadata) -> IndexEntry {
    entry.file_size = meta.len() as u32;
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_mtime(file: &Path, at: SystemTime) {
        let f = std::fs::File::options().write(true).open(file).unwrap();
        f.set_modified(at).unwrap();
    }

    /// A repository whose index records `m.bin` as the pointer of `content`, with the stat
    /// data of the file holding it (modified ten seconds ago, so not racily clean).
    fn checked_out(content: &[u8]) -> (tempfile::TempDir, Repository, LfsOid) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let pointer = xet_format::pointer::Pointer::new(LfsOid::of(content), content.len() as u64);
        let blob = repo.blob(pointer.to_string().as_bytes()).unwrap();
        let file = dir.path().join("m.bin");
        std::fs::write(&file, content).unwrap();
        set_mtime(&file, SystemTime::now() - Duration::from_secs(10));
        let meta = std::fs::metadata(&file).unwrap();
        let entry = IndexEntry {
            ctime: IndexTime::new(0, 0),
            mtime: IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode: 0o100644,
            uid: 0,
            gid: 0,
            file_size: 0,
            id: blob,
            flags: 0,
            flags_extended: 0,
            path: b"m.bin".to_vec(),
        };
        let mut index = repo.index().unwrap();
        index.add(&with_stat(entry, &meta)).unwrap();
        index.write().unwrap();
        (dir, repo, pointer.oid)
    }

    #[test]
    fn the_index_vouches_only_for_unchanged_files() {
        let (dir, repo, oid) = checked_out(b"version one of the model");
        let held = checked_out_objects(&repo, ["m.bin", "other.bin", ""]);
        assert_eq!(held.get("m.bin"), Some(&oid));
        assert_eq!(held.len(), 1, "{held:?}");

        // Rewritten since (another size): the entry no longer says what the file holds.
        let file = dir.path().join("m.bin");
        std::fs::write(&file, b"version two, longer than the first").unwrap();
        set_mtime(&file, SystemTime::now() - Duration::from_secs(10));
        assert!(checked_out_objects(&repo, ["m.bin"]).is_empty());

        // Racily clean: recorded with a time in the index's own second or later.
        let (dir, repo, _) = checked_out(b"version one of the model");
        let file = dir.path().join("m.bin");
        set_mtime(&file, SystemTime::now() + Duration::from_secs(60));
        let mut index = repo.index().unwrap();
        let entry = index.get_path(Path::new("m.bin"), 0).unwrap();
        index
            .add(&with_stat(entry, &std::fs::metadata(&file).unwrap()))
            .unwrap();
        index.write().unwrap();
        assert!(checked_out_objects(&repo, ["m.bin"]).is_empty());

        // Assumed unchanged: git does not look at the file, so neither does the answer.
        let (_dir, repo, _) = checked_out(b"version one of the model");
        let mut index = repo.index().unwrap();
        let mut entry = index.get_path(Path::new("m.bin"), 0).unwrap();
        entry.flags |= ASSUME_VALID;
        index.add(&entry).unwrap();
        index.write().unwrap();
        assert!(checked_out_objects(&repo, ["m.bin"]).is_empty());
    }

    #[test]
    fn only_lfs_files_without_text_conversion_are_as_is() {
        let out = b"a.bin\0filter\0lfs\0a.bin\0text\0unset\0\
b.bin\0filter\0lfs\0b.bin\0text\0set\0\
c.txt\0filter\0unspecified\0c.txt\0text\0unset\0\
d.bin\0filter\0lfs\0d.bin\0text\0unspecified\0";
        assert_eq!(
            parse_check_attr(out, &["a.bin", "b.bin", "c.txt", "d.bin", "e.bin"]),
            vec![true, false, false, false, false]
        );
        // Output cut short: nothing taken from a half-answered path.
        assert_eq!(
            parse_check_attr(b"a.bin\0filter\0lfs\0a.bin\0te", &["a.bin"]),
            vec![false]
        );
    }
}
