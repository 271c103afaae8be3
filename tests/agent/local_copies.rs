//! Any local copy, at any depth: a pull copies every chunk some object in `.git/lfs/objects`
//! already holds, whatever version or path it came from, and a push never chunks an earlier
//! version again once its chunk list is remembered (`.git/xet/chunk-lists`). Byte counts are
//! the server's (`sent_xorb_bytes`, `received_xorb_bytes` in `/health`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};

use common::git::GitEnv;
use common::server::{TestServer, WRITE_TOKEN};

const MIB: usize = 1 << 20;
/// 24 "tensors" of 1 MiB.
const SIZE: usize = 24 * MIB;
/// What a step may move beyond the bytes it changed.
const SLACK: u64 = 3_000_000;

fn sent(s: &TestServer) -> u64 {
    s.health("sent_xorb_bytes")
}

fn received(s: &TestServer) -> u64 {
    s.health("received_xorb_bytes")
}

fn machine() -> GitEnv {
    GitEnv::machine(WRITE_TOKEN)
}

/// `data` with tensor `n` (1 MiB at `n` MiB) replaced by new bytes.
fn new_tensor(data: &[u8], n: usize, seed: u64) -> Vec<u8> {
    let mut e = data.to_vec();
    e[n * MIB..(n + 1) * MIB].copy_from_slice(&common::splitmix64(seed, MIB));
    e
}

fn oid_of(data: &[u8]) -> String {
    common::sha256_hex(data)
}

/// Where `repo` remembers the chunk list of the object of `data`.
fn list_path(repo: &Path, data: &[u8]) -> PathBuf {
    let oid = oid_of(data);
    repo.join(".git/xet/chunk-lists")
        .join(&oid[..2])
        .join(format!("{oid}-{}", data.len()))
}

fn commit(env: &GitEnv, work: &Path, message: &str) {
    env.git(work, &["add", "-A"]);
    env.git(work, &["commit", "-q", "-m", message]);
}

#[needs(git_lfs)]
#[test]
fn a_pull_six_versions_later_copies_what_a_local_copy_of_the_first_holds() {
    let s = common::server::start();
    let lfs_url = format!("{}/team/model.git/info/lfs", s.url());
    let first = machine();
    let work = first.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    let remote = first.path().join("remote.git");
    let v1 = common::splitmix64(61, SIZE);
    std::fs::write(work.join("model.bin"), &v1).unwrap();
    commit(&first, &work, "v1");
    first.git(&work, &["push", "-q", "origin", "main"]);

    // A colleague clones v1 (the agent downloads it and remembers its chunk list).
    let colleague = machine();
    let out = colleague.run_in(
        colleague.path(),
        "git",
        &["clone", "-q", remote.to_str().unwrap(), "clone"],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    let theirs = colleague.path().join("clone");
    assert!(std::fs::read(theirs.join("model.bin")).unwrap() == v1);
    assert!(
        list_path(&theirs, &v1).is_file(),
        "a download remembers the object's chunk list"
    );

    // Six versions later, each replacing one tensor, with a rename on the way.
    let mut data = v1.clone();
    let mut name = "model.bin";
    for v in 2..=7usize {
        data = new_tensor(&data, 3 * v, 600 + v as u64);
        if v == 5 {
            std::fs::remove_file(work.join(name)).unwrap();
            name = "weights.bin";
        }
        std::fs::write(work.join(name), &data).unwrap();
        commit(&first, &work, &format!("v{v}"));
    }
    first.git(&work, &["push", "-q", "origin", "main"]);
    let changed = (6 * MIB) as u64;

    // The colleague's chunk lists are gone (as when git-lfs itself placed v1): the pull hashes
    // the local object once, then copies what it holds.
    std::fs::remove_dir_all(theirs.join(".git/xet/chunk-lists")).unwrap();
    let before = sent(&s);
    colleague.git(&theirs, &["pull", "-q", "origin", "main"]);
    let down = sent(&s) - before;
    eprintln!("pull of v7 holding only v1: the server sent {down} bytes for {changed} changed");
    assert!(std::fs::read(theirs.join("weights.bin")).unwrap() == data);
    assert!(
        down <= changed + SLACK,
        "the pull moved {down} bytes for {changed} changed\n{}",
        common::git::tail(&colleague.agent_log(), 40)
    );
    let record = colleague.journal(&theirs).pop().unwrap();
    assert_eq!(record["direction"], "download");
    assert!(
        record["reused_bytes"].as_u64().unwrap() >= (SIZE - 8 * MIB) as u64,
        "the journal counts what was copied from this machine: {record}"
    );
    assert!(
        list_path(&theirs, &v1).is_file(),
        "the hashed object's list is remembered"
    );
    assert!(list_path(&theirs, &data).is_file());
}

#[needs(git_lfs)]
#[test]
fn a_push_learns_the_earlier_version_from_its_remembered_list_and_survives_a_damaged_one() {
    let s = common::server::start();
    let lfs_url = format!("{}/team/model.git/info/lfs", s.url());
    let env = machine();
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    let v0 = common::splitmix64(71, SIZE);
    std::fs::write(work.join("model.bin"), &v0).unwrap();
    commit(&env, &work, "v0");
    env.git(&work, &["push", "-q", "origin", "main"]);
    assert!(
        list_path(&work, &v0).is_file(),
        "an upload remembers the chunk list it computed"
    );

    // The next push takes v0's chunks from the list: v0 is not chunked again.
    let v1 = new_tensor(&v0, 7, 72);
    std::fs::write(work.join("model.bin"), &v1).unwrap();
    commit(&env, &work, "v1");
    let log_before = env.agent_log().len();
    let before = received(&s);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let up = received(&s) - before;
    let log = env.agent_log()[log_before..].to_string();
    assert!(up <= (MIB as u64) + SLACK, "{up} bytes\n{log}");
    assert!(
        log.contains("remembered chunk list"),
        "the earlier version came from its list\n{log}"
    );
    assert!(
        !log.contains("using an earlier version on this machine"),
        "the earlier version was hashed again\n{log}"
    );

    // A damaged list is found out, removed, and the version hashed again: nothing is lost.
    let list = list_path(&work, &v1);
    let mut bytes = std::fs::read(&list).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&list, &bytes).unwrap();
    let v2 = new_tensor(&v1, 15, 73);
    std::fs::write(work.join("model.bin"), &v2).unwrap();
    commit(&env, &work, "v2");
    let log_before = env.agent_log().len();
    let before = received(&s);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let up = received(&s) - before;
    let log = env.agent_log()[log_before..].to_string();
    assert!(up <= (MIB as u64) + SLACK, "{up} bytes\n{log}");
    assert!(log.contains("is damaged"), "{log}");
    assert!(
        log.contains("using an earlier version on this machine"),
        "{log}"
    );
    assert!(list_path(&work, &v1).is_file(), "the list is made again");

    // Everything pushed reads back whole.
    let other = machine();
    let out = other.run_in(
        other.path(),
        "git",
        &[
            "clone",
            "-q",
            env.path().join("remote.git").to_str().unwrap(),
            "check",
        ],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(std::fs::read(other.path().join("check/model.bin")).unwrap() == v2);
}
