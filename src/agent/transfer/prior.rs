//! The earlier versions of an object, for the agent: found in the repository's recent history
//! ([`crate::git::history`]) and matched against the endpoint ([`PriorVersion`]). Uploads
//! deduplicate against them, downloads copy their chunks.
//!
//! Where a version's chunks are learnt: from a copy on this machine, the object in
//! `<LFS storage>/objects` (what a clone or an earlier pull downloaded, or what this user
//! pushed), and for downloads also the file in the work tree at the path the earlier version
//! had (checked out before this pull). For an upload, a version with no usable copy here (a
//! clone made with `GIT_LFS_SKIP_SMUDGE=1`, as CI runners and training machines make them) is
//! learnt from the endpoint's chunk list of it instead (docs/cas-api.md §5.8), which the
//! endpoint gives only to a credential that may read that file, checked against the file's
//! hash; at most [`MAX_LISTED_SEEDS`] listed chunks per upload. An endpoint without chunk lists
//! (Hugging Face's) gives none, and the upload goes on without. A download gains nothing from
//! a list (it copies bytes, which only a local copy has).
//!
//! A version whose chunk list this machine remembers (`.git/xet/chunk-lists`, see
//! [`ChunkLists`]) is taken from it instead of being chunked again, once the endpoint's record
//! of the oid is the list's file; a list computed here is remembered for the next time.
//!
//! An upload whose shard the endpoint refused for a lost xorb looks for its earlier versions
//! again, without those using a xorb the refusal names ([`named_xorbs`]).
//!
//! The history is read once per agent process, on the first object of at least
//! [`MIN_PRIOR_SIZE`] bytes; objects without an earlier version cost no request. The same
//! history tells a download whether another version of its object may be wanted later
//! ([`Earlier::others_missing`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::git::history::{earlier_versions, EarlierVersion, History};
use xet_client::object_chunks::{object_path, ChunkLists};
use xet_client::pipeline::prior::PriorVersion;
use xet_format::{LfsOid, XorbHash};
use xet_protocol::Endpoint;

/// Smaller objects are transferred without looking for earlier versions: they would save
/// little, and the history walk is not free.
pub(crate) const MIN_PRIOR_SIZE: u64 = 1 << 20;

/// Chunks an upload learns from the endpoint's chunk lists, over all the earlier versions it
/// lists: as many as one list may have (files of about 64 GiB). Each costs about 150 bytes of
/// memory while the upload runs.
pub(crate) const MAX_LISTED_SEEDS: usize = xet_protocol::wire::MAX_LISTED_CHUNKS;

/// Where an upload or a download looks for earlier versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// `<LFS storage>/objects`, then the endpoint's chunk list (uploads).
    Upload,
    /// `<LFS storage>/objects` and the work tree (downloads).
    Download,
}

/// What this machine keeps of the repository's objects.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Here<'a> {
    /// `<LFS storage>/objects`.
    pub objects: Option<&'a Path>,
    /// The remembered chunk lists of the objects.
    pub lists: Option<&'a ChunkLists>,
}

/// The history of the repository the agent runs in, read at first use.
#[derive(Default)]
pub(super) struct Earlier {
    /// The directory of the repository (the current one with `None`).
    dir: Option<PathBuf>,
    /// `None` until read; then what was read, or nothing when the repository could not be
    /// read.
    read: Option<Option<Read>>,
}

/// What [`Earlier`] reads of the repository, once.
struct Read {
    history: History,
    /// The work tree (none for a bare repository).
    tree: Option<PathBuf>,
    /// The objects that the files at the earlier versions' paths hold, where git's index
    /// vouches for them ([`crate::git::worktree::checked_out_objects`]): such a file is not
    /// hashed to find out whether it is another version.
    checked_out: HashMap<String, LfsOid>,
}

impl Earlier {
    /// The history of the repository at `dir` (the current directory with `None`).
    pub(super) fn in_dir(dir: Option<&Path>) -> Self {
        Self {
            dir: dir.map(Path::to_path_buf),
            read: None,
        }
    }

