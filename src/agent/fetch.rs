//! Fetching Git LFS objects in this process (`git xet fetch`, `git xet pull`, `git xet
//! clone`): the objects a checkout needs, downloaded by in-process agents
//! ([`InProcessAgent`], the same downloads git-lfs gets from `git-xet transfer`) several at
//! once, each checked against its SHA-256 and moved into `<LFS storage>/objects` under the
//! name and layout git-lfs gives it, so that git-lfs finds it there.
//! After a pull or a clone, the work-tree files git left as pointers are written from those
//! objects and recorded in git's index ([`CheckoutPlan::apply`]): cloned from the object
//! where the filesystem shares blocks between files (btrfs, XFS), else written as the object is
//! downloaded ([`Mirrors`]; the object's own bytes then skip the page cache, see
//! `xet_client::pipeline::direct`), else copied.
//!
//! What git-lfs does around a custom agent's download is done here instead: the LFS batch
//! request (negotiated mode; offering `xet` only, see [`ObjectReader::download_actions`]), and
//! the SHA-256 check before the object enters the store (computed while the download writes
//! the file, see [`xet_client::pipeline::sha256_landed`]).
//! A remote whose LFS server does not offer the xet transfer is not fetched here
//! ([`FetchError::NotXet`]): the caller runs `git lfs fetch` instead.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use sha2::Digest as _;

use super::error::TransferError;
use super::protocol::Transfer;
use super::reader::{Actions, ObjectReader};
use super::settings;
use super::transfer::{AgentOptions, InProcessAgent, RESUMABLE_MIN};
use crate::git::{objects, worktree, Git};
use git2::Oid;
use xet_client::object_chunks::object_path;
use xet_format::pointer::Pointer;
use xet_format::LfsOid;
use xet_protocol::util::os::clone_file;
use xet_protocol::util::sync::LockAnyway as _;

/// Why objects could not be fetched at all (one object failing is reported in
/// [`Fetched::failed`] instead).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    #[error("{0}")]
    Transfer(#[from] TransferError),
    #[error("cannot find git-lfs's storage directory: {0}")]
    Storage(String),
    /// The remote's LFS server does not offer the xet transfer, or git-lfs moves its objects
    /// with its own file adapter: `git lfs fetch` is the way.
    #[error("the LFS server of {remote} does not offer the xet transfer")]
    NotXet { remote: String },
    /// The LFS server refused git-xet's own batch request: git-lfs, which knows every way to
    /// authenticate there, is the way.
    #[error("{0}")]
    Refused(String),
}

/// What a fetch did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Fetched {
    /// Distinct objects asked for.
    pub wanted: usize,
    /// Of those, already in the store.
    pub present: usize,
    /// Of those, downloaded now, and their bytes.
    pub fetched: usize,
    pub bytes: u64,
    /// Objects that could not be fetched, and why.
    pub failed: Vec<(LfsOid, String)>,
}

/// How far a fetch is, for a progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Progress {
    pub done: usize,
    pub of: usize,
    pub bytes: u64,
    pub of_bytes: u64,
}

/// Where git-lfs keeps the objects of the repository `git` is in (`<LFS storage>/objects`),
/// and its temp directory.
pub(crate) fn storage(git: &Git) -> Result<(PathBuf, PathBuf), FetchError> {
    let common = git
        .common_dir()
        .map_err(|e| FetchError::Storage(e.to_string()))?;
    let tmp =
        settings::lfs_temp_dir_in(git, &common).map_err(|e| FetchError::Storage(e.to_string()))?;
    Ok((settings::objects_beside(&tmp), tmp))
}

