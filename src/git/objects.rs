//! Reading a repository's objects in-process with `git2`: the Git LFS pointers of a tree.
//!
//! This is the one place git-xet links libgit2. Objects are read here because listing the LFS
//! files of a tree is one small read per blob, which a `git cat-file` per blob would make slow
//! on large trees, and because objects, unlike configuration, mean the same to every reader.
//! Configuration stays with the `git` program ([`super::Git`]): includes, scopes and `urlmatch`
//! must be exactly what git and git-lfs see.
//!
//! [`lfs_pointers`] walks a tree recursively (subtrees in git's order, entries depth first, as
//! `git ls-tree -r` lists them) and parses every regular-file blob under
//! [`MAX_POINTER_LEN`] bytes as a pointer, strictly ([`Pointer::parse`]); anything else is an
//! ordinary file and skipped. Blob sizes come from the object header, so a large file's content
//! is never read. Symbolic links and submodules are skipped. The same blob under several paths
//! is read once.

use std::collections::HashMap;
use std::path::Path;

use git2::{ErrorCode, ObjectType, Oid, Repository, Tree};

use xet_format::pointer::{Pointer, MAX_POINTER_LEN};

/// A file of a tree whose blob is a Git LFS pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreePointer {
    /// The path from the tree's root, `/`-separated. A name that is not UTF-8 is shown with
    /// replacement characters.
    pub path: String,
    pub pointer: Pointer,
}

/// Why a tree's pointers cannot be listed.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    #[error("cannot open the git repository: {0}")]
    Open(#[source] git2::Error),
    #[error("{rev:?} names no commit or tree in this repository: {source}")]
    Resolve {
        rev: String,
        #[source]
        source: git2::Error,
    },
    #[error("cannot read the git object {oid}: {source}")]
    Read {
        oid: Oid,
        #[source]
        source: git2::Error,
    },
}

/// Opens the repository containing `dir` (the current directory with `None`), honouring
/// `GIT_DIR` and git's other discovery variables as git does.
pub fn open(dir: Option<&Path>) -> Result<Repository, ObjectsError> {
    match dir {
        Some(d) => Repository::discover(d),
        None => Repository::open_from_env(),
    }
    .map_err(ObjectsError::Open)
}

/// The LFS pointers of the tree `rev` names (a commit, a tag, a tree, `HEAD~2`, `main:dir`…).
/// `HEAD` of a repository without commits has none.
pub(crate) fn lfs_pointers(repo: &Repository, rev: &str) -> Result<Vec<TreePointer>, ObjectsError> {
    let tree = match repo.revparse_single(rev).and_then(|o| o.peel_to_tree()) {
        Ok(t) => t,
        Err(e) if rev == "HEAD" && is_unborn(repo) => {
            tracing::debug!("HEAD has no commit yet ({e}): no files");
            return Ok(Vec::new());
        }
        Err(source) => {
            return Err(ObjectsError::Resolve {
                rev: rev.to_string(),
                source,
            })
        }
    };
    let mut walk = Walk {
        repo,
        odb: repo.odb().map_err(ObjectsError::Open)?,
        seen: HashMap::new(),
        out: Vec::new(),
    };
    walk.tree(&tree, "")?;
    Ok(walk.out)
}

/// What a tree entry is ([`tree_entries`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EntryKind {
    Dir,
    /// A regular file: its blob, the blob's size, whether it is executable, and the pointer it
    /// holds if it is a Git LFS pointer.
    File {
        blob: Oid,
        size: u64,
        executable: bool,
        pointer: Option<Pointer>,
    },
    /// A symbolic link; the blob holds its target.
    Symlink {
        blob: Oid,
    },
}

/// One entry of a tree, with its path from the tree's root (`/`-separated, lossy UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeEntry {
    pub path: String,
    pub kind: EntryKind,
}

/// Every entry of the tree `rev` names, recursively, directories before what they hold (git's
/// order within a directory). Submodules are left out. Large blobs are never read: sizes come
/// from object headers.
pub(crate) fn tree_entries(repo: &Repository, rev: &str) -> Result<Vec<TreeEntry>, ObjectsError> {
    let tree = repo
        .revparse_single(rev)
        .and_then(|o| o.peel_to_tree())
        .map_err(|source| ObjectsError::Resolve {
            rev: rev.to_string(),
            source,
        })?;
    let mut walk = Walk {
        repo,
        odb: repo.odb().map_err(ObjectsError::Open)?,
        seen: HashMap::new(),
        out: Vec::new(),
    };
    let mut out = Vec::new();
    walk.entries(&tree, "", &mut out)?;
    Ok(out)
}

/// The bytes of blob `oid`.
pub(crate) fn blob_bytes(repo: &Repository, oid: Oid) -> Result<Vec<u8>, ObjectsError> {
    repo.find_blob(oid)
        .map(|b| b.content().to_vec())
        .map_err(|source| ObjectsError::Read { oid, source })
}

/// Whether `HEAD` points at a branch that has no commit yet.
fn is_unborn(repo: &Repository) -> bool {
    matches!(repo.head(), Err(e) if e.code() == ErrorCode::UnbornBranch)
}

struct Walk<'r> {
    repo: &'r Repository,
    odb: git2::Odb<'r>,
    /// Blobs already looked at: their pointer, if they are one.
    seen: HashMap<Oid, Option<Pointer>>,
    out: Vec<TreePointer>,
}

/// Git's file modes of regular files (plain and executable).
const REGULAR_FILE_MODES: [i32; 2] = [0o100644, 0o100755];

