//! Downloads move only what is missing: chunks a clone already fetched (an earlier version of
//! the file, another agent of the same `git lfs fetch --all`) are read from the local chunk
//! cache, never fetched again, and never trusted blindly. Byte counts are the xorb bytes the
//! server answered (`sent_xorb_bytes` in `/health`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};

use common::git::GitEnv;
use common::server::{TestServer, WRITE_TOKEN};

const MIB: usize = 1 << 20;
const SIZE: usize = 16 * MIB;
const EDIT: usize = 256 << 10;

fn sent(server: &TestServer) -> u64 {
    server.health("sent_xorb_bytes")
}

/// The versions: each one edits `EDIT` bytes of the one before, at a different place.
fn versions(n: usize) -> Vec<Vec<u8>> {
    let mut data = common::splitmix64(501, SIZE);
    let mut out = Vec::new();
    for v in 0..n {
        if v > 0 {
            let at = (2 + 3 * v) * MIB;
            for b in &mut data[at..at + EDIT] {
                *b = b.wrapping_add(v as u8);
            }
        }
        out.push(data.clone());
    }
    out
}

/// Pushes each version as a commit through the agent (negotiated mode) and returns the
/// server, the pushing world (keeps the remote alive) and the commits, oldest first.
fn push_versions(data: &[Vec<u8>]) -> (TestServer, GitEnv, Vec<String>) {
    let server = common::server::start();
    let env = GitEnv::new();
    let lfs_url = format!("{}/team/versions.git/info/lfs", server.url());
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    let mut commits = Vec::new();
    for (v, bytes) in data.iter().enumerate() {
        std::fs::write(work.join("model.bin"), bytes).unwrap();
        env.git(&work, &["add", "."]);
        env.git(&work, &["commit", "-q", "-m", &format!("v{v}")]);
        let out = env.git(&work, &["rev-parse", "HEAD"]);
        commits.push(out.stdout.trim().to_string());
    }
    env.git(&work, &["push", "-q", "origin", "main"]);
    (server, env, commits)
}

