//! The earlier versions of an object that are on this machine, for the agent: found in the
//! repository's recent history ([`crate::git::history`]) and matched against the endpoint
//! ([`PriorVersion`]). Uploads deduplicate against them, downloads copy their chunks.
//!
//! Where a copy is looked for: the object in `<LFS storage>/objects` (what a clone or an
//! earlier pull downloaded, or what this user pushed), and for downloads also the file in the
//! work tree at the path the earlier version had (checked out before this pull). The history
//! is read once per agent process, on the first object of at least [`MIN_PRIOR_SIZE`] bytes;
//! objects without an earlier version cost no request. The same history tells a download
//! whether another version of its object may be wanted later ([`Earlier::others_missing`]).

use std::path::{Path, PathBuf};

use crate::git::history::{earlier_versions, History};
use xet_client::pipeline::prior::PriorVersion;
use xet_client::Endpoint;
use xet_format::LfsOid;

/// Smaller objects are transferred without looking for earlier versions: they would save
/// little, and the history walk is not free.
pub(crate) const MIN_PRIOR_SIZE: u64 = 1 << 20;

/// The history of the repository the agent runs in, read at first use.
#[derive(Default)]
pub(super) struct Earlier {
    /// `None` until read; then the history and the work tree (none for a bare repository), or
    /// nothing when the repository could not be read.
    read: Option<Option<(History, Option<PathBuf>)>>,
}

impl Earlier {
    fn history(&mut self) -> Option<&(History, Option<PathBuf>)> {
        self.read
            .get_or_insert_with(|| {
                let started = std::time::Instant::now();
                let repo = match crate::git::objects::open(None) {
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
                        Some((history, repo.workdir().map(Path::to_path_buf)))
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
        let (Some((history, _)), Some(objects)) = (self.history(), objects) else {
            return true;
        };
        history.relatives(oid).iter().any(|other| {
            let hex = other.to_hex();
            !objects
                .join(&hex[..2])
                .join(&hex[2..4])
                .join(&hex)
                .is_file()
        })
    }

    /// The earlier versions of object `oid` (`size` bytes) that are on this machine and match
    /// the endpoint's record, most recent first. `objects` is `<LFS storage>/objects`;
    /// `work_tree`: also look at the work tree's file (downloads). Never fails: what cannot be
    /// used is skipped.
    pub(crate) fn on_this_machine(
        &mut self,
        endpoint: &dyn Endpoint,
        oid: &LfsOid,
        size: u64,
        objects: Option<&Path>,
        work_tree: bool,
    ) -> Vec<PriorVersion> {
        if size < MIN_PRIOR_SIZE {
            return Vec::new();
        }
        let Some((history, tree)) = self.history() else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for earlier in history.earlier_versions(oid) {
            let hex = earlier.oid.to_hex();
            let mut candidates: Vec<PathBuf> = Vec::new();
            if let Some(objects) = objects {
                candidates.push(objects.join(&hex[..2]).join(&hex[2..4]).join(&hex));
            }
            if let (true, Some(tree)) = (work_tree, tree) {
                if !earlier.path.is_empty() && !earlier.path.split('/').any(|p| p == "..") {
                    candidates.push(tree.join(&earlier.path));
                }
            }
            for path in candidates {
                match PriorVersion::index(endpoint, &earlier.oid, earlier.size, &path) {
                    Ok(Some(version)) => {
                        tracing::info!(%oid, earlier = %earlier.oid, path = %path.display(),
                            chunks = version.chunks.len(), "using an earlier version on this machine");
                        found.push(version);
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(earlier = %earlier.oid, "earlier version not used: {e}")
                    }
                }
            }
        }
        found
    }
}
