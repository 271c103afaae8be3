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
//! is read once. [`pointers_among`] does the same for a list of objects (a push's, as `git
//! rev-list --objects` names them).
//!
//! [`tree_entries`] walks a tree the same way for `git xet mount` and `git xet cat`, and keeps
//! only what `git checkout` would write ([`super::checkout`]): an entry git refuses (`.git`,
//! `..`, …) is left out with everything under it, and listed as such.

use std::collections::HashMap;
use std::path::Path;

use git2::{ErrorCode, ObjectType, Oid, Repository, Tree};

use super::checkout::{self, Refusal};
use xet_format::pointer::{Pointer, MAX_POINTER_LEN};

/// A file of a tree whose blob is a Git LFS pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreePointer {
    /// The path from the tree's root, `/`-separated. A name that is not UTF-8 is shown with
    /// replacement characters.
    pub path: String,
    pub pointer: Pointer,
}

/// Why a tree's pointers cannot be listed. Messages say what git would say: libgit2's own
/// words (its error classes and codes, which its `Display` appends) are left out, so its error
/// is kept beside the message, not as the error's source (which error chains print).
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    #[error("cannot open the git repository: {}", open_said(.0))]
    Open(git2::Error),
    #[error(
        "{rev:?} names no commit or tree in this repository{}",
        reason(libgit2)
    )]
    Resolve { rev: String, libgit2: git2::Error },
    #[error("cannot read the git object {oid}: {}", said(libgit2))]
    Read { oid: Oid, libgit2: git2::Error },
}

/// A libgit2 error's message without its class and code (which its `Display` appends).
pub(crate) fn said(e: &git2::Error) -> &str {
    e.message().trim_end_matches('.')
}

/// Why a repository did not open, as git says it: one owned by someone else is named with
/// the setting that trusts it (libgit2 reads `safe.directory` from the global and system
/// configuration, not from `git -c`).
fn open_said(e: &git2::Error) -> String {
    if e.code() == ErrorCode::Owner {
        return format!(
            "{}. git refuses repositories owned by someone else; if you trust it, mark it safe \
             with `git config --global --add safe.directory <its path>`",
            said(e)
        );
    }
    said(e).to_string()
}

