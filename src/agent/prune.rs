//! Pruning local LFS objects safely when git-xet stores them in standalone mode.
//!
//! **What git-lfs does** (git-lfs 3.x, `commands/command_prune.go`, `tq/transfer_queue.go`):
//! `git lfs prune --verify-remote` puts every object it would delete in a download queue in
//! dry-run mode. With a standalone transfer agent there is no batch API request: git-lfs makes
//! up a batch answer listing every object as present, starts the agent processes (each gets an
//! `init` for `download` and later `terminate`, never a `download` request), and counts every
//! object as "verified with remote" without asking anyone. So it would delete objects that
//! exist nowhere else. The same happens in `git lfs fetch --prune` when
//! `lfs.pruneverifyremotealways` is true.
//!
//! **What git-xet does about it:**
//! - The agent answers the `init` of such a check with an error ([`verifying_caller`] finds
//!   the `git-lfs prune` that started it). git-lfs then counts no object as verified, and
//!   prunes none it can reach from a commit ("These objects to be pruned are missing on
//!   remote"); the agent says why on the terminal ([`terminal::tell_user_once`]) and in its log.
//! - `git xet prune` does the check for real: it asks git-lfs which objects it would prune
//!   ([`candidates`], git-lfs's own retention rules), looks each up at the endpoint the agent
//!   would use for that remote ([`check`]: held, intact, same size), and deletes only those
//!   ([`delete_object`]).
//!
//! Limits: the caller is found through the process tree (`/proc` on Linux, `ps` elsewhere on
//! Unix); on Windows the agent cannot tell, and only `git xet prune` is safe. Objects no commit
//! references are pruned by git-lfs without any check (its rule, whatever the remote).

use std::path::{Path, PathBuf};

use crate::git::Git;
use xet_format::LfsOid;
use xet_protocol::Endpoint;

use super::terminal;

/// The `git-lfs` process that started this agent to verify objects before pruning them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub pid: u32,
    /// What the user ran, for messages: `git lfs prune …` or `git lfs fetch --prune …`.
    pub command: String,
}

/// The `git lfs prune` (or `git lfs fetch --prune` with `lfs.pruneverifyremotealways`) among
/// this process's nearest ancestors, if any: a download agent it started is there only to
/// "verify" objects, and is never asked about them.
pub(crate) fn verifying_caller() -> Option<Caller> {
    let (pid, args) = terminal::git_lfs_ancestor()?;
    verifying(pid, &args[1..])
}

/// Whether `git-lfs args` (without argv\[0\]) verifies objects with a remote before pruning.
fn verifying(pid: u32, args: &[String]) -> Option<Caller> {
    let sub = args.iter().position(|a| !a.starts_with('-'))?;
    let rest = &args[sub + 1..];
    let command = format!("git lfs {}", args[sub..].join(" "));
    match args[sub].as_str() {
        // prune starts an agent only to verify objects.
        "prune" => Some(Caller { pid, command }),
        "fetch" if fetch_prunes(rest) && prune_verifies_always(&Git::new()) => {
            Some(Caller { pid, command })
        }
        _ => None,
    }
}

/// Whether `git lfs fetch` arguments ask for a prune (`--prune`, `-p`, or `p` in a cluster of
/// short flags).
fn fetch_prunes(args: &[String]) -> bool {
    let mut value_next = false;
    for a in args {
        if value_next {
            value_next = false;
            continue;
        }
        if a == "--" {
            return false;
        }
        if a == "--prune" {
            return true;
        }
        if let Some(cluster) = a.strip_prefix('-').filter(|c| !c.starts_with('-')) {
            for (i, c) in cluster.char_indices() {
                match c {
                    'p' => return true,
                    // -I and -X take a value, attached or next.
                    'I' | 'X' => {
                        value_next = i + 1 == cluster.len();
                        break;
                    }
                    _ => {}
                }
            }
        }
    }
    false
}

/// `lfs.pruneverifyremotealways` as `git` sees it (the agent's own `Git::new()`: git-lfs starts
/// it in its working directory).
pub(crate) fn prune_verifies_always(git: &Git) -> bool {
    git.output([
        "config",
        "--type=bool",
        "--get",
        "lfs.pruneverifyremotealways",
    ])
    .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "true")
    .unwrap_or(false)
}

