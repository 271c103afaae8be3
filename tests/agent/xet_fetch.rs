//! `git xet clone`, `git xet fetch` and `git xet pull` download the LFS files in their own
//! process: the same work tree, the same `.git/lfs/objects` (names, sizes, bytes) and a clean
//! `git lfs fsck` as plain git-lfs, in negotiated and standalone mode; chunks already on the
//! machine are not fetched again; a damaged chunk on the server is refused and nothing wrong
//! enters the store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::collections::BTreeMap;
use std::path::Path;

use common::git::GitEnv;
use common::server::WRITE_TOKEN;

const MIB: usize = 1 << 20;

fn machine() -> GitEnv {
    GitEnv::machine(WRITE_TOKEN)
}

/// The files under `.git/lfs/objects` of `repo`: relative path → (size, unix mode).
fn store(repo: &Path) -> BTreeMap<String, (u64, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let root = repo.join(".git/lfs/objects");
    let mut out = BTreeMap::new();
    if !root.is_dir() {
        return out;
    }
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(&root).unwrap().display().to_string();
                out.insert(rel, (meta.len(), meta.permissions().mode() & 0o777));
            }
        }
    }
    out
}

/// The work tree of `repo` without `.git`: relative path → (unix mode, bytes).
fn work_tree(repo: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![repo.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.file_name() == ".git" {
                continue;
            }
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(repo).unwrap().display().to_string();
                let mode = meta.permissions().mode() & 0o777;
                out.insert(rel, (mode, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out
}

/// git sees the work tree of `repo` as clean from the index's stat data alone: `git
/// diff-files` (which compares stat data and nothing else) lists nothing, and `git status`
/// never starts git-lfs's filter (which would read and hash the LFS files again).
fn clean_by_stat(env: &GitEnv, repo: &Path) {
    let out = env.git(repo, &["diff-files", "--name-only"]);
    assert_eq!(
        out.stdout.trim(),
        "",
        "files whose stat data the index does not match"
    );
    let out = env.run_with(
        repo,
        "git",
        &["status", "--porcelain"],
        &[("GIT_TRACE", "1")],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(
        !out.stderr.contains("filter-process") && !out.stderr.contains("lfs clean"),
        "git status ran git-lfs's filter: {}",
        out.stderr
    );
    let porcelain: Vec<&str> = out.stdout.lines().collect();
    assert!(porcelain.is_empty(), "git status: {porcelain:?}");
}

/// How many downloads the transfer journal of `repo` records.
fn downloads(env: &GitEnv, repo: &Path) -> usize {
    env.journal(repo)
        .into_iter()
        .filter(|r| r["direction"] == "download")
        .count()
}

/// `remote` cloned on two machines: with plain `git clone` into `plain` (git-lfs smudges
/// through the agent), and with `git xet clone` into `ours`; both succeed. The machines,
/// their clones, and `git xet clone`'s output.
fn plain_and_xet_clones(
    remote: &Path,
) -> (
    GitEnv,
    std::path::PathBuf,
    GitEnv,
    std::path::PathBuf,
    common::git::Output,
) {
    let plain = machine();
    let out = plain.run_in(
        plain.path(),
        "git",
        &["clone", "-q", remote.to_str().unwrap(), "plain"],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    let ours = machine();
    let out = ours.run_in(
        ours.path(),
        "git",
        &["xet", "clone", remote.to_str().unwrap(), "ours", "--", "-q"],
    );
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), ours.agent_log());
    let (plain_repo, ours_repo) = (plain.path().join("plain"), ours.path().join("ours"));
    (plain, plain_repo, ours, ours_repo, out)
}

/// What the last checkout `log` records did: files written, of those written as their objects
/// were downloaded, and cloned from their objects.
fn checked_out(log: &str) -> (usize, usize, usize) {
    let line = log
        .lines()
        .rfind(|l| l.contains("LFS files checked out"))
        .unwrap_or_else(|| panic!("no checkout in the log: {log}"));
    let count = |key: &str| -> usize {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    (count("written"), count("as_downloaded"), count("cloned"))
}

/// Pushes a new version of `model.bin` from `work` (its `v1` with 4 KiB at `at` made of
/// `seed`'s bytes) and returns it.
fn push_new_model(pusher: &GitEnv, work: &Path, v1: &[u8], at: usize, seed: u64) -> Vec<u8> {
    let mut v2 = v1.to_vec();
    v2[at..at + 4096].copy_from_slice(&common::splitmix64(seed, 4096));
    std::fs::write(work.join("model.bin"), &v2).unwrap();
    pusher.git(work, &["commit", "-q", "-am", "v2"]);
    pusher.git(work, &["push", "-q", "origin", "main"]);
    v2
}

fn fsck(env: &GitEnv, repo: &Path) {
    let out = env.run_in(repo, "git", &["lfs", "fsck"]);
    assert_eq!(out.status, Some(0), "git lfs fsck: {}", out.all());
}

/// Pushes three LFS files (8 MiB, 2 MiB, 1 KiB) and an executable one (1 MiB) in negotiated
/// mode, with a text file that holds a pointer but is not an LFS file (no `filter=lfs`); the
/// pushing machine, its work tree and the LFS files' bytes.
fn pushed(server_url: &str) -> (GitEnv, std::path::PathBuf, Vec<(String, Vec<u8>)>) {
    let env = machine();
    let lfs_url = format!("{server_url}/team/fetch.git/info/lfs");
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    let files = vec![
        ("model.bin".to_string(), common::splitmix64(81, 8 * MIB)),
        (
            "data/table.bin".to_string(),
            common::splitmix64(82, 2 * MIB),
        ),
        ("small.bin".to_string(), common::splitmix64(83, 1024)),
    ];
    for (name, bytes) in &files {
        let path = work.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let tool = common::splitmix64(85, MIB);
    std::fs::write(work.join("run.bin"), &tool).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(work.join("run.bin"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    let pointer = format!(
        "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize {}\n",
        common::sha256_hex(&files[0].1),
        files[0].1.len()
    );
    std::fs::write(work.join("pointer.txt"), pointer).unwrap();
    env.git(&work, &["add", "-A"]);
    env.git(&work, &["commit", "-q", "-m", "files"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let mut files = files;
    files.push(("run.bin".to_string(), tool));
    (env, work, files)
}

#[needs(git_lfs)]
#[test]
fn xet_clone_fetch_and_pull_leave_what_plain_git_lfs_leaves() {
    let s = common::server::start();
    let (pusher, work, files) = pushed(s.url());
    let remote = pusher.path().join("remote.git");

    // Plain git clone (git-lfs smudges through the agent) on one machine, `git xet clone`
    // on another.
    let (_plain, plain_repo, ours, ours_repo, out) = plain_and_xet_clones(&remote);
    assert!(out.stderr.contains("cloned into ours"), "{}", out.stderr);
    // The server asked for credentials (401) and the credential helper's answered: as git-lfs
    // does, the clone remembers to send them with the first request from now on.
    let lfs_url = format!("{}/team/fetch.git/info/lfs", s.url());
    let access = ours.git(
        &ours_repo,
        &["config", "--get-urlmatch", "lfs.access", &lfs_url],
    );
    assert_eq!(access.stdout.trim(), "basic", "{}", access.all());
    for (name, bytes) in &files {
        assert!(
            std::fs::read(ours_repo.join(name)).unwrap() == *bytes,
            "{name} checked out"
        );
    }
    assert_eq!(store(&ours_repo), store(&plain_repo), "the same LFS store");
    // The same files with the same modes; the pointer that is not an LFS file stays one.
    let (ours_tree, plain_tree) = (work_tree(&ours_repo), work_tree(&plain_repo));
    assert_eq!(
        ours_tree
            .iter()
            .map(|(p, (m, _))| (p, m))
            .collect::<Vec<_>>(),
        plain_tree
            .iter()
            .map(|(p, (m, _))| (p, m))
            .collect::<Vec<_>>()
    );
    assert!(ours_tree == plain_tree, "the same bytes in the work tree");
    assert!(ours_tree["pointer.txt"]
        .1
        .starts_with(b"version https://git-lfs"));
    assert_eq!(
        ours_tree["run.bin"].0 & 0o100,
        0o100,
        "run.bin is executable"
    );
    fsck(&ours, &ours_repo);
    clean_by_stat(&ours, &ours_repo);
    // The downloads went through git-xet's own pipeline: the journal has them.
    let downloads = downloads(&ours, &ours_repo);
    assert_eq!(downloads, files.len(), "{}", ours.agent_log());
    // model.bin, downloaded on its own, was written to the work tree as its object was, in
    // the same pass; the smaller files came in one download pack and were copied from their
    // objects. (Where the filesystem clones files, all four were cloned from their objects.)
    let done = checked_out(&ours.agent_log());
    assert!(
        done == (4, 1, 0) || done == (4, 0, 4),
        "{done:?}: {}",
        ours.agent_log()
    );

    // A new version of the model: `git xet pull` fetches only what changed.
    let v2 = push_new_model(&pusher, &work, &files[0].1, 3 * MIB, 84);
    let before = s.health("sent_xorb_bytes");
    let out = ours.run_in(&ours_repo, "git", &["xet", "pull", "--", "-q"]);
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), ours.agent_log());
    let sent = s.health("sent_xorb_bytes") - before;
    assert!(std::fs::read(ours_repo.join("model.bin")).unwrap() == v2);
    let done = checked_out(&ours.agent_log());
    assert!(
        done == (1, 1, 0) || done == (1, 0, 1),
        "the pull wrote model.bin as it downloaded it (or cloned it): {done:?}: {}",
        ours.agent_log()
    );
    assert!(
        sent < 2 * MIB as u64,
        "the pull fetched {sent} bytes for a 4 KiB edit"
    );
    fsck(&ours, &ours_repo);
    clean_by_stat(&ours, &ours_repo);

    // `git xet fetch` of a ref into a clone without LFS files: the same store as git lfs fetch.
    let bare = machine();
    bare.clone_skip_smudge(remote.to_str().unwrap(), "skip");
    let skip = bare.path().join("skip");
    let out = bare.run_in(&skip, "git", &["xet", "fetch", "HEAD~1", "HEAD"]);
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), bare.agent_log());
    let lfs = machine();
    lfs.clone_skip_smudge(remote.to_str().unwrap(), "skip");
    let lfs_repo = lfs.path().join("skip");
    let out = lfs.run_in(
        &lfs_repo,
        "git",
        &["lfs", "fetch", "origin", "HEAD~1", "HEAD"],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert_eq!(store(&skip), store(&lfs_repo));
    assert_eq!(store(&skip).len(), files.len() + 1);
    // Nothing left to fetch: a second run downloads nothing.
    let out = bare.run_in(&skip, "git", &["xet", "fetch"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(!out.stderr.contains("fetched"), "{}", out.stderr);
    // The work tree still holds pointers, and git's index was written an hour ago: `git xet
    // pull` (nothing new to pull) checks the files out from the local objects, with a recent
    // modification time, and git sees them unchanged from their stat data.
    let out = bare.run_in(&skip, "touch", &["-d", "1 hour ago", ".git/index"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let out = bare.run_in(&skip, "git", &["xet", "pull", "--", "-q"]);
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), bare.agent_log());
    assert!(std::fs::read(skip.join("model.bin")).unwrap() == v2);
    let age = std::fs::metadata(skip.join("model.bin"))
        .unwrap()
        .modified()
        .unwrap()
        .elapsed()
        .unwrap_or_default();
    assert!(
        age.as_secs() < 600,
        "model.bin was given an old time: {age:?} ago"
    );
    clean_by_stat(&bare, &skip);

    // `git xet fetch --all`: every version in the history of every ref, a branch's included,
    // as `git lfs fetch --all`; `git xet fetch` alone only HEAD's.
    pusher.git(&work, &["checkout", "-q", "-b", "side"]);
    std::fs::write(work.join("side.bin"), common::splitmix64(86, MIB)).unwrap();
    pusher.git(&work, &["add", "side.bin"]);
    pusher.git(&work, &["commit", "-q", "-m", "side"]);
    pusher.git(&work, &["push", "-q", "origin", "side"]);
    let every = machine();
    every.clone_skip_smudge(remote.to_str().unwrap(), "every");
    let every_repo = every.path().join("every");
    let out = every.run_in(&every_repo, "git", &["xet", "fetch"]);
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), every.agent_log());
    // HEAD's LFS files, and the first model's, which pointer.txt names (git-lfs fetches
    // what any pointer blob of the tree names, as above).
    assert_eq!(store(&every_repo).len(), files.len() + 1, "{}", out.all());
    let out = every.run_in(&every_repo, "git", &["xet", "fetch", "--all"]);
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), every.agent_log());
    let lfs_all = machine();
    lfs_all.clone_skip_smudge(remote.to_str().unwrap(), "every");
    let lfs_all_repo = lfs_all.path().join("every");
    let out = lfs_all.run_in(&lfs_all_repo, "git", &["lfs", "fetch", "--all", "origin"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert_eq!(store(&every_repo), store(&lfs_all_repo));
    // Both versions of the model and the branch's file.
    assert_eq!(store(&every_repo).len(), files.len() + 2, "{}", out.all());
    fsck(&every, &every_repo);
}

#[needs(git_lfs)]
#[test]
fn xet_clone_of_a_standalone_repository_fetches_in_process() {
    let s = common::server::start();
    let env = GitEnv::new();
    let work = env.standalone_http_world(s.url(), WRITE_TOKEN);
    let model = common::splitmix64(91, 5 * MIB);
    std::fs::write(work.join("model.bin"), &model).unwrap();
    env.git(&work, &["add", "-A"]);
    env.git(&work, &["commit", "-q", "-m", "model"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let out = env.run_in(
        env.path(),
        "git",
        &["xet", "clone", "remote.git", "copy", "--", "-q"],
    );
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), env.agent_log());
    let copy = env.path().join("copy");
    assert!(std::fs::read(copy.join("model.bin")).unwrap() == model);
    fsck(&env, &copy);
    clean_by_stat(&env, &copy);
    let downloads = downloads(&env, &copy);
    assert_eq!(downloads, 1);
}

#[needs(git_lfs)]
#[test]
fn a_damaged_chunk_is_refused_and_nothing_wrong_enters_the_store() {
    let s = common::server::start();
    let (pusher, _work, _files) = pushed(s.url());
    let remote = pusher.path().join("remote.git");
    // Every xorb of the store gets one byte flipped in its last kilobyte (chunk data).
    let mut damaged = 0;
    let mut stack = vec![s.store_dir()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().contains("xorb") {
                let mut bytes = std::fs::read(&path).unwrap();
                if bytes.len() > 4096 {
                    let at = bytes.len() / 2;
                    bytes[at] ^= 0x55;
                    std::fs::write(&path, &bytes).unwrap();
                    damaged += 1;
                }
            }
        }
    }
    assert!(
        damaged > 0,
        "no xorb found under {}",
        s.store_dir().display()
    );
    let env = machine();
    env.clone_skip_smudge(remote.to_str().unwrap(), "skip");
    let repo = env.path().join("skip");
    let out = env.run_in(&repo, "git", &["xet", "fetch"]);
    assert_eq!(out.status, Some(1), "{}", out.all());
    assert!(
        out.stderr.contains("could not be fetched"),
        "{}",
        out.stderr
    );
    // Nothing entered the store: every object it holds (none, or the small one that a
    // damaged xorb may spare) has the bytes its name says.
    let objects = repo.join(".git/lfs/objects");
    for (rel, _) in store(&repo) {
        let name = rel.rsplit('/').next().unwrap().to_string();
        let bytes = std::fs::read(objects.join(&rel)).unwrap();
        assert_eq!(common::sha256_hex(&bytes), name, "{rel}");
    }
    assert!(store(&repo).len() < 3, "{:?}", store(&repo));
}

/// `git xet clone` of `remote` on `env` as `copy`; the files must be checked out, the store
/// clean and every download gone through the agent. Returns what the command printed.
fn clone_whole(env: &GitEnv, remote: &Path, files: &[(String, Vec<u8>)]) -> String {
    let out = env.run_in(
        env.path(),
        "git",
        &["xet", "clone", remote.to_str().unwrap(), "copy", "--", "-q"],
    );
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), env.agent_log());
    assert!(!out.stderr.contains(WRITE_TOKEN), "{}", out.stderr);
    let copy = env.path().join("copy");
    for (name, bytes) in files {
        assert!(std::fs::read(copy.join(name)).unwrap() == *bytes, "{name}");
    }
    fsck(env, &copy);
    clean_by_stat(env, &copy);
    let downloads = downloads(env, &copy);
    assert_eq!(downloads, files.len(), "{}", env.agent_log());
    out.stderr
}

#[needs(git_lfs)]
#[test]
fn clones_authenticate_as_git_lfs_does() {
    let s = common::server::start();
    let (pusher, _work, files) = pushed(s.url());
    let remote = pusher.path().join("remote.git");
    let fresh = || {
        let env = GitEnv::new();
        let out = env.run_in(env.path(), "git", &["xet", "install", "--global"]);
        assert_eq!(out.status, Some(0), "{}", out.all());
        env
    };

    // A CI checkout: no credential helper, the LFS server's credential in http.extraheader,
    // which git-xet's own batch request sends as git-lfs does.
    let ci = fresh();
    let basic = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("git:{WRITE_TOKEN}"))
    };
    let key = format!("http.{}/.extraheader", s.url());
    ci.git(
        &ci.home(),
        &[
            "config",
            "--global",
            &key,
            &format!("Authorization: Basic {basic}"),
        ],
    );
    let said = clone_whole(&ci, &remote, &files);
    assert!(!said.contains("git lfs fetch"), "{said}");

    // Credentials in ~/.netrc only, which git-lfs reads before the credential helpers:
    // git-xet's own request reads them too, and the clone fetches in-process.
    let netrc = fresh();
    let host = s
        .url()
        .trim_start_matches("http://")
        .split(':')
        .next()
        .unwrap()
        .to_string();
    std::fs::write(
        netrc.home().join(".netrc"),
        format!("machine {host}\nlogin git\npassword {WRITE_TOKEN}\n"),
    )
    .unwrap();
    let said = clone_whole(&netrc, &remote, &files);
    assert!(!said.contains("git lfs fetch"), "{said}");
    assert!(!said.contains(WRITE_TOKEN), "{said}");
}

/// `git xet clone git@lfs.example:remote.git copy` in `env`'s directory, with `ssh` as
/// `GIT_SSH_COMMAND`.
fn clone_over_ssh(env: &GitEnv, ssh: &str) -> common::git::Output {
    env.run_with(
        env.path(),
        "git",
        &[
            "xet",
            "clone",
            "git@lfs.example:remote.git",
            "copy",
            "--",
            "-q",
        ],
        &[("GIT_SSH_COMMAND", ssh)],
    )
}

/// What an SSH server's `git-lfs-authenticate` answers for the LFS server at `lfs_url`: its
/// URL, and the write token as a Basic `Authorization` for an hour.
fn authenticate_answer(lfs_url: &str) -> String {
    let basic = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("git:{WRITE_TOKEN}"))
    };
    format!(
        r#"{{"href":"{lfs_url}","header":{{"Authorization":"Basic {basic}"}},"expires_in":3600}}"#
    )
}