/// Fetches `objects` (oid, size) of `remote` (default: `origin`) into the LFS store of the
/// repository `git` is in, `jobs` at once; objects already there are left alone. `progress`
/// is called after each object.
pub(crate) fn fetch_objects(
    git: &Git,
    remote: Option<&str>,
    objects: &[(LfsOid, u64)],
    jobs: usize,
    mirrors: &Mirrors,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Fetched, FetchError> {
    let (store, _) = storage(git)?;
    let mut seen = HashSet::new();
    let unique: Vec<(LfsOid, u64)> = objects
        .iter()
        .filter(|(oid, _)| seen.insert(*oid))
        .copied()
        .collect();
    let mut report = Fetched {
        wanted: unique.len(),
        ..Fetched::default()
    };
    let missing: Vec<(LfsOid, u64)> = unique
        .into_iter()
        .filter(|(oid, size)| {
            let here = std::fs::metadata(object_path(&store, oid)).is_ok_and(|m| m.len() == *size);
            if here {
                report.present += 1;
            }
            !here
        })
        .collect();
    if missing.is_empty() {
        return Ok(report);
    }
    let remote_name = remote.unwrap_or("origin");
    let endpoints = settings::lfs_env_endpoints(git);
    let lfs_url = settings::lfs_url_of(&endpoints, &settings::remotes(git), remote_name);
    if settings::transfer_mode(git, lfs_url.as_deref()) == settings::TransferMode::FileAdapter {
        // git-lfs's own adapter for a remote on this machine: git-xet is never its agent.
        return Err(FetchError::NotXet {
            remote: remote_name.to_string(),
        });
    }
    let mut queue = VecDeque::new();
    if settings::xet_standalone_for(git, remote_name) {
        for (oid, size) in &missing {
            queue.push_back(transfer(*oid, *size, None));
        }
    } else {
        let reader = match ObjectReader::open(git, remote) {
            // An SSH remote whose git-lfs-authenticate failed: git-lfs may still get in.
            Err(TransferError::BatchRefused(why)) => return Err(FetchError::Refused(why)),
            other => other?,
        };
        let actions = match reader.download_actions(&missing) {
            Err(TransferError::BatchRefused(why)) => return Err(FetchError::Refused(why)),
            other => other?,
        };
        match actions {
            Actions::NotXet => {
                return Err(FetchError::NotXet {
                    remote: reader.describe(),
                })
            }
            Actions::Standalone => {
                for (oid, size) in &missing {
                    queue.push_back(transfer(*oid, *size, None));
                }
            }
            Actions::Negotiated(mut actions) => {
                for (oid, size) in &missing {
                    match actions.remove(oid) {
                        Some(Ok(action)) => queue.push_back(transfer(*oid, *size, Some(action))),
                        Some(Err(refused)) => report
                            .failed
                            .push((*oid, format!("the LFS server refused it: {refused}"))),
                        None => report
                            .failed
                            .push((*oid, "the LFS server does not have it".to_string())),
                    }
                }
            }
        }
    }
    let of = queue.len();
    let of_bytes = queue.iter().map(|t| t.size).sum();
    let queue = Mutex::new(queue);
    let failed = Mutex::new(Vec::new());
    let done = AtomicUsize::new(0);
    let bytes = AtomicU64::new(0);
    let dir = git.dir().unwrap_or(Path::new(".")).to_path_buf();
    let next = || queue.lock_anyway().pop_front();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, 16).min(of) {
            scope.spawn(|| {
                let mut agent = None;
                while let Some(t) = next() {
                    let mirror = mirrors.start(&t.oid);
                    let outcome = fetch_one(&mut agent, &dir, remote, &store, &t, mirror);
                    mirrors.finish(&t.oid, outcome == Ok(true));
                    match outcome {
                        Ok(_) => {
                            bytes.fetch_add(t.size, Ordering::Relaxed);
                        }
                        Err(e) => failed.lock_anyway().push((t.oid, e)),
                    }
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    progress(Progress {
                        done: n,
                        of,
                        bytes: bytes.load(Ordering::Relaxed),
                        of_bytes,
                    });
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    report.fetched = of - failed.len();
    report.bytes = bytes.into_inner();
    report.failed.extend(failed);
    Ok(report)
}

/// The work-tree files of HEAD that are still pointers, found before their objects are
/// fetched so that the download can write them as it writes the objects ([`Mirrors`]).
pub(crate) struct CheckoutPlan {
    tree: PathBuf,
    files: Vec<PlannedFile>,
    /// Whether a file of the LFS store can be cloned into the work tree ([`clones_into`]):
    /// then no work-tree file is written during the download.
    clones: bool,
}

struct PlannedFile {
    path: String,
    pointer: Pointer,
    /// The pointer's blob, which git's index names for the path.
    blob: Oid,
    /// Whether git would write the file exactly as git-lfs's smudge filter gives it.
    as_is: bool,
}

/// The files of HEAD in the work tree of the repository `git` is in that are still the
/// pointers HEAD commits; `None` without a work tree or such files.
pub(crate) fn plan_checkout(git: &Git) -> Result<Option<CheckoutPlan>, String> {
    let repo = objects::open(git.dir()).map_err(|e| e.to_string())?;
    let Some(tree) = repo.workdir().map(Path::to_path_buf) else {
        return Ok(None);
    };
    let pointers = objects::lfs_pointers(&repo, "HEAD").map_err(|e| e.to_string())?;
    let stale: Vec<(String, Pointer, Oid)> = pointers
        .into_iter()
        .filter_map(|p| {
            let blob = pointer_file_blob(&tree.join(&p.path), &p.pointer)?;
            Some((p.path, p.pointer, blob))
        })
        .collect();
    if stale.is_empty() {
        return Ok(None);
    }
    let paths: Vec<&str> = stale.iter().map(|(path, _, _)| path.as_str()).collect();
    let as_is = match settings::fetch_filter(git) {
        // Which files git-lfs writes is then its path lists' to say: git checks them all out
        // through git-lfs's smudge filter.
        Some(key) => {
            tracing::info!("{key} is set: git checks the LFS files out");
            vec![false; paths.len()]
        }
        None => worktree::smudged_as_is(git, &paths).unwrap_or_else(|e| {
            tracing::warn!("cannot read the files' git attributes ({e}); git checks them out");
            vec![false; paths.len()]
        }),
    };
    let files = stale
        .into_iter()
        .zip(as_is)
        .map(|((path, pointer, blob), as_is)| PlannedFile {
            path,
            pointer,
            blob,
            as_is,
        })
        .collect::<Vec<_>>();
    remove_leftovers(&tree, &files);
    // Tried in the first file's directory, where `remove_leftovers` looks: a probe cut short
    // leaves nothing behind for good.
    let first_dir = files
        .first()
        .and_then(|f| tree.join(&f.path).parent().map(Path::to_path_buf))
        .unwrap_or_else(|| tree.clone());
    let clones = match storage(git) {
        Ok((_, tmp)) => clones_into(&tmp, &first_dir),
        Err(_) => false,
    };
    Ok(Some(CheckoutPlan {
        tree,
        files,
        clones,
    }))
}

impl CheckoutPlan {
    /// Where the download of each object this process may write as is (one of its files, of
    /// [`RESUMABLE_MIN`] bytes and more) writes it as it lands ([`fetch_objects`]): nowhere
    /// where the files can be cloned from their objects afterwards, which writes nothing.
    pub(crate) fn mirrors(&self) -> Mirrors {
        let mut targets = HashMap::new();
        for f in self.files.iter().filter(|_| !self.clones) {
            if f.as_is && f.pointer.size >= RESUMABLE_MIN {
                targets
                    .entry(f.pointer.oid)
                    .or_insert_with(|| f.path.clone());
            }
        }
        Mirrors {
            tree: self.tree.clone(),
            targets,
            writing: Mutex::default(),
            complete: Mutex::default(),
        }
    }

    /// Writes the planned files from the local objects (those `mirrors` holds whole are put in
    /// place as they are).
    ///
    /// A file git would write exactly as git-lfs's smudge filter gives it (`filter=lfs -text`)
    /// whose object is here is written by this process: from its mirror (written as the object
    /// was downloaded), else cloned from the object where the filesystem can, else copied from
    /// it (in the kernel, with `copy_file_range`); put
    /// in place of its pointer file by a rename, and recorded in git's index with its new stat
    /// data ([`worktree::record_written`]): git then takes it as unchanged without running the
    /// clean filter, which would read and hash every file again. The others are removed and
    /// written by `git checkout -- PATH…`, through git-lfs's smudge filter.
    pub(crate) fn apply(
        self,
        git: &Git,
        dir: &Path,
        mirrors: &Mirrors,
    ) -> Result<CheckedOut, String> {
        let repo = objects::open(git.dir()).map_err(|e| e.to_string())?;
        let tree = self.tree;
        let store = storage(git).ok().map(|(objects, _)| objects);
        let mtime = worktree::settled_mtime(&repo);
        let started = std::time::Instant::now();
        let mut written = Vec::new();
        let mut by_git = Vec::new();
        let mut mirrored = 0usize;
        let mut cloned = 0usize;
        for f in &self.files {
            let (Some(store), Some(mtime), true) = (&store, mtime, f.as_is) else {
                by_git.push(f.path.as_str());
                continue;
            };
            let dest = tree.join(&f.path);
            if let Some(tmp) = mirrors.take_complete(&f.path) {
                // Changed since it was planned (the user was quicker): left as it is.
                if pointer_file_blob(&dest, &f.pointer) != Some(f.blob) {
                    continue;
                }
                match put_in_place(tmp, &dest, mtime) {
                    Ok(()) => {
                        mirrored += 1;
                        written.push((f.path.clone(), f.blob));
                        continue;
                    }
                    Err(e) => tracing::info!(path = f.path, "copying the file: {e}"),
                }
            }
            let object = object_path(store, &f.pointer.oid);
            match write_from_object(&object, f.pointer.size, &tree, &f.path, mtime) {
                Ok(how) => {
                    cloned += usize::from(how == Copied::Cloned);
                    written.push((f.path.clone(), f.blob));
                }
                Err(e) => {
                    tracing::info!(path = f.path, "git checks the file out: {e}");
                    by_git.push(f.path.as_str());
                }
            }
        }
        tracing::debug!(
            files = written.len(),
            mirrored,
            millis = started.elapsed().as_millis() as u64,
            "LFS files written from their objects"
        );
        let recorded = match worktree::record_written(&repo, &written) {
            Ok(n) => n,
            Err(e) => {
                // The files are right; git only finds that out by hashing them once.
                tracing::warn!("{e}; git will read the LFS files once to see they are unchanged");
                0
            }
        };
        let report = CheckedOut {
            copied: written.len(),
            as_downloaded: mirrored,
            cloned,
            recorded,
            by_git: by_git.len(),
        };
        if by_git.is_empty() {
            return Ok(report);
        }
        // git writes a file whose stat matches its index entry only if it is missing: the pointer
        // files (exactly the committed pointer, so nothing of the user's is lost) go first.
        for path in &by_git {
            let _ = std::fs::remove_file(tree.join(path));
        }
        let mut checkout = Command::new("git");
        checkout
            .args([
                "checkout",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                "--",
            ])
            .current_dir(dir)
            .stdin(std::process::Stdio::piped());
        let mut child = checkout
            .spawn()
            .map_err(|e| format!("cannot run git checkout: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            for path in &by_git {
                // Literal paths: a pathspec's magic characters are not interpreted.
                stdin
                    .write_all(format!(":(literal){path}\0").as_bytes())
                    .map_err(|e| format!("cannot write to git checkout: {e}"))?;
            }
        }
        let status = child
            .wait()
            .map_err(|e| format!("cannot run git checkout: {e}"))?;
        if status.success() {
            Ok(report)
        } else {
            Err(format!(
                "git checkout of the LFS files failed ({status}); see its message above"
            ))
        }
    }
}

/// Work-tree files written as their objects are downloaded, one per object (see
/// [`CheckoutPlan::mirrors`] and `xet_client::pipeline::mirror`). Each is created when its
/// object's download starts and closed when it ends, so that no more are open at once than
/// downloads run. The default writes none.
#[derive(Default)]
pub(crate) struct Mirrors {
    tree: PathBuf,
    /// The work-tree path (from the tree's root) each object's download writes.
    targets: HashMap<LfsOid, String>,
    /// Files being written by their objects' downloads (open, and locked: see
    /// [`remove_leftovers`]).
    writing: Mutex<HashMap<LfsOid, tempfile::NamedTempFile>>,
    /// Files written whole whose objects are in place, by the work-tree path they are for.
    complete: Mutex<HashMap<String, tempfile::TempPath>>,
}

impl Mirrors {
    /// A new file for the download of `oid` to write as it lands, if one of its work-tree files
    /// is to be written so.
    fn start(&self, oid: &LfsOid) -> Option<std::fs::File> {
        let path = self.targets.get(oid)?;
        let dest = self.tree.join(path);
        let tmp = match checkout_temp(dest.parent().unwrap_or(&self.tree)) {
            Ok(tmp) => tmp,
            Err(e) => {
                tracing::debug!(path, "the file will be copied from its object: {e}");
                return None;
            }
        };
        let file = tmp.as_file().try_clone().ok()?;
        self.writing.lock_anyway().insert(*oid, tmp);
        Some(file)
    }

    /// The download of `oid` ended: its file is kept if `whole` (written whole, the object in
    /// place), and removed otherwise.
    fn finish(&self, oid: &LfsOid, whole: bool) {
        let tmp = self.writing.lock_anyway().remove(oid);
        if let (Some(tmp), Some(path), true) = (tmp, self.targets.get(oid), whole) {
            self.complete
                .lock_anyway()
                .insert(path.clone(), tmp.into_temp_path());
        }
    }

    /// The file written whole for the work-tree path `path`, if there is one.
    fn take_complete(&self, path: &str) -> Option<tempfile::TempPath> {
        self.complete.lock_anyway().remove(path)
    }
}

/// Puts the finished work-tree file `tmp` in place of `dest` (the pointer file), with its
/// permissions and modified at `mtime`.
fn put_in_place(
    tmp: tempfile::TempPath,
    dest: &Path,
    mtime: std::time::SystemTime,
) -> std::io::Result<()> {
    let perms = std::fs::metadata(dest)?.permissions();
    std::fs::set_permissions(&tmp, perms)?;
    // Set through a handle of its own: the writer's was closed when its download ended.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&tmp)?
        .set_times(std::fs::FileTimes::new().set_modified(mtime))?;
    replace_pointer(dest, |to| tmp.persist_noclobber(to).map_err(|e| e.error))
}

/// How the names of the work-tree files being written start (hidden, beside the file each
/// replaces, for the rename that puts it in place).
const CHECKOUT_TEMP: &str = ".git-xet-checkout";

/// A new file in `dir` to write a work-tree file in, locked while this process holds it (so
/// that [`remove_leftovers`] of another process leaves it alone).
fn checkout_temp(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let tmp = tempfile::Builder::new()
        .prefix(CHECKOUT_TEMP)
        .tempfile_in(dir)?;
    if let Err(e) = tmp.as_file().try_lock() {
        tracing::debug!(path = %tmp.path().display(), "cannot lock a new file: {e}");
    }
    Ok(tmp)
}

/// Removes the work-tree files a killed checkout left being written (Ctrl-C during `git xet
/// clone` or `git xet pull`) in the directories of `files`: those no process holds locked.
fn remove_leftovers(tree: &Path, files: &[PlannedFile]) {
    let dirs: HashSet<PathBuf> = files
        .iter()
        .filter_map(|f| tree.join(&f.path).parent().map(Path::to_path_buf))
        .collect();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_name().to_string_lossy().starts_with(CHECKOUT_TEMP) {
                continue;
            }
            let Ok(file) = std::fs::OpenOptions::new().write(true).open(e.path()) else {
                continue;
            };
            if file.try_lock().is_ok() && std::fs::remove_file(e.path()).is_ok() {
                tracing::info!(path = %e.path().display(), "removed a file an interrupted checkout left");
            }
        }
    }
}

/// Removes `dest`, the pointer file a new file replaces, then gives the new file its name
/// with `rename` (to a free name): ext4 starts writing a file renamed over another to disk at
/// once (its `auto_da_alloc` safeguard for programs that replace files without syncing them),
/// which costs a large file's rename a third of a second per 512 MiB; a rename to a free name
/// does not. git's own checkout also removes a file before it writes the new one.
fn replace_pointer(
    dest: &Path,
    rename: impl FnOnce(&Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    match std::fs::remove_file(dest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    rename(dest)
}

/// What [`CheckoutPlan::apply`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckedOut {
    /// Files written by this process: as their objects were downloaded, or copied from them.
    pub copied: usize,
    /// Of those, written as their objects were downloaded (not copied afterwards).
    pub as_downloaded: usize,
    /// Of those, cloned from their objects (sharing their blocks on disk: nothing written).
    pub cloned: usize,
    /// Of those, recorded in git's index with their new stat data.
    pub recorded: usize,
    /// Files written by `git checkout` (through git-lfs's smudge filter).
    pub by_git: usize,
}

/// How [`write_from_object`] made the work-tree file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Copied {
    /// A clone of the object, sharing its blocks ([`clone_file`]).
    Cloned,
    /// A copy of its bytes.
    Copied,
}

/// Replaces the pointer file `path` (from the work tree's root `tree`) with a copy of the
/// object at `object` (`size` bytes), modified at `mtime`, with the pointer file's permissions:
/// a clone where the filesystem can make one, else a copy.
fn write_from_object(
    object: &Path,
    size: u64,
    tree: &Path,
    path: &str,
    mtime: std::time::SystemTime,
) -> std::io::Result<Copied> {
    let mut from = std::fs::File::open(object)?;
    if from.metadata()?.len() != size {
        return Err(std::io::Error::other(format!(
            "{} is not {size} bytes long",
            object.display()
        )));
    }
    let dest = tree.join(path);
    let parent = dest.parent().unwrap_or(tree);
    // The pointer file must be there before anything is copied (its permissions are taken later).
    std::fs::metadata(&dest)?;
    let tmp = checkout_temp(parent)?;
    let how = match clone_file(&from, tmp.as_file()) {
        Ok(()) => Copied::Cloned,
        Err(_) => {
            // std's copy between two files is copy_file_range on Linux: the bytes stay in the
            // kernel.
            let copied = std::io::copy(&mut from, &mut tmp.as_file())?;
            if copied != size {
                return Err(std::io::Error::other(format!(
                    "copied {copied} bytes of {}, not {size}",
                    object.display()
                )));
            }
            Copied::Copied
        }
    };
    put_in_place(tmp.into_temp_path(), &dest, mtime)?;
    Ok(how)
}

/// Whether a file of the LFS store (its temp directory `store_tmp`, beside its objects) can be
/// cloned into the work tree's directory `dir` ([`clone_file`]; tried with one block): on btrfs, XFS made
/// with reflink (the default since 2019) and bcachefs it can, unless the two are on different
/// filesystems. Then a work-tree file is cloned from its object once the object is in place,
/// and nothing is written twice.
fn clones_into(store_tmp: &Path, dir: &Path) -> bool {
    let probe = || -> std::io::Result<()> {
        std::fs::create_dir_all(store_tmp)?;
        let mut from = tempfile::Builder::new()
            .prefix("git-xet-clone-probe")
            .tempfile_in(store_tmp)?;
        from.write_all(&[0; 4096])?;
        let to = checkout_temp(dir)?;
        clone_file(from.as_file(), to.as_file())
    };
    match probe() {
        Ok(()) => {
            tracing::debug!("the work tree's LFS files will be cloned from their objects");
            true
        }
        Err(e) => {
            tracing::debug!("the work tree's LFS files cannot be cloned from their objects: {e}");
            false
        }
    }
}

/// The blob of the work-tree file at `path` if it is (still) the Git LFS pointer `committed`.
fn pointer_file_blob(path: &Path, committed: &Pointer) -> Option<Oid> {
    use xet_format::pointer::MAX_POINTER_LEN;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_POINTER_LEN as u64 {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    if Pointer::parse(&bytes).ok()? != *committed {
        return None;
    }
    Oid::hash_object(git2::ObjectType::Blob, &bytes).ok()
}

fn transfer(oid: LfsOid, size: u64, action: Option<super::protocol::Action>) -> Transfer {
    Transfer {
        oid,
        size,
        path: None,
        action,
    }
}

/// Downloads `t` with this thread's agent (started at its first object), also into `mirror`
/// if given, and moves it into `store`: whether `mirror` holds the whole object; the reason
/// when it could not.
fn fetch_one(
    agent: &mut Option<InProcessAgent>,
    dir: &Path,
    remote: Option<&str>,
    store: &Path,
    t: &Transfer,
    mirror: Option<std::fs::File>,
) -> Result<bool, String> {
    let agent = match agent {
        Some(a) => a,
        None => agent.insert(
            InProcessAgent::new(AgentOptions::in_dir(dir), remote)
                .map_err(|e| xet_protocol::redact::redact(&e.to_string()))?,
        ),
    };
    let (tmp, sha, mirrored) = agent
        .download(t, mirror)
        .map_err(|e| xet_protocol::redact::redact(&e.to_string()))?;
    let placed = place(&tmp, &t.oid, t.size, store, sha);
    if placed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    placed.map(|()| mirrored)
}

/// Checks that the file at `tmp` is object `oid` of `size` bytes (its SHA-256: `landed`, when
/// it was computed while the file was written, else read now), then moves it to its place in
/// `store`, as git-lfs names it.
fn place(
    tmp: &Path,
    oid: &LfsOid,
    size: u64,
    store: &Path,
    landed: Option<LfsOid>,
) -> Result<(), String> {
    let len = std::fs::metadata(tmp)
        .map_err(|e| format!("cannot read {}: {e}", tmp.display()))?
        .len();
    let actual = match landed {
        Some(sha) if sha == *oid && len == size => (sha, len),
        // Hashed again when the landed hash disagrees: a mismatch is reported only as read.
        _ => sha256_of(tmp).map_err(|e| format!("cannot read {}: {e}", tmp.display()))?,
    };
    if actual.1 != size || actual.0 != *oid {
        return Err(format!(
            "the downloaded file is {} bytes with SHA-256 {}, not {size} bytes with {oid}",
            actual.1, actual.0
        ));
    }
    let dest = object_path(store, oid);
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    std::fs::rename(tmp, &dest).map_err(|e| format!("cannot move it to {}: {e}", dest.display()))
}

/// The SHA-256 and length of the file at `path`.
fn sha256_of(path: &Path) -> std::io::Result<(LfsOid, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((LfsOid::from_digest(hasher.finalize().into()), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_file_with_the_right_hash_and_size_is_placed() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("objects");
        let data = b"some object bytes".to_vec();
        let oid = LfsOid::of(&data);
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"other bytes").unwrap();
        let err = place(&tmp, &oid, data.len() as u64, &store, None).unwrap_err();
        assert!(err.contains("not 17 bytes"), "{err}");
        // A hash computed while writing that names the object is not taken for a file that
        // is not its size; one that does not name it is checked again.
        let err = place(&tmp, &oid, data.len() as u64, &store, Some(oid)).unwrap_err();
        assert!(err.contains("not 17 bytes"), "{err}");
        assert!(!object_path(&store, &oid).exists());
        std::fs::write(&tmp, &data).unwrap();
        let err = place(&tmp, &oid, 99, &store, None).unwrap_err();
        assert!(err.contains("not 99 bytes"), "{err}");
        place(
            &tmp,
            &oid,
            data.len() as u64,
            &store,
            Some(LfsOid::of(b"x")),
        )
        .unwrap();
        assert_eq!(std::fs::read(object_path(&store, &oid)).unwrap(), data);
        assert!(!tmp.exists());
    }
}