/// A fresh clone on another machine (its own empty caches), without LFS objects.
fn fresh_clone(pusher: &GitEnv) -> (GitEnv, PathBuf) {
    let other = GitEnv::new();
    other.credential_helper(WRITE_TOKEN);
    let out = other.run_in(other.path(), "git", &["xet", "install", "--global"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let remote = pusher.path().join("remote.git");
    other.clone_skip_smudge(remote.to_str().unwrap(), "clone");
    let clone = other.path().join("clone");
    (other, clone)
}

/// Where git-lfs keeps the object of `data` in `repo`.
fn object_path(repo: &Path, data: &[u8]) -> PathBuf {
    use sha2::{Digest, Sha256};
    let oid = format!("{:x}", Sha256::digest(data));
    repo.join(".git/lfs/objects")
        .join(&oid[..2])
        .join(&oid[2..4])
        .join(&oid)
}

/// The LFS object of `data` in `repo`, which must be there and be `data`.
fn assert_object(repo: &Path, data: &[u8]) {
    let path = object_path(repo, data);
    let got = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(got == data, "object {} differs", path.display());
}

#[needs(git_lfs)]
#[test]
fn fetching_the_next_version_moves_only_the_changed_chunks() {
    let data = versions(2);
    let (server, env, commits) = push_versions(&data);
    let (other, clone) = fresh_clone(&env);

    let before = sent(&server);
    other.git(&clone, &["lfs", "fetch", "origin", &commits[0]]);
    let first = sent(&server) - before;
    assert_object(&clone, &data[0]);
    assert!(
        first >= SIZE as u64,
        "the first version is fetched whole: {first}"
    );

    let before = sent(&server);
    other.git(&clone, &["lfs", "fetch", "origin", &commits[1]]);
    let second = sent(&server) - before;
    assert_object(&clone, &data[1]);
    eprintln!("fetch of a {EDIT}-byte edit of {SIZE} bytes: {second} bytes from the server");
    assert!(
        second < 3 * EDIT as u64,
        "{second} bytes fetched for an edit of {EDIT}"
    );
    // What the user checks out is the new version.
    other.git(&clone, &["checkout", "-q", "main"]);
    other.git(&clone, &["lfs", "checkout"]);
    assert!(std::fs::read(clone.join("model.bin")).unwrap() == data[1]);
}

#[needs(git_lfs)]
#[test]
fn fetching_every_version_at_once_moves_each_chunk_once() {
    let data = versions(4);
    let (server, env, _) = push_versions(&data);
    let (other, clone) = fresh_clone(&env);
    let before = sent(&server);
    // git-lfs hands the four objects to parallel agents (lfs.concurrenttransfers, 8).
    other.git(&clone, &["lfs", "fetch", "--all", "origin"]);
    let moved = sent(&server) - before;
    for d in &data {
        assert_object(&clone, d);
    }
    eprintln!("fetch --all of 4 versions of {SIZE} bytes: {moved} bytes from the server");
    let limit = SIZE as u64 + 3 * 3 * EDIT as u64;
    assert!(moved < limit, "{moved} bytes fetched, more than {limit}");
}

#[needs(git_lfs)]
#[test]
fn a_damaged_chunk_cache_is_caught_and_the_download_still_right() {
    let data = versions(2);
    let (server, env, commits) = push_versions(&data);
    let (other, clone) = fresh_clone(&env);
    other.git(&clone, &["lfs", "fetch", "origin", &commits[0]]);

    // Flip payload bytes of every cached entry, leaving lengths and chunk headers intact.
    let mut damaged = 0;
    let root = other.path().join("cache").join("chunks");
    for endpoint in std::fs::read_dir(&root).unwrap().flatten() {
        for xorb in std::fs::read_dir(endpoint.path()).unwrap().flatten() {
            for entry in std::fs::read_dir(xorb.path()).unwrap().flatten() {
                if entry.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                let mut bytes = std::fs::read(entry.path()).unwrap();
                // Past the first chunk header; random data is stored uncompressed.
                for b in &mut bytes[100..200] {
                    *b ^= 0x5a;
                }
                std::fs::write(entry.path(), &bytes).unwrap();
                damaged += 1;
            }
        }
    }
    assert!(damaged > 0, "the first fetch filled the chunk cache");
    // The first version's object goes too: the second fetch would copy the unchanged chunks
    // from it (an earlier version on this machine) instead of the cache, whichever it meets
    // first, and this test is about the cache.
    assert_object(&clone, &data[0]);
    std::fs::remove_file(object_path(&clone, &data[0])).unwrap();

    let before = sent(&server);
    other.git(&clone, &["lfs", "fetch", "origin", &commits[1]]);
    assert_object(&clone, &data[1]);
    let refetched = sent(&server) - before;
    assert!(
        refetched >= SIZE as u64,
        "the damaged entries were not used: {refetched} bytes fetched again"
    );
    let log = other.agent_log();
    assert!(
        log.contains("trying again without the local chunk cache"),
        "{log}"
    );
}

/// Entries of the download chunk cache under `env`'s cache directory.
fn cache_entries(env: &GitEnv) -> usize {
    let root = env.path().join("cache").join("chunks");
    let mut n = 0;
    for endpoint in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for xorb in std::fs::read_dir(endpoint.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            for entry in std::fs::read_dir(xorb.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if !entry.file_name().to_string_lossy().starts_with('.') {
                    n += 1;
                }
            }
        }
    }
    n
}

#[needs(git_lfs)]
#[test]
fn a_download_nothing_else_will_want_is_written_once() {
    // A file with one version: its download goes to git-lfs's object store only.
    let data = versions(1);
    let (_server, env, _) = push_versions(&data);
    let (other, clone) = fresh_clone(&env);
    other.git(&clone, &["lfs", "fetch", "origin"]);
    assert_object(&clone, &data[0]);
    assert_eq!(cache_entries(&other), 0, "nothing kept in the chunk cache");

    // Two versions, the newest fetched: the older one may be fetched later, so what the
    // newest brought is kept for it.
    let data = versions(2);
    let (server, env, commits) = push_versions(&data);
    let (other, clone) = fresh_clone(&env);
    other.git(&clone, &["lfs", "fetch", "origin", &commits[1]]);
    assert_object(&clone, &data[1]);
    assert!(cache_entries(&other) > 0, "kept for the other version");
    let before = sent(&server);
    other.git(&clone, &["lfs", "fetch", "origin", &commits[0]]);
    assert_object(&clone, &data[0]);
    let moved = sent(&server) - before;
    assert!(
        moved < 3 * EDIT as u64,
        "{moved} bytes fetched for the older version"
    );
}

#[needs(git_lfs)]
#[test]
fn older_versions_are_fetched_without_reading_a_clean_checkout_of_another() {
    const DIFFERS: &str = "differs from the stored one";
    let data = versions(3);
    let (_server, env, _) = push_versions(&data);
    let other = GitEnv::new();
    other.credential_helper(WRITE_TOKEN);
    let out = other.run_in(other.path(), "git", &["xet", "install", "--global"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let remote = env.path().join("remote.git");
    let args = [
        "xet",
        "clone",
        remote.to_str().unwrap(),
        "clone",
        "--",
        "-q",
    ];
    let out = other.run_in(other.path(), "git", &args);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let clone = other.path().join("clone");
    assert!(std::fs::read(clone.join("model.bin")).unwrap() == data[2]);
    let fetch_all = || {
        let out = other.run_in(&clone, "git", &["xet", "fetch", "--all"]);
        assert_eq!(out.status, Some(0), "{}", out.all());
        for d in &data {
            assert_object(&clone, d);
        }
    };

    // The work tree holds the newest version, as git's index says: looking for earlier
    // versions of the older ones, the agent does not hash it to find it is another one.
    fetch_all();
    let log = other.agent_log();
    assert!(
        !log.contains(DIFFERS),
        "the checked-out file was read: {log}"
    );

    // Changed in place (same size): the index no longer vouches for it, so it is read, found
    // to be no earlier version, and not used; the objects still come out right.
    for d in &data[..2] {
        std::fs::remove_file(object_path(&clone, d)).unwrap();
    }
    let mut changed = data[2].clone();
    changed[SIZE / 2] ^= 0xff;
    std::fs::write(clone.join("model.bin"), &changed).unwrap();
    fetch_all();
    let log = other.agent_log();
    assert!(
        log.contains(DIFFERS),
        "the changed file was not looked at: {log}"
    );
}
