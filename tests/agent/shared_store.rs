//! Agents of one directory store share a private server (`agent::shared_server`), driven by real
//! git and git-lfs:
//!
//! - eight agents pushing many files all use one server, none waits for the store, nothing is
//!   lost, and the server stops by itself after the push (the store can be opened again);
//! - a stale announcement (a dead port) and a killed server are replaced by a new server;
//! - `GIT_XET_LOCAL_SERVER=0` opens the store in each agent, as before.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::path::Path;
use std::time::{Duration, Instant};
use xet_test_tools::needs;

use crate::common;

use common::git::GitEnv;
use xet_format::LfsOid;
use xet_store::announce::{self, Announce};
use xet_store::Store;

/// Writes `n` files of a few KiB (seeded by `seed`), commits them; their (name, bytes).
fn commit_files(env: &GitEnv, work: &Path, seed: u64, n: u64) -> Vec<(String, Vec<u8>)> {
    let files: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| {
            let len = 100 + ((seed + i) * 7919) % 30_000;
            (
                format!("f{seed}-{i:03}.bin"),
                common::splitmix64(seed * 1000 + i, len as usize),
            )
        })
        .collect();
    for (name, data) in &files {
        std::fs::write(work.join(name), data).unwrap();
    }
    env.git(work, &["add", "."]);
    env.git(work, &["commit", "-q", "-m", &format!("files {seed}")]);
    files
}

/// The URLs of the shared servers the agents used, in log order.
fn shared_urls(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("using the store's shared server"))
        .filter_map(|l| l.split("url=").nth(1))
        .map(|u| u.trim().to_string())
        .collect()
}

/// Waits until the store's server stopped (no announcement, the store opens); the store.
fn stopped(store: &Path) -> Store {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if announce::read(store).is_none() {
            if let Ok(s) = Store::open(store) {
                return s;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the shared server of {} did not stop by itself",
            store.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[needs(git_lfs)]
#[test]
fn eight_agents_share_one_server_which_stops_by_itself() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    let work = env.standalone_world(&store, 8);
    let files = commit_files(&env, &work, 1, 120);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let log = env.agent_log();
    assert_eq!(env.uploaded_oids(&work).len(), files.len(), "{log}");
    let urls = shared_urls(&log);
    assert!(urls.len() >= 2, "several agents used the server:\n{log}");
    assert!(
        urls.iter().all(|u| *u == urls[0]),
        "one server for all: {urls:?}"
    );
    assert!(
        !log.contains("waiting for another git-xet process"),
        "no agent waited for the store:\n{log}"
    );

    // It stops by itself; everything is in the store.
    let opened = stopped(&store);
    for (name, data) in &files {
        let oid = LfsOid::from_hex(&common::sha256_hex(data)).unwrap();
        assert!(
            opened.file_by_oid(&oid).unwrap().is_some(),
            "{name} is registered"
        );
    }
    drop(opened);

    // A clone gets everything back through a new server, which stops again.
    env.clone_skip_smudge("remote.git", "clone");
    let clone = env.path().join("clone");
    env.git(&clone, &["lfs", "pull"]);
    for (name, data) in &files {
        assert!(std::fs::read(clone.join(name)).unwrap() == *data, "{name}");
    }
    drop(stopped(&store));
}

#[needs(git_lfs)]
#[test]
fn a_stale_announcement_or_a_killed_server_is_replaced() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    let work = env.standalone_world(&store, 8);
    let first = commit_files(&env, &work, 2, 10);
    env.git(&work, &["push", "-q", "origin", "main"]);
    drop(stopped(&store));

    // An announcement left by a server that died: nothing answers at its port.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let stale = Announce {
        url: dead_url.clone(),
        token: "0".repeat(64),
        pid: 999_999,
    };
    announce::write(&store, &stale).unwrap();
    let second = commit_files(&env, &work, 3, 10);
    std::fs::remove_file(env.path().join("agent.log")).unwrap();
    env.git(&work, &["push", "-q", "origin", "main"]);
    let urls = shared_urls(&env.agent_log());
    assert!(!urls.is_empty() && !urls.contains(&dead_url), "{urls:?}");

    // A server killed outright (its announcement stays): the next transfer starts another.
    let running = announce::read(&store).expect("the server still runs right after a push");
    let killed = std::process::Command::new("kill")
        .args(["-9", &running.pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(Duration::from_millis(200));
    std::fs::remove_file(env.path().join("agent.log")).unwrap();
    env.clone_skip_smudge("remote.git", "clone");
    let clone = env.path().join("clone");
    env.git(&clone, &["lfs", "pull"]);
    for (name, data) in first.iter().chain(&second) {
        assert!(std::fs::read(clone.join(name)).unwrap() == *data, "{name}");
    }
    let urls = shared_urls(&env.agent_log());
    assert!(
        !urls.is_empty() && !urls.contains(&running.url),
        "a new server served the pull: {urls:?}"
    );
    drop(stopped(&store));
}

#[needs(git_lfs)]
#[test]
fn sharing_turned_off_opens_the_store_in_each_agent() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    let work = env.standalone_world(&store, 8);
    let files = commit_files(&env, &work, 4, 20);
    let out = env.run_with(
        &work,
        "git",
        &["push", "-q", "origin", "main"],
        &[("GIT_XET_LOCAL_SERVER", "0")],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    let log = env.agent_log();
    assert!(shared_urls(&log).is_empty(), "{log}");
    assert!(!store.join("local-server.json").exists());
    assert_eq!(env.uploaded_oids(&work).len(), files.len(), "{log}");
    // Nothing holds the store now.
    let opened = Store::open(&store).unwrap();
    assert_eq!(opened.counts().unwrap().files, files.len() as u64);
}

#[needs(git_lfs)]
#[test]
fn the_shared_server_checks_a_large_pushed_object_before_it_stops() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    let work = env.standalone_world(&store, 2);
    // Larger than what is checked before the shard upload is answered: the server's job
    // checks it, and the server does not stop before it has.
    let data = common::splitmix64(77, 12 << 20);
    std::fs::write(work.join("model.bin"), &data).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "model"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    assert!(
        env.agent_log().contains("sha256_computed=false"),
        "{}",
        env.agent_log()
    );
    let opened = stopped(&store);
    let oid = LfsOid::from_hex(&common::sha256_hex(&data)).unwrap();
    assert!(opened.oid_checked(&oid).unwrap(), "the oid was checked");
    assert!(opened.claim_uploaders().unwrap().is_empty());
}