/// The `init` error for a verification git-xet cannot let git-lfs fake.
pub fn refusal(caller: &Caller, remote: &str) -> String {
    format!(
        "`{}` cannot verify objects that git-xet stores in standalone mode (remote {:?}): \
         git-lfs does not ask the transfer agent and would count every object as present on \
         the remote. git-xet refuses, so git-lfs deletes no object it could not verify (it \
         lists them as \"missing on remote\"; they may well be there). Run `git xet prune` \
         instead: it checks each object at the endpoint and deletes only those held there \
         (`git xet prune --dry-run` shows what it would do)",
        xet_protocol::redact::clip(&caller.command, 200),
        xet_protocol::redact::redact(remote)
    )
}

/// The objects `git lfs prune` would delete, by git-lfs's own retention rules (recent refs and
/// commits, unpushed commits against `remote`, the work tree, stashes): `git lfs prune
/// --dry-run --verbose --no-verify-remote`, with `lfs.pruneremotetocheck` set to `remote`.
pub fn candidates(git: &Git, remote: &str) -> Result<Vec<LfsOid>, String> {
    let setting = format!("lfs.pruneremotetocheck={remote}");
    let mut cmd = std::process::Command::new("git");
    if let Some(dir) = git.dir() {
        cmd.current_dir(dir);
    }
    // Without a terminal, git-lfs prints only the last line of its listing, unless forced.
    let out = cmd
        .env("GIT_LFS_FORCE_PROGRESS", "1")
        .args(["-c", setting.as_str()])
        .args([
            "lfs",
            "prune",
            "--dry-run",
            "--verbose",
            "--no-verify-remote",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git lfs prune --dry-run: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "`git lfs prune --dry-run --verbose` failed: {}",
            xet_protocol::redact::redact(xet_protocol::redact::clip(stderr.trim(), 2000).as_ref())
        ));
    }
    let mut oids = parse_dry_run(&stdout);
    for oid in parse_dry_run(&stderr) {
        if !oids.contains(&oid) {
            oids.push(oid);
        }
    }
    let announced = would_prune_count(&stdout).or_else(|| would_prune_count(&stderr));
    if let Some(n) = announced.filter(|n| *n != oids.len()) {
        return Err(format!(
            "git lfs prune --dry-run says it would prune {n} objects but listed {}: this version \
             of git-lfs prints its list differently; nothing was deleted",
            oids.len()
        ));
    }
    Ok(oids)
}

/// `N` of git-lfs's "prune: N files would be pruned (…)" line.
fn would_prune_count(text: &str) -> Option<usize> {
    text.split(['\n', '\r']).find_map(|line| {
        let rest = line.trim().strip_prefix("prune: ")?;
        let (n, tail) = rest.split_once(' ')?;
        (tail.starts_with("file would be pruned") || tail.starts_with("files would be pruned"))
            .then(|| n.parse().ok())
            .flatten()
    })
}

/// The oids of the ` * <oid> (<size>)` lines of `git lfs prune --dry-run --verbose`.
pub(crate) fn parse_dry_run(text: &str) -> Vec<LfsOid> {
    let mut oids = Vec::new();
    // Progress output ends its lines with `\r`.
    for line in text.split(['\n', '\r']) {
        let Some(rest) = line.trim_start().strip_prefix("* ") else {
            continue;
        };
        let word = rest.split_whitespace().next().unwrap_or_default();
        if let Ok(oid) = LfsOid::from_hex(word) {
            if !oids.contains(&oid) {
                oids.push(oid);
            }
        }
    }
    oids
}

/// git-lfs's storage directory cannot be found.
#[derive(Debug, thiserror::Error)]
#[error("cannot find git-lfs's storage directory: {0}")]
pub(crate) struct StorageDirError(#[source] pub super::settings::SettingsError);

/// `<LFS storage>/objects`, where git-lfs keeps objects (honours `lfs.storage`).
pub(crate) fn objects_dir(git: &Git) -> Result<PathBuf, StorageDirError> {
    let tmp = super::settings::lfs_temp_dir(git).map_err(StorageDirError)?;
    Ok(super::settings::objects_beside(&tmp))
}

/// The path of `oid` under `objects`: `ab/cd/abcd…`.
use xet_client::object_chunks::object_path;

/// What the endpoint says of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Held, intact, with the same size: safe to delete locally.
    Held,
    /// Not held (or held damaged, or with another size): keep it, push it again.
    Missing(String),
    /// Could not be checked (the endpoint did not answer): keep it.
    Unknown(String),
}