/// A fake `ssh` for `GIT_SSH_COMMAND`: logs each command line to `<root>/ssh.log`; answers
/// `git-lfs-authenticate` with `answer`; says git-lfs-transfer does not exist; runs anything
/// else (git-upload-pack) in `root`, so that git clones "over SSH" from `root`. `-G` (git's
/// probe for OpenSSH) fails, so git takes it for the simple variant.
fn fake_ssh(root: &Path, answer: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = root.join("fake-ssh");
    let quoted = answer.replace('\'', r"'\''");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n[ \"$1\" = -G ] && exit 1\nfor a; do last=$a; done\n\
             echo \"$*\" >> '{root}/ssh.log'\n\
             case \"$last\" in\n\
             git-lfs-authenticate*) printf '%s\\n' '{quoted}';;\n\
             git-lfs-transfer*) echo 'git-lfs-transfer: command not found' >&2; exit 127;;\n\
             *) cd '{root}' && exec sh -c \"$last\";;\n\
             esac\n",
            root = root.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[needs(git_lfs)]
#[test]
fn ssh_remotes_authenticate_with_git_lfs_authenticate() {
    // Short-lived CAS tokens: every agent refreshes its token before its first request, with
    // the credential git-lfs-authenticate gives (the machine has no other).
    let s = common::server::start_with(|c| c.token_ttl = std::time::Duration::from_secs(20));
    let (pusher, work, files) = pushed(s.url());
    // The remote's LFS URL must come from SSH: no .lfsconfig in the history that is cloned.
    let lfs_url = format!("{}/team/fetch.git/info/lfs", s.url());
    pusher.git(&work, &["config", "lfs.url", &lfs_url]);
    pusher.git(&work, &["rm", "-q", ".lfsconfig"]);
    pusher.git(&work, &["commit", "-q", "-m", "no lfsconfig"]);
    pusher.git(&work, &["push", "-q", "origin", "main"]);

    let env = GitEnv::new();
    let out = env.run_in(env.path(), "git", &["xet", "install", "--global"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let ssh = fake_ssh(pusher.path(), &authenticate_answer(&lfs_url));
    let ssh = ssh.to_str().unwrap();
    let out = clone_over_ssh(&env, ssh);
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), env.agent_log());
    assert!(!out.stderr.contains("git lfs fetch"), "{}", out.stderr);
    assert!(!out.all().contains(WRITE_TOKEN), "{}", out.all());
    let copy = env.path().join("copy");
    for (name, bytes) in &files {
        assert!(std::fs::read(copy.join(name)).unwrap() == *bytes, "{name}");
    }
    assert_eq!(downloads(&env, &copy), files.len(), "{}", env.agent_log());
    let log = std::fs::read_to_string(pusher.path().join("ssh.log")).unwrap();
    let asked = log
        .lines()
        .filter(|l| l.ends_with("git-lfs-authenticate remote.git download"))
        .count();
    // Once for the batch request, and again for the token refreshes.
    assert!(asked >= 2, "{log}");
    // git's SSH program with the host and the one remote command (no port in the URL).
    assert!(
        log.lines()
            .filter(|l| l.contains("git-lfs-authenticate"))
            .all(|l| l == "git@lfs.example git-lfs-authenticate remote.git download"),
        "{log}"
    );

    // An SSH server that refuses: the clone still succeeds through `git lfs fetch`, which
    // says why it cannot authenticate either; git-xet says what failed.
    let fail = GitEnv::new();
    let out = fail.run_in(fail.path(), "git", &["xet", "install", "--global"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let broken = fail.path().join("broken-ssh");
    std::fs::write(
        &broken,
        format!(
            "#!/bin/sh\n[ \"$1\" = -G ] && exit 1\nfor a; do last=$a; done\n\
             case \"$last\" in\ngit-lfs-*) echo 'Permission denied (publickey).' >&2; exit 255;;\n\
             *) cd '{}' && exec sh -c \"$last\";;\nesac\n",
            pusher.path().display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = clone_over_ssh(&fail, broken.to_str().unwrap());
    assert!(
        out.stderr.contains("git-lfs-authenticate") && out.stderr.contains("Permission denied"),
        "{}",
        out.all()
    );
    assert!(
        out.stderr.contains("fetching with `git lfs fetch`"),
        "{}",
        out.all()
    );
}

/// An SSH LFS URL given only in the committed `.lfsconfig` (the remote itself a plain path):
/// git-xet asks `git-lfs-authenticate` as git-lfs does, and fetches in its own process.
#[needs(git_lfs)]
#[test]
fn an_ssh_lfs_url_in_lfsconfig_authenticates_with_git_lfs_authenticate() {
    let s = common::server::start();
    let (pusher, work, files) = pushed(s.url());
    let lfs_url = format!("{}/team/fetch.git/info/lfs", s.url());
    std::fs::write(
        work.join(".lfsconfig"),
        "[lfs]\n\turl = ssh://git@lfs.example/team/fetch.git\n",
    )
    .unwrap();
    pusher.git(&work, &["commit", "-q", "-am", "LFS over SSH"]);
    // Without git-lfs's hook, which would ask the SSH host this machine does not have.
    pusher.git(&work, &["push", "-q", "--no-verify", "origin", "main"]);

    let env = GitEnv::new();
    let out = env.run_in(env.path(), "git", &["xet", "install", "--global"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let ssh = fake_ssh(pusher.path(), &authenticate_answer(&lfs_url));
    let remote = pusher.path().join("remote.git");
    let out = env.run_with(
        env.path(),
        "git",
        &["xet", "clone", remote.to_str().unwrap(), "copy", "--", "-q"],
        &[("GIT_SSH_COMMAND", ssh.to_str().unwrap())],
    );
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), env.agent_log());
    assert!(!out.stderr.contains("git lfs fetch"), "{}", out.stderr);
    let copy = env.path().join("copy");
    for (name, bytes) in &files {
        assert!(std::fs::read(copy.join(name)).unwrap() == *bytes, "{name}");
    }
    assert_eq!(downloads(&env, &copy), files.len(), "{}", env.agent_log());
    let log = std::fs::read_to_string(pusher.path().join("ssh.log")).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l == "git@lfs.example git-lfs-authenticate /team/fetch.git download"),
        "{log}"
    );
}

#[needs(git_lfs)]
#[test]
fn basic_access_sends_credentials_with_the_first_request() {
    use xet_client::fake_server::{reply, Fake, Seen};
    let lfs = Fake::start(|_: &Seen| reply(401, r#"{"message":"credentials needed"}"#));
    let lfs_url = format!("{}/team/r.git/info/lfs", lfs.url);
    let env = GitEnv::machine("helper-secret");
    let work = env.path().join("work");
    env.git(env.path(), &["init", "-q", "work"]);
    env.git(&work, &["config", "lfs.url", &lfs_url]);
    std::fs::write(
        work.join(".gitattributes"),
        "*.bin filter=lfs diff=lfs merge=lfs -text\n",
    )
    .unwrap();
    let pointer = format!(
        "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize 5\n",
        "a".repeat(64)
    );
    std::fs::write(work.join("x.bin"), &pointer).unwrap();
    env.git(&work, &["add", "-A"]);
    env.run_with(
        &work,
        "git",
        &["commit", "-q", "-m", "x"],
        &[("GIT_LFS_SKIP_SMUDGE", "1")],
    );
    let cat = |env: &GitEnv| {
        let out = env.run_in(&work, "git", &["xet", "cat", "x.bin"]);
        assert_ne!(out.status, Some(0), "{}", out.all());
        assert!(!out.all().contains("helper-secret"), "{}", out.all());
    };
    // By default the first request goes without credentials; the 401 brings them.
    cat(&env);
    let seen = lfs.seen();
    assert!(seen.len() >= 2, "{seen:?}");
    assert_eq!(seen[0].header("authorization"), None);
    assert!(seen[1]
        .header("authorization")
        .is_some_and(|a| a.starts_with("Basic ")));
    // `lfs.<url>.access=basic` (git-lfs sets it after its first 401): the first request is
    // authenticated, as git-lfs sends it.
    env.git(
        &work,
        &["config", &format!("lfs.{}.access", lfs.url), "basic"],
    );
    let before = lfs.seen().len();
    cat(&env);
    let seen = lfs.seen();
    assert_eq!(seen.len(), before + 1, "one request only: {seen:?}");
    assert!(
        seen[before]
            .header("authorization")
            .is_some_and(|a| a.starts_with("Basic ")),
        "{:?}",
        seen[before]
    );
}

/// On a filesystem that clones files (XFS with reflink, as mkfs.xfs makes it; btrfs alike),
/// `git xet clone` and `git xet pull` write no work-tree file during the download: each is
/// cloned from its object once the object is in place, so its blocks are the object's and the
/// download writes every byte once. The work tree, the store, `git lfs fsck` and git's view of
/// the tree are as everywhere else.
#[needs(git_lfs, xfs_loop)]
#[test]
fn where_files_can_be_cloned_the_work_tree_shares_the_objects_blocks() {
    use common::loop_fs::LoopXfs;
    let s = common::server::start();
    let (pusher, work, files) = pushed(s.url());
    let remote = pusher.path().join("remote.git");
    let xfs = LoopXfs::mount(300);
    let repo = xfs.path().join("ours");

    let ours = machine();
    let out = ours.run_in(
        ours.path(),
        "git",
        &[
            "xet",
            "clone",
            remote.to_str().unwrap(),
            repo.to_str().unwrap(),
            "--",
            "-q",
        ],
    );
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), ours.agent_log());
    for (name, bytes) in &files {
        assert!(
            std::fs::read(repo.join(name)).unwrap() == *bytes,
            "{name} checked out"
        );
    }
    // The last checkout cloned `n` files (and wrote none as downloaded), model.bin shares its
    // object's blocks, and the repository is as git-lfs and git expect.
    let cloned = |n: usize| {
        let log = ours.agent_log();
        assert_eq!(checked_out(&log), (n, 0, n), "{log}");
        assert!(LoopXfs::all_shared(&repo.join("model.bin")));
        fsck(&ours, &repo);
        clean_by_stat(&ours, &repo);
    };
    cloned(4);

    // A new version: pulled, and its file cloned from the new object.
    let v2 = push_new_model(&pusher, &work, &files[0].1, MIB, 86);
    let out = ours.run_in(&repo, "git", &["xet", "pull", "--", "-q"]);
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), ours.agent_log());
    assert!(std::fs::read(repo.join("model.bin")).unwrap() == v2);
    cloned(1);
    // Nothing left beside the files (the probe's file, a work-tree file being written).
    let hidden: Vec<String> = std::fs::read_dir(&repo)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".git-xet"))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");
}