    fn history(&mut self) -> Option<&Read> {
        self.read
            .get_or_insert_with(|| {
                let started = std::time::Instant::now();
                let repo = match crate::git::objects::open(self.dir.as_deref()) {
                    Ok(repo) => repo,
                    Err(e) => {
                        tracing::debug!("no history to look for earlier versions in: {e}");
                        return None;
                    }
                };
                match earlier_versions(&repo) {
                    Ok(history) => {
                        tracing::debug!(
                            objects = history.len(),
                            millis = started.elapsed().as_millis() as u64,
                            "read the recent history for earlier versions"
                        );
                        let checked_out =
                            crate::git::worktree::checked_out_objects(&repo, history.paths());
                        Some(Read {
                            history,
                            tree: repo.workdir().map(Path::to_path_buf),
                            checked_out,
                        })
                    }
                    Err(e) => {
                        tracing::debug!("cannot read the history: {e}");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Whether another version of object `oid` that the recent history knows is not in
    /// `objects` (`<LFS storage>/objects`): one this fetch (`git lfs fetch --all`) or a later
    /// one may download, which the download chunk cache would serve. True when the history
    /// cannot tell (cannot be read, or no objects directory).
    pub(crate) fn others_missing(&mut self, oid: &LfsOid, objects: Option<&Path>) -> bool {
        let (Some(read), Some(objects)) = (self.history(), objects) else {
            return true;
        };
        read.history
            .relatives(oid)
            .iter()
            .any(|other| !object_path(objects, other).is_file())
    }

    /// The earlier versions of object `oid` (`size` bytes) that match the endpoint's record,
    /// most recent first: each from a copy on this machine if one matches, else (uploads) from
    /// the endpoint's chunk list (see the module documentation), or from a chunk list
    /// remembered in `here`. Versions using a xorb in `lost` (one the endpoint just said it
    /// no longer holds intact) are left out. Never fails: what cannot be used is skipped.
    pub(crate) fn versions(
        &mut self,
        endpoint: &dyn Endpoint,
        oid: &LfsOid,
        size: u64,
        here: Here<'_>,
        look: Look,
        lost: &[XorbHash],
    ) -> Vec<PriorVersion> {
        let Here { objects, lists } = here;
        if size < MIN_PRIOR_SIZE {
            return Vec::new();
        }
        let Some(Read {
            history,
            tree,
            checked_out,
        }) = self.history()
        else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut listable = MAX_LISTED_SEEDS;
        for earlier in history.earlier_versions(oid) {
            let mut candidates: Vec<PathBuf> = Vec::new();
            let object = objects.map(|o| object_path(o, &earlier.oid));
            let version = remembered(endpoint, &earlier, object.as_deref(), lists, look);
            if let Some(object) = object.filter(|_| version.is_none()) {
                candidates.push(object);
            }
            if let (Look::Download, Some(tree)) = (look, tree) {
                let held = checked_out.get(&earlier.path);
                if held.is_some_and(|held| *held != earlier.oid) {
                    // A checked-out file of another version (read, it would only be found
                    // to differ).
                    tracing::debug!(earlier = %earlier.oid, path = %earlier.path,
                        "the work tree holds another version of the file");
                } else if !earlier.path.is_empty() && !earlier.path.split('/').any(|p| p == "..") {
                    candidates.push(tree.join(&earlier.path));
                }
            }
            let mut version = version;
            for path in candidates.into_iter().filter(|_| version.is_none()) {
                match PriorVersion::index(endpoint, &earlier.oid, earlier.size, &path) {
                    Ok(Some(v)) => {
                        tracing::info!(%oid, earlier = %earlier.oid, path = %path.display(),
                            chunks = v.chunks.len(), "using an earlier version on this machine");
                        remember(lists, &v, earlier.size);
                        version = Some(v);
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(earlier = %earlier.oid, "earlier version not used: {e}")
                    }
                }
            }
            if version.is_none() && look == Look::Upload {
                match PriorVersion::listed(endpoint, &earlier.oid, earlier.size, listable) {
                    Ok(Some(v)) => {
                        tracing::info!(%oid, earlier = %earlier.oid, chunks = v.chunks.len(),
                            "using an earlier version stored on the server (its chunk list)");
                        listable -= v.chunks.len();
                        remember(lists, &v, earlier.size);
                        version = Some(v);
                    }
                    Ok(None) => {
                        tracing::debug!(earlier = %earlier.oid, "no chunk list of the earlier version")
                    }
                    Err(e) => {
                        tracing::debug!(earlier = %earlier.oid, "earlier version not used: {e}")
                    }
                }
            }
            match version {
                Some(v) if lost.iter().any(|x| v.uses_xorb(x)) => {
                    tracing::info!(earlier = %earlier.oid, "an earlier version relies on a xorb the server lost; not used");
                }
                Some(v) => found.push(v),
                None => {}
            }
        }
        found
    }
}

/// The earlier version `earlier` from its chunk list remembered on this machine, if one is
/// kept and the endpoint's record of the object is that list's file: no copy is hashed. A
/// download needs the bytes too, so it uses a list only when `object` (the object in
/// git-lfs's store) is here; an upload needs only the chunks.
fn remembered(
    endpoint: &dyn Endpoint,
    earlier: &EarlierVersion,
    object: Option<&Path>,
    lists: Option<&ChunkLists>,
    look: Look,
) -> Option<PriorVersion> {
    let lists = lists?;
    let here = object.filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() == earlier.size));
    if look == Look::Download && here.is_none() {
        return None;
    }
    let list = match lists.get(&earlier.oid, earlier.size) {
        Ok(list) => list?,
        Err(e) => {
            tracing::info!("{e}; computing it again");
            return None;
        }
    };
    match PriorVersion::remembered(
        endpoint,
        &earlier.oid,
        earlier.size,
        &list,
        here.map(Path::to_path_buf),
    ) {
        Ok(Some(v)) => {
            tracing::info!(earlier = %earlier.oid, chunks = v.chunks.len(),
                "using an earlier version's remembered chunk list");
            Some(v)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(earlier = %earlier.oid, "earlier version not used: {e}");
            None
        }
    }
}

/// Remembers the chunks of `version` (`size` bytes) in `lists`, for the next time.
fn remember(lists: Option<&ChunkLists>, version: &PriorVersion, size: u64) {
    if let Some(lists) = lists {
        if let Err(e) = lists.put(&version.oid, size, &version.file, &version.chunk_refs()) {
            tracing::debug!("{e}");
        }
    }
}

/// The xorbs a refusal names (every run of 64 hex digits in its text, as the server names the
/// xorb it lost; other hashes among them match no xorb and do no harm).
pub(crate) fn named_xorbs(refusal: &str) -> Vec<XorbHash> {
    let mut out = Vec::new();
    let bytes = refusal.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        let run = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        if run == 64 {
            if let Some(hash) = refusal
                .get(start..start + 64)
                .and_then(|h| XorbHash::from_hex(h).ok())
            {
                out.push(hash);
            }
        }
        start += run.max(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_xorbs_are_the_64_digit_hex_runs() {
        let a = "ab".repeat(32);
        let b = "0F".repeat(32);
        let text = format!(
            "shard refused (xorb_damaged): xorb {a} of file {b}, is damaged; {}x {} end",
            "1".repeat(65),
            "2".repeat(63)
        );
        assert_eq!(
            named_xorbs(&text),
            vec![
                XorbHash::from_hex(&a).unwrap(),
                XorbHash::from_hex(&b).unwrap()
            ]
        );
        assert!(named_xorbs("").is_empty());
        assert!(named_xorbs("no hashes here").is_empty());
        assert_eq!(named_xorbs(&a).len(), 1, "a run at the very end counts");
    }
}