/// Looks `oid` (`size` bytes locally) up at `endpoint`: held only if it has the file intact
/// (what an upload checks before skipping it) with the same size.
pub fn check(endpoint: &dyn Endpoint, oid: &LfsOid, size: u64) -> Verdict {
    match endpoint.file_by_sha256(oid) {
        Ok(Some((_, stored))) if stored == size => Verdict::Held,
        Ok(Some((_, stored))) => Verdict::Missing(format!(
            "the endpoint's file has {stored} bytes, the local object {size}"
        )),
        Ok(None) => Verdict::Missing(
            "not held intact at the endpoint (or, pushed moments ago, not checked there yet)"
                .into(),
        ),
        Err(e) => Verdict::Unknown(xet_protocol::redact::redact(&e.to_string())),
    }
}

/// Deletes the local copy of `oid` (a verified object) from `objects`.
pub(crate) fn delete_object(objects: &Path, oid: &LfsOid) -> std::io::Result<()> {
    std::fs::remove_file(object_path(objects, oid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_dry_run_listing_parses() {
        let a = "2d27fbdf4e8ca207afbfa388ca9172fbcc6c70e534af2476b3b704f87debadcf";
        let b = "81db67b6a5702b9b68f0016f061c409bf3fb16d062fc854d1b424bb4e9c28c56";
        let text = format!(
            "prune: 3 local objects, 1 retained, done.\n\nprune: 2 files would be pruned (6 B)\n \
             * {a} (3 B)\n * {b} (3 B), done.\n * not-an-oid (1 B)\n"
        );
        let oids = parse_dry_run(&text);
        assert_eq!(
            oids.iter().map(|o| o.to_hex()).collect::<Vec<_>>(),
            vec![a.to_string(), b.to_string()]
        );
        assert!(parse_dry_run("prune: 0 local objects, done.").is_empty());
        assert_eq!(would_prune_count(&text), Some(2));
        let forced = format!(
            "prune: 2 files would be pruned (6 B)      \r\n * {a} (3 B)    \r\n * {b} (3 B)   \r\n              * {b} (3 B), done.\n"
        );
        assert_eq!(parse_dry_run(&forced).len(), 2);
        assert_eq!(would_prune_count(&forced), Some(2));
        assert_eq!(
            would_prune_count("prune: 1 file would be pruned (3 B)"),
            Some(1)
        );
    }

    #[test]
    fn prune_callers_are_recognised() {
        assert!(verifying(7, &args(&["prune", "--verify-remote"])).is_some());
        assert!(verifying(7, &args(&["prune"])).is_some());
        assert_eq!(
            verifying(7, &args(&["prune", "-c"])).unwrap().command,
            "git lfs prune -c"
        );
        assert!(verifying(7, &args(&["pull"])).is_none());
        assert!(verifying(7, &args(&["pre-push", "origin", "url"])).is_none());
        assert!(fetch_prunes(&args(&["--prune"])));
        assert!(fetch_prunes(&args(&["-ap", "origin"])));
        assert!(fetch_prunes(&args(&["-p"])));
        assert!(!fetch_prunes(&args(&["-I", "-p"])), "a value of -I");
        assert!(!fetch_prunes(&args(&["-I*.psd", "origin"])));
        assert!(!fetch_prunes(&args(&["--all", "origin"])));
    }

    #[test]
    fn this_process_is_not_started_by_a_prune() {
        assert_eq!(verifying_caller(), None);
    }

    #[test]
    fn object_paths_are_git_lfs_layout() {
        let oid = LfsOid::from_hex(&"ab".repeat(32)).unwrap();
        assert_eq!(
            object_path(Path::new("/o"), &oid),
            PathBuf::from(format!("/o/ab/ab/{}", "ab".repeat(32)))
        );
    }
}
