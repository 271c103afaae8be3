//! The tree of a repository at a ref, and the bytes of each of its files, read on demand.
//!
//! Ordinary files come from git's objects (read whole when first read; they are small by the
//! nature of LFS repositories). A Git LFS file is read from its object in the local LFS store
//! when that is there, else in ranges from the remote ([`xet_client::pipeline::ranged`]), every
//! chunk checked. Where each LFS object is, is asked of the remote the first time a file is
//! opened, for every LFS file of its directory at once (one batch request for many files).
//!
//! The tree is what `git checkout` would write ([`crate::git::checkout`]): an entry git refuses
//! (`.git` in any spelling a filesystem reads as it, `..`, …) is not in the view, nor is
//! anything under it, and a lookup of one finds nothing. Each is logged once, when the view is
//! made. Names are the tree's bytes, as a checkout writes them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::agent::error::TransferError;
use crate::agent::reader::{EndpointHandle, ObjectLocation, ObjectReader};
use crate::git::checkout;
use crate::git::objects::{self, EntryKind, LeftOut, ObjectsError};
use xet_client::pipeline::ranged::{RangedError, RangedFile};
use xet_format::pointer::Pointer;
use xet_format::LfsOid;
use xet_protocol::util::sync::LockAnyway as _;

/// Why a view cannot be made, or a file read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ViewError {
    #[error("{0}")]
    Git(#[from] ObjectsError),
    #[error("{0}")]
    Remote(#[from] TransferError),
    #[error("{0}")]
    Ranged(#[from] Box<RangedError>),
    #[error("{path}: {source}")]
    Local {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} (LFS object {oid}) is neither in the local LFS store nor on the remote ({remote})"
    )]
    Missing {
        path: String,
        oid: LfsOid,
        remote: String,
    },
    #[error("{path} cannot be read from the remote ({remote}): {message}")]
    Refused {
        path: String,
        remote: String,
        message: String,
    },
}

impl From<RangedError> for ViewError {
    fn from(e: RangedError) -> Self {
        Self::Ranged(Box::new(e))
    }
}

/// One node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir {
        /// Entry names (the tree's bytes) and their node ids, in git's order.
        children: Vec<(Vec<u8>, usize)>,
    },
    File {
        path: String,
        /// The node id of its directory.
        dir: usize,
        size: u64,
        executable: bool,
        content: Content,
    },
    Symlink {
        target: Vec<u8>,
    },
}

/// Where a file's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Blob(git2::Oid),
    Lfs(Pointer),
}

/// An opened file's bytes.
pub(crate) enum Opened {
    Bytes(Arc<Vec<u8>>),
    Local(std::fs::File),
    Ranged {
        file: Arc<RangedFile>,
        endpoint: EndpointHandle,
    },
}

impl Opened {
    /// Up to `len` bytes from `offset` (fewer at the end).
    pub fn read(&self, offset: u64, len: u64) -> Result<Bytes, ViewError> {
        match self {
            Opened::Bytes(b) => {
                let start = offset.min(b.len() as u64) as usize;
                let end = offset.saturating_add(len).min(b.len() as u64) as usize;
                Ok(Bytes::copy_from_slice(&b[start..end]))
            }
            Opened::Local(f) => read_local(f, offset, len).map(Bytes::from),
            Opened::Ranged { file, endpoint } => Ok(file.read(endpoint.get(), offset, len)?),
        }
    }
}

#[cfg(unix)]
fn read_local(f: &std::fs::File, offset: u64, len: u64) -> Result<Vec<u8>, ViewError> {
    use std::os::unix::fs::FileExt as _;
    let size = f
        .metadata()
        .map_err(|source| ViewError::Local {
            path: PathBuf::from("(local LFS object)"),
            source,
        })?
        .len();
    let end = offset.saturating_add(len).min(size);
    if offset >= end {
        return Ok(Vec::new());
    }
    let mut buf = vec![0u8; (end - offset) as usize];
    f.read_exact_at(&mut buf, offset)
        .map_err(|source| ViewError::Local {
            path: PathBuf::from("(local LFS object)"),
            source,
        })?;
    Ok(buf)
}