impl Walk<'_> {
    fn tree(&mut self, tree: &Tree<'_>, prefix: &str) -> Result<(), ObjectsError> {
        for entry in tree.iter() {
            let name = String::from_utf8_lossy(entry.name_bytes());
            let path = if prefix.is_empty() {
                name.into_owned()
            } else {
                format!("{prefix}/{name}")
            };
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    let sub =
                        self.repo
                            .find_tree(entry.id())
                            .map_err(|source| ObjectsError::Read {
                                oid: entry.id(),
                                source,
                            })?;
                    self.tree(&sub, &path)?;
                }
                Some(ObjectType::Blob) if REGULAR_FILE_MODES.contains(&entry.filemode()) => {
                    if let Some(pointer) = self.pointer(entry.id())? {
                        self.out.push(TreePointer { path, pointer });
                    }
                }
                // Symbolic links, submodules (commits).
                _ => {}
            }
        }
        Ok(())
    }

    fn entries(
        &mut self,
        tree: &Tree<'_>,
        prefix: &str,
        out: &mut Vec<TreeEntry>,
    ) -> Result<(), ObjectsError> {
        for entry in tree.iter() {
            let name = String::from_utf8_lossy(entry.name_bytes());
            let path = if prefix.is_empty() {
                name.into_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let read = |source| ObjectsError::Read {
                oid: entry.id(),
                source,
            };
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    let sub = self.repo.find_tree(entry.id()).map_err(read)?;
                    out.push(TreeEntry {
                        path: path.clone(),
                        kind: EntryKind::Dir,
                    });
                    self.entries(&sub, &path, out)?;
                }
                Some(ObjectType::Blob) if entry.filemode() == 0o120000 => out.push(TreeEntry {
                    path,
                    kind: EntryKind::Symlink { blob: entry.id() },
                }),
                Some(ObjectType::Blob) => {
                    let (size, _) = self.odb.read_header(entry.id()).map_err(read)?;
                    let pointer = self.pointer(entry.id())?;
                    out.push(TreeEntry {
                        path,
                        kind: EntryKind::File {
                            blob: entry.id(),
                            size: size as u64,
                            executable: entry.filemode() == 0o100755,
                            pointer,
                        },
                    });
                }
                // Submodules (commits).
                _ => {}
            }
        }
        Ok(())
    }

    /// The pointer blob `oid` holds, if it is one.
    fn pointer(&mut self, oid: Oid) -> Result<Option<Pointer>, ObjectsError> {
        if let Some(known) = self.seen.get(&oid) {
            return Ok(known.clone());
        }
        let read = |source| ObjectsError::Read { oid, source };
        let (size, _) = self.odb.read_header(oid).map_err(read)?;
        let pointer = if size == 0 || size >= MAX_POINTER_LEN {
            None
        } else {
            let blob = self.repo.find_blob(oid).map_err(read)?;
            Pointer::parse(blob.content()).ok()
        };
        self.seen.insert(oid, pointer.clone());
        Ok(pointer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::Git;
    use xet_format::LfsOid;

    fn commit_all(git: &Git) {
        git.run(&["add", "-A"]).unwrap();
        git.run(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.org",
            "commit",
            "-q",
            "-m",
            "c",
        ])
        .unwrap();
    }

    #[test]
    fn pointers_of_a_tree_in_git_order_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let git = Git::in_dir(dir.path());
        git.run(&["init", "-q"]).unwrap();
        let repo = open(Some(dir.path())).unwrap();
        assert!(
            lfs_pointers(&repo, "HEAD").unwrap().is_empty(),
            "unborn HEAD"
        );

        let a = Pointer::new(LfsOid::from_hex(&"ab".repeat(32)).unwrap(), 5);
        let b = Pointer::new(LfsOid::from_hex(&"cd".repeat(32)).unwrap(), 1 << 40);
        std::fs::create_dir_all(dir.path().join("d/e")).unwrap();
        std::fs::write(dir.path().join("z.bin"), a.encode()).unwrap();
        std::fs::write(dir.path().join("d/e/b.bin"), b.encode()).unwrap();
        std::fs::write(dir.path().join("d/copy.bin"), a.encode()).unwrap();
        std::fs::write(dir.path().join("plain.txt"), "not a pointer\n").unwrap();
        std::fs::write(dir.path().join("empty"), "").unwrap();
        // A pointer followed by more text is not one (parsing is strict).
        std::fs::write(dir.path().join("almost"), a.encode() + "x").unwrap();
        std::fs::write(dir.path().join("big"), vec![b'v'; 5000]).unwrap();
        commit_all(&git);

        let found = lfs_pointers(&repo, "HEAD").unwrap();
        let paths: Vec<&str> = found.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, ["d/copy.bin", "d/e/b.bin", "z.bin"]);
        assert_eq!(found[0].pointer, a);
        assert_eq!(found[1].pointer, b);
        assert_eq!(found[2].pointer, a);

        // An older commit, a subtree, and a name that is nothing.
        std::fs::remove_file(dir.path().join("z.bin")).unwrap();
        commit_all(&git);
        assert_eq!(lfs_pointers(&repo, "HEAD").unwrap().len(), 2);
        assert_eq!(lfs_pointers(&repo, "HEAD~1").unwrap().len(), 3);
        let sub = lfs_pointers(&repo, "HEAD:d").unwrap();
        assert_eq!(sub[1].path, "e/b.bin");
        let err = lfs_pointers(&repo, "no-such-branch").unwrap_err();
        assert!(err.to_string().contains("no-such-branch"), "{err}");
    }
}