/// Why a revision did not resolve, after a colon; nothing when it simply does not exist.
fn reason(e: &git2::Error) -> String {
    match e.code() {
        ErrorCode::NotFound | ErrorCode::InvalidSpec => String::new(),
        ErrorCode::Ambiguous => " (it is ambiguous: give more of it)".to_string(),
        _ => format!(": {}", said(e)),
    }
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
        Err(libgit2) => {
            return Err(ObjectsError::Resolve {
                rev: rev.to_string(),
                libgit2,
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

/// The Git LFS pointers among the objects `oids` (any kind; only blobs under
/// [`MAX_POINTER_LEN`] bytes are read), each pointer once, in the order first met. An object
/// that cannot be read is skipped.
pub(crate) fn pointers_among(
    repo: &Repository,
    oids: &[Oid],
) -> Result<Vec<Pointer>, ObjectsError> {
    let odb = repo.odb().map_err(ObjectsError::Open)?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for &oid in oids {
        let Ok((size, kind)) = odb.read_header(oid) else {
            continue;
        };
        if kind != ObjectType::Blob || size == 0 || size >= MAX_POINTER_LEN {
            continue;
        }
        let Ok(blob) = repo.find_blob(oid) else {
            continue;
        };
        if let Ok(p) = Pointer::parse(blob.content()) {
            if seen.insert(p.oid) {
                out.push(p);
            }
        }
    }
    Ok(out)
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

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeEntry {
    /// The path from the tree's root, `/`-separated, for messages: a name that is not UTF-8 is
    /// shown with replacement characters.
    pub path: String,
    /// The entry's own name, as the tree holds it.
    pub name: Vec<u8>,
    /// The index (in [`CheckoutTree::entries`]) of the directory holding it; `None`: the root.
    pub parent: Option<usize>,
    pub kind: EntryKind,
}

/// An entry `git checkout` would not write, left out of a [`CheckoutTree`] with everything
/// under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeftOut {
    /// As [`TreeEntry::path`].
    pub path: String,
    pub refusal: Refusal,
}

/// A tree as `git checkout` would write it ([`tree_entries`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CheckoutTree {
    /// Directories before what they hold, git's order within a directory.
    pub entries: Vec<TreeEntry>,
    /// What git refuses to write, in the same order.
    pub left_out: Vec<LeftOut>,
}

/// Every entry of the tree `rev` names that `git checkout` would write, recursively, and what
/// it would not ([`checkout::check`]). Submodules are left out (unlisted). Large blobs are
/// never read: sizes come from object headers.
pub(crate) fn tree_entries(repo: &Repository, rev: &str) -> Result<CheckoutTree, ObjectsError> {
    let tree = repo
        .revparse_single(rev)
        .and_then(|o| o.peel_to_tree())
        .map_err(|libgit2| ObjectsError::Resolve {
            rev: rev.to_string(),
            libgit2,
        })?;
    let mut walk = Walk {
        repo,
        odb: repo.odb().map_err(ObjectsError::Open)?,
        seen: HashMap::new(),
        out: Vec::new(),
    };
    let mut out = CheckoutTree::default();
    walk.entries(&tree, None, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// The bytes of blob `oid`.
pub(crate) fn blob_bytes(repo: &Repository, oid: Oid) -> Result<Vec<u8>, ObjectsError> {
    repo.find_blob(oid)
        .map(|b| b.content().to_vec())
        .map_err(|libgit2| ObjectsError::Read { oid, libgit2 })
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
                            .map_err(|libgit2| ObjectsError::Read {
                                oid: entry.id(),
                                libgit2,
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

    /// The entries of `tree`, the directory at index `parent` of `out` (`None`: the root),
    /// whose names from the root are `dirs`.
    fn entries(
        &mut self,
        tree: &Tree<'_>,
        parent: Option<usize>,
        dirs: &mut Vec<Vec<u8>>,
        out: &mut CheckoutTree,
    ) -> Result<(), ObjectsError> {
        for entry in tree.iter() {
            let name = entry.name_bytes();
            let path = match parent.and_then(|p| out.entries.get(p)) {
                Some(dir) => format!("{}/{}", dir.path, String::from_utf8_lossy(name)),
                None => String::from_utf8_lossy(name).into_owned(),
            };
            let read = |libgit2| ObjectsError::Read {
                oid: entry.id(),
                libgit2,
            };
            let link = match entry.kind() {
                Some(ObjectType::Tree) => false,
                Some(ObjectType::Blob) => entry.filemode() == 0o120000,
                // Submodules (commits).
                _ => continue,
            };
            let names: Vec<&[u8]> = dirs
                .iter()
                .map(Vec::as_slice)
                .chain(std::iter::once(name))
                .collect();
            if let Err(refusal) = checkout::check(&names, link) {
                out.left_out.push(LeftOut { path, refusal });
                continue;
            }
            let kind = match entry.kind() {
                Some(ObjectType::Tree) => EntryKind::Dir,
                _ if link => EntryKind::Symlink { blob: entry.id() },
                _ => {
                    let (size, _) = self.odb.read_header(entry.id()).map_err(read)?;
                    EntryKind::File {
                        blob: entry.id(),
                        size: size as u64,
                        executable: entry.filemode() == 0o100755,
                        pointer: self.pointer(entry.id())?,
                    }
                }
            };
            let index = out.entries.len();
            let is_dir = kind == EntryKind::Dir;
            out.entries.push(TreeEntry {
                path,
                name: name.to_vec(),
                parent,
                kind,
            });
            if is_dir {
                let sub = self.repo.find_tree(entry.id()).map_err(read)?;
                dirs.push(name.to_vec());
                let walked = self.entries(&sub, Some(index), dirs, out);
                dirs.pop();
                walked?;
            }
        }
        Ok(())
    }

    /// The pointer blob `oid` holds, if it is one.
    fn pointer(&mut self, oid: Oid) -> Result<Option<Pointer>, ObjectsError> {
        if let Some(known) = self.seen.get(&oid) {
            return Ok(known.clone());
        }
        let read = |libgit2| ObjectsError::Read { oid, libgit2 };
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

    #[test]
    fn errors_say_what_git_says_and_carry_no_libgit2_codes() {
        let owner = git2::Error::new(
            ErrorCode::Owner,
            git2::ErrorClass::Config,
            "repository path '/r' is not owned by current user",
        );
        let e = ObjectsError::Open(owner);
        let text = xet_protocol::util::error::chain_text(&e);
        assert!(text.contains("safe.directory"), "{text}");
        assert!(
            !text.contains("class=") && !text.contains("code="),
            "{text}"
        );
        let missing = git2::Error::new(
            ErrorCode::NotFound,
            git2::ErrorClass::Reference,
            "revspec 'v9' not found",
        );
        let e = ObjectsError::Resolve {
            rev: "v9".into(),
            libgit2: missing,
        };
        let text = xet_protocol::util::error::chain_text(&e);
        assert_eq!(text, "\"v9\" names no commit or tree in this repository");
    }

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

    /// A tree object of `entries` (mode, name, id) as given, whatever git would say of it.
    fn raw_tree(repo: &Repository, entries: &[(&str, &[u8], Oid)]) -> Oid {
        let mut bytes = Vec::new();
        for (mode, name, id) in entries {
            bytes.extend_from_slice(mode.as_bytes());
            bytes.push(b' ');
            bytes.extend_from_slice(name);
            bytes.push(0);
            bytes.extend_from_slice(id.as_bytes());
        }
        repo.odb().unwrap().write(ObjectType::Tree, &bytes).unwrap()
    }

    #[test]
    fn a_revision_that_does_not_exist_is_said_in_git_s_words() {
        let dir = tempfile::tempdir().unwrap();
        let git = Git::in_dir(dir.path());
        git.run(&["init", "-q"]).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        commit_all(&git);
        let repo = open(Some(dir.path())).unwrap();
        let err = lfs_pointers(&repo, "v9").unwrap_err().to_string();
        assert_eq!(err, "\"v9\" names no commit or tree in this repository");
        let err = tree_entries(&repo, "HEAD~5").unwrap_err().to_string();
        assert!(!err.contains("class=") && !err.contains("code="), "{err}");
        let Err(err) = open(Some(Path::new("/"))) else {
            panic!("/ is a git repository");
        };
        let err = err.to_string();
        assert!(!err.contains("class=") && !err.contains("code="), "{err}");
    }

    #[test]
    fn tree_entries_leave_out_what_checkout_refuses() {
        let dir = tempfile::tempdir().unwrap();
        Git::in_dir(dir.path()).run(&["init", "-q"]).unwrap();
        let repo = open(Some(dir.path())).unwrap();
        let blob = repo.blob(b"x").unwrap();
        let target = repo.blob(b"ok.txt").unwrap();
        let inner = raw_tree(&repo, &[("100644", b"deep.txt", blob)]);
        let sub = raw_tree(
            &repo,
            &[
                ("100644", b".git", blob),
                ("40000", b"d", inner),
                ("100644", b"ok.txt", blob),
            ],
        );
        let root = raw_tree(
            &repo,
            &[
                ("40000", b".GIT", sub),
                ("100644", b"..", blob),
                ("120000", b".gitmodules", target),
                ("120000", b"link", target),
                ("40000", b"sub", sub),
                ("100755", b"\xffname", blob),
            ],
        );
        let tree = tree_entries(&repo, &root.to_string()).unwrap();
        let got: Vec<(&str, &[u8], Option<usize>)> = tree
            .entries
            .iter()
            .map(|e| (e.path.as_str(), e.name.as_slice(), e.parent))
            .collect();
        assert_eq!(
            got,
            [
                ("link", &b"link"[..], None),
                ("sub", b"sub", None),
                ("sub/d", b"d", Some(1)),
                ("sub/d/deep.txt", b"deep.txt", Some(2)),
                ("sub/ok.txt", b"ok.txt", Some(1)),
                ("\u{fffd}name", b"\xffname", None),
            ]
        );
        assert_eq!(tree.entries[0].kind, EntryKind::Symlink { blob: target });
        assert!(matches!(
            tree.entries[5].kind,
            EntryKind::File {
                executable: true,
                ..
            }
        ));
        let left: Vec<(&str, Refusal)> = tree
            .left_out
            .iter()
            .map(|l| (l.path.as_str(), l.refusal))
            .collect();
        assert_eq!(
            left,
            [
                (".GIT", Refusal::DotGit),
                ("..", Refusal::Dot),
                (".gitmodules", Refusal::GitmodulesLink),
                ("sub/.git", Refusal::DotGit),
            ]
        );
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