#[cfg(not(unix))]
fn read_local(_f: &std::fs::File, _offset: u64, _len: u64) -> Result<Vec<u8>, ViewError> {
    Err(ViewError::Local {
        path: PathBuf::from("(local LFS object)"),
        source: std::io::Error::other("positional reads are not supported here"),
    })
}

/// The tree of a repository at one ref (see the module documentation).
pub(crate) struct View {
    repo: Mutex<git2::Repository>,
    /// Node 0 is the root.
    pub nodes: Vec<Node>,
    /// Where LFS objects are read from; `None` for a tree without LFS files whose remote has
    /// no LFS URL (no remote at all, say): its files are all in git.
    reader: Option<ObjectReader>,
    /// Opened LFS objects, shared by every open of the same object.
    ranged: Mutex<HashMap<LfsOid, Arc<RangedFile>>>,
    /// The entries git would not check out, left out of `nodes`.
    left_out: Vec<LeftOut>,
}

/// Entries left out that are logged one by one when a view is made; the rest are counted.
const LOGGED_LEFT_OUT: usize = 20;

impl View {
    /// The tree `rev` names in the repository `git` is in, with objects from `remote`.
    pub fn open(git: &crate::git::Git, rev: &str, remote: Option<&str>) -> Result<Self, ViewError> {
        let repo = objects::open(git.dir())?;
        let tree = objects::tree_entries(&repo, rev)?;
        for left in tree.left_out.iter().take(LOGGED_LEFT_OUT) {
            tracing::warn!(
                "{:?} at {rev} is left out: git does not check it out ({})",
                left.path,
                left.refusal
            );
        }
        if let Some(more) = tree.left_out.len().checked_sub(LOGGED_LEFT_OUT) {
            if more > 0 {
                tracing::warn!("{more} more entries at {rev} are left out for the same reasons");
            }
        }
        // Node 0 is the root, node `i + 1` entry `i`.
        let mut nodes = vec![Node::Dir {
            children: Vec::new(),
        }];
        for entry in tree.entries {
            let id = nodes.len();
            let dir = entry.parent.map_or(0, |p| p + 1);
            let node = match entry.kind {
                EntryKind::Dir => Node::Dir {
                    children: Vec::new(),
                },
                EntryKind::File {
                    blob,
                    size,
                    executable,
                    pointer,
                } => match pointer {
                    Some(p) => Node::File {
                        path: entry.path,
                        dir,
                        size: p.size,
                        executable,
                        content: Content::Lfs(p),
                    },
                    None => Node::File {
                        path: entry.path,
                        dir,
                        size,
                        executable,
                        content: Content::Blob(blob),
                    },
                },
                EntryKind::Symlink { blob } => Node::Symlink {
                    target: objects::blob_bytes(&repo, blob)?,
                },
            };
            nodes.push(node);
            if let Some(Node::Dir { children }) = nodes.get_mut(dir) {
                children.push((entry.name, id));
            }
        }
        let has_lfs = nodes.iter().any(|n| {
            matches!(
                n,
                Node::File {
                    content: Content::Lfs(_),
                    ..
                }
            )
        });
        let reader = match ObjectReader::open(git, remote) {
            Ok(r) => Some(r),
            Err(e) if !has_lfs => {
                tracing::debug!("no LFS files, and no remote to read them from: {e}");
                None
            }
            Err(e) => return Err(e.into()),
        };
        Ok(Self {
            repo: Mutex::new(repo),
            nodes,
            reader,
            ranged: Mutex::new(HashMap::new()),
            left_out: tree.left_out,
        })
    }