/// `lfs.fetchexclude` in the committed `.lfsconfig`: `git xet clone` leaves the excluded file a
/// pointer and its object unfetched, as plain `git clone` (git-lfs's smudge filter) does; the
/// work tree and the store are the same.
#[needs(git_lfs)]
#[test]
fn fetch_exclude_in_lfsconfig_is_applied_as_git_lfs_applies_it() {
    let s = common::server::start();
    let (pusher, work, files) = pushed(s.url());
    pusher.git(
        &work,
        &["config", "-f", ".lfsconfig", "lfs.fetchexclude", "data"],
    );
    pusher.git(&work, &["commit", "-q", "-am", "no data by default"]);
    pusher.git(&work, &["push", "-q", "origin", "main"]);
    let remote = pusher.path().join("remote.git");

    let (_plain, plain_repo, ours, ours_repo, out) = plain_and_xet_clones(&remote);
    assert!(
        out.stderr.contains("lfs.fetchexclude is set"),
        "{}",
        out.stderr
    );
    let table = std::fs::read(ours_repo.join("data/table.bin")).unwrap();
    assert!(
        table.starts_with(b"version https://git-lfs"),
        "the excluded file is checked out as its pointer"
    );
    for (name, bytes) in files.iter().filter(|(n, _)| n != "data/table.bin") {
        assert!(
            std::fs::read(ours_repo.join(name)).unwrap() == *bytes,
            "{name} checked out"
        );
    }
    assert_eq!(store(&ours_repo), store(&plain_repo), "the same LFS store");
    assert!(
        work_tree(&ours_repo) == work_tree(&plain_repo),
        "the same work tree"
    );
    let status = ours.git(&ours_repo, &["status", "--porcelain"]);
    assert_eq!(status.stdout.trim(), "", "{}", status.all());
}

