//! Earlier versions of Git LFS files, from the repository's history: for each LFS object a
//! recent commit introduced, the object the same path (or the path it was renamed from) held in
//! the commit's first parent.
//!
//! The agent runs inside the repository and git-lfs tells it only an object's oid and size.
//! An earlier version of the same file shares most of its chunks with the new one, and is
//! often on this machine already (in `.git/lfs/objects`, or checked out): that is what lets
//! an upload deduplicate against it, and a download copy the chunks it already has, where a
//! content-only lookup (the first chunk, a few probes) finds nothing.
//!
//! [`earlier_versions`] walks the most recent [`MAX_COMMITS`] commits reachable from the local
//! branches, the remote-tracking branches and `HEAD` (newest first, so both the commits being
//! pushed and those just fetched are among them), diffs each against its first parent with
//! git's rename detection, and records every path whose blob changed from one LFS pointer to
//! another. Blobs larger than a pointer are never read. Bounded: the commit count, and at most
//! [`MAX_EARLIER`] versions per object.

use std::collections::HashMap;

use git2::{Delta, DiffFindOptions, DiffOptions, Oid, Repository, Sort};

use super::objects::ObjectsError;
use xet_format::pointer::{Pointer, MAX_POINTER_LEN};
use xet_format::LfsOid;

/// Commits looked at, newest first.
pub(crate) const MAX_COMMITS: usize = 400;

/// Earlier versions kept per object (the previous one first).
pub(crate) const MAX_EARLIER: usize = 3;

/// An earlier version of an LFS file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EarlierVersion {
    /// The earlier object.
    pub oid: LfsOid,
    pub size: u64,
    /// The path it had then (`/`-separated; renamed files keep their old path here).
    pub path: String,
}

/// For each LFS object that recent commits introduced, its earlier versions, most recent
/// first: the object the same path held before the commit, then that one's own predecessor,
/// up to [`MAX_EARLIER`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct History {
    previous: HashMap<LfsOid, EarlierVersion>,
}

impl History {
    /// Earlier versions of `oid`, most recent first (none when no recent commit introduced
    /// it as a change of an LFS file).
    pub(crate) fn earlier_versions(&self, oid: &LfsOid) -> Vec<EarlierVersion> {
        let mut out: Vec<EarlierVersion> = Vec::new();
        let mut at = *oid;
        while out.len() < MAX_EARLIER {
            let Some(prev) = self.previous.get(&at) else {
                break;
            };
            if prev.oid == *oid || out.iter().any(|v| v.oid == prev.oid) {
                break;
            }
            at = prev.oid;
            out.push(prev.clone());
        }
        out
    }

    /// The other versions of `oid` the history knows: its earlier versions and the later
    /// ones (objects that replaced it, and their own successors), up to [`MAX_EARLIER`] each
    /// way.
    pub(crate) fn relatives(&self, oid: &LfsOid) -> Vec<LfsOid> {
        let mut out: Vec<LfsOid> = self.earlier_versions(oid).iter().map(|v| v.oid).collect();
        let mut at = *oid;
        for _ in 0..MAX_EARLIER {
            let Some(next) = self
                .previous
                .iter()
                .find(|(later, prev)| prev.oid == at && **later != *oid && !out.contains(later))
                .map(|(later, _)| *later)
            else {
                break;
            };
            out.push(next);
            at = next;
        }
        out
    }

    /// The paths the earlier versions had.
    pub(crate) fn paths(&self) -> impl Iterator<Item = &str> {
        self.previous.values().map(|v| v.path.as_str())
    }

    /// How many objects have an earlier version.
    pub fn len(&self) -> usize {
        self.previous.len()
    }
}

/// Reads the recent history of `repo` (see the module documentation).
pub(crate) fn earlier_versions(repo: &Repository) -> Result<History, ObjectsError> {
    let mut walk = repo.revwalk().map_err(ObjectsError::Open)?;
    walk.set_sorting(Sort::TIME).map_err(ObjectsError::Open)?;
    // Every start that exists; a repository without commits has none.
    let _ = walk.push_head();
    for glob in ["refs/heads/*", "refs/remotes/*"] {
        if let Err(e) = walk.push_glob(glob) {
            tracing::debug!("history walk: cannot start from {glob}: {e}");
        }
    }
    let mut history = History::default();
    for (n, commit) in walk.enumerate() {
        if n >= MAX_COMMITS {
            break;
        }
        let Ok(commit) = commit else { break };
        if let Err(e) = changes_of(repo, commit, &mut history) {
            tracing::debug!(%commit, "history walk: commit skipped: {e}");
        }
    }
    Ok(history)
}

/// Records the LFS files `commit` changed against its first parent.
fn changes_of(repo: &Repository, commit: Oid, history: &mut History) -> Result<(), git2::Error> {
    let commit = repo.find_commit(commit)?;
    let Ok(parent) = commit.parent(0) else {
        return Ok(());
    };
    let (old, new) = (parent.tree()?, commit.tree()?);
    let mut options = DiffOptions::new();
    options.skip_binary_check(true);
    let mut diff = repo.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut options))?;
    // Pointer files of two versions differ in their oid line (and often the size line): a
    // lower threshold than git's 50% pairs a renamed and edited file's pointers.
    let mut find = DiffFindOptions::new();
    find.renames(true).rename_threshold(30);
    diff.find_similar(Some(&mut find))?;
    let odb = repo.odb()?;
    for delta in diff.deltas() {
        if !matches!(delta.status(), Delta::Modified | Delta::Renamed) {
            continue;
        }
        let (from, to) = (delta.old_file(), delta.new_file());
        let (Some(before), Some(after)) =
            (pointer(repo, &odb, from.id()), pointer(repo, &odb, to.id()))
        else {
            continue;
        };
        if before.oid == after.oid {
            continue;
        }
        let path = from
            .path()
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        // Newest first: the most recent change that introduced this object wins.
        history.previous.entry(after.oid).or_insert(EarlierVersion {
            oid: before.oid,
            size: before.size,
            path,
        });
    }
    Ok(())
}

/// The pointer in blob `id`, if it is one. The size comes from the object header first, so a
/// large blob is never read.
pub(super) fn pointer(repo: &Repository, odb: &git2::Odb<'_>, id: Oid) -> Option<Pointer> {
    let (size, kind) = odb.read_header(id).ok()?;
    if kind != git2::ObjectType::Blob || size >= MAX_POINTER_LEN {
        return None;
    }
    let blob = repo.find_blob(id).ok()?;
    Pointer::parse(blob.content()).ok()
}