    /// The node at `path` (`/`-separated, from the root; empty: the root). A path git would
    /// not check out names nothing ([`checkout::check_path`]).
    pub fn lookup(&self, path: &str) -> Option<usize> {
        if checkout::check_path(path).is_err() {
            return None;
        }
        let mut at = 0usize;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at = self.child(at, part.as_bytes())?;
        }
        Some(at)
    }

    /// The node named `name` in directory node `dir`.
    pub fn child(&self, dir: usize, name: &[u8]) -> Option<usize> {
        let Some(Node::Dir { children }) = self.nodes.get(dir) else {
            return None;
        };
        children.iter().find(|(n, _)| n == name).map(|(_, id)| *id)
    }

    /// The entry left out of the view at `path` or above it, if any.
    pub(crate) fn left_out(&self, path: &str) -> Option<&LeftOut> {
        let path = path.trim_matches('/');
        self.left_out.iter().find(|l| {
            path.strip_prefix(l.path.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }

    /// Opens file node `id` for reading.
    pub(crate) fn open_file(&self, id: usize) -> Result<Opened, ViewError> {
        let Some(Node::File {
            path, dir, content, ..
        }) = self.nodes.get(id)
        else {
            return Err(ViewError::Local {
                path: PathBuf::from(format!("node {id}")),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            });
        };
        match content {
            Content::Blob(oid) => {
                let repo = self.repo.lock_anyway();
                Ok(Opened::Bytes(Arc::new(objects::blob_bytes(&repo, *oid)?)))
            }
            Content::Lfs(pointer) => self.open_lfs(path, *dir, pointer),
        }
    }

    fn open_lfs(&self, path: &str, dir: usize, pointer: &Pointer) -> Result<Opened, ViewError> {
        // A view of LFS files always has a reader (see `reader`).
        let Some(reader) = &self.reader else {
            return Err(ViewError::Remote(TransferError::Setup(format!(
                "{path} is an LFS file and the remote has no Git LFS URL"
            ))));
        };
        if let Some(local) = reader.local_copy(&pointer.oid, pointer.size) {
            let f = std::fs::File::open(&local).map_err(|source| ViewError::Local {
                path: local.clone(),
                source,
            })?;
            return Ok(Opened::Local(f));
        }
        let located = reader.locate(&self.lfs_near(dir, pointer))?;
        match located.get(&pointer.oid) {
            Some(ObjectLocation::Local(local)) => {
                let f = std::fs::File::open(local).map_err(|source| ViewError::Local {
                    path: local.clone(),
                    source,
                })?;
                Ok(Opened::Local(f))
            }
            Some(ObjectLocation::Remote { file, endpoint }) => {
                let known = self.ranged.lock_anyway().get(&pointer.oid).cloned();
                let ranged = match known {
                    Some(r) => r,
                    None => {
                        let r = Arc::new(RangedFile::open(endpoint.get(), *file, pointer.size)?);
                        self.ranged
                            .lock_anyway()
                            .insert(pointer.oid, Arc::clone(&r));
                        r
                    }
                };
                Ok(Opened::Ranged {
                    file: ranged,
                    endpoint: endpoint.clone(),
                })
            }
            Some(ObjectLocation::Refused(message)) => Err(ViewError::Refused {
                path: path.to_string(),
                remote: reader.describe(),
                message: message.clone(),
            }),
            None => Err(ViewError::Missing {
                path: path.to_string(),
                oid: pointer.oid,
                remote: reader.describe(),
            }),
        }
    }

    /// The LFS objects of directory node `dir` (at most 100), `pointer`'s first: located
    /// together, in one request.
    fn lfs_near(&self, dir: usize, pointer: &Pointer) -> Vec<(LfsOid, u64)> {
        let mut out = vec![(pointer.oid, pointer.size)];
        if let Some(Node::Dir { children }) = self.nodes.get(dir) {
            for (_, id) in children {
                if out.len() >= 100 {
                    break;
                }
                if let Some(Node::File {
                    content: Content::Lfs(p),
                    ..
                }) = self.nodes.get(*id)
                {
                    if !out.iter().any(|(o, _)| *o == p.oid) {
                        out.push((p.oid, p.size));
                    }
                }
            }
        }
        out
    }
}