/// `git xet clone … -- --recurse-submodules`: the submodules are checked out too, and their LFS
/// files fetched and written as the clone's own (git clone without a checkout leaves them out).
#[needs(git_lfs)]
#[test]
fn xet_clone_with_submodules_checks_out_their_lfs_files() {
    let s = common::server::start();
    let (pusher, work, files) = pushed(s.url());
    let remote = pusher.path().join("remote.git");
    // A superproject whose one submodule is that repository.
    let superproject = pusher.path().join("super");
    pusher.git(pusher.path(), &["init", "-q", "super"]);
    pusher.git(
        &superproject,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            remote.to_str().unwrap(),
            "models",
        ],
    );
    // Its own LFS server named as for the submodule (a repository on this machine needs one).
    std::fs::copy(work.join(".lfsconfig"), superproject.join(".lfsconfig")).unwrap();
    pusher.git(&superproject, &["add", ".lfsconfig"]);
    pusher.git(&superproject, &["commit", "-q", "-m", "models"]);

    let ours = machine();
    ours.git(
        &ours.home(),
        &["config", "--global", "protocol.file.allow", "always"],
    );
    let out = ours.run_in(
        ours.path(),
        "git",
        &[
            "xet",
            "clone",
            superproject.to_str().unwrap(),
            "copy",
            "--",
            "-q",
            "--recurse-submodules",
        ],
    );
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), ours.agent_log());
    let sub = ours.path().join("copy/models");
    for (name, bytes) in &files {
        assert!(
            std::fs::read(sub.join(name)).unwrap_or_default() == *bytes,
            "models/{name} checked out"
        );
    }
    // Fetched by git-xet in its process (the submodule's own fetch, after the superproject's).
    let log = ours.agent_log();
    assert!(
        log.lines()
            .any(|l| l.contains("LFS files fetched fetched=4 ")),
        "{log}"
    );
    fsck(&ours, &sub);
    clean_by_stat(&ours, &sub);
    let status = ours.git(&ours.path().join("copy"), &["status", "--porcelain"]);
    assert_eq!(status.stdout.trim(), "", "{}", status.all());

    // A new version of the submodule's model, and the superproject moved to it: `git xet pull
    // -- --recurse-submodules` writes it.
    let v2 = push_new_model(&pusher, &work, &files[0].1, MIB, 87);
    pusher.git(
        &superproject.join("models"),
        &["pull", "-q", "origin", "main"],
    );
    pusher.git(&superproject, &["commit", "-q", "-am", "models v2"]);
    let copy = ours.path().join("copy");
    let out = ours.run_in(
        &copy,
        "git",
        &["xet", "pull", "--", "-q", "--recurse-submodules"],
    );
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), ours.agent_log());
    assert!(std::fs::read(sub.join("model.bin")).unwrap() == v2);
    fsck(&ours, &sub);
    clean_by_stat(&ours, &sub);
    let status = ours.git(&copy, &["status", "--porcelain"]);
    assert_eq!(status.stdout.trim(), "", "{}", status.all());
}
