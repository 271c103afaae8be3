//! The transfer journal counts the bytes that crossed the wire apart from the bytes a download
//! took from this machine: a download's `transferred_bytes` add up to the xorb bytes the server
//! sent (`sent_xorb_bytes` in `/health`), an upload's to those it received
//! (`received_xorb_bytes`), and what came from the download chunk cache or an earlier version
//! on disk is `reused_bytes`. `git xet ls-files`, `git xet status` and `git xet push-summary`
//! show both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};

use common::git::GitEnv;
use common::server::{TestServer, WRITE_TOKEN};
use serde_json::Value;

const MIB: usize = 1 << 20;
const SIZE: usize = 16 * MIB;
const EDIT: usize = 256 << 10;

/// `data` with `EDIT` bytes changed at `at` MiB.
fn edited(data: &[u8], at: usize, by: u8) -> Vec<u8> {
    let mut e = data.to_vec();
    for b in &mut e[at * MIB..at * MIB + EDIT] {
        *b = b.wrapping_add(by);
    }
    e
}

/// Runs `step` and returns how many xorb bytes the server sent meanwhile.
fn sent_during(s: &TestServer, step: impl FnOnce()) -> u64 {
    let before = s.health("sent_xorb_bytes");
    step();
    s.health("sent_xorb_bytes") - before
}

/// The download records of `repo`'s journal from the `skip`-th on: (sum of
/// `transferred_bytes`, sum of `reused_bytes`, how many).
fn downloads(env: &GitEnv, repo: &Path, skip: usize) -> (u64, u64, usize) {
    let records: Vec<Value> = env
        .journal(repo)
        .into_iter()
        .filter(|r| r["direction"] == "download")
        .skip(skip)
        .collect();
    let wire = records
        .iter()
        .map(|r| {
            r["transferred_bytes"]
                .as_u64()
                .unwrap_or_else(|| panic!("{r}"))
        })
        .sum();
    // Records of versions before `reused_bytes` have none (ls-files checks it is there).
    let reused = records
        .iter()
        .map(|r| r["reused_bytes"].as_u64().unwrap_or(0))
        .sum();
    (wire, reused, records.len())
}

/// The journal's bytes on the wire must be the server's, give or take what an HTTP retry could
/// add on either side (none is expected here, and the numbers were equal when this was written).
pub(crate) fn assert_wire(what: &str, journal: u64, server: u64) {
    let slack = server / 100;
    assert!(
        journal.abs_diff(server) <= slack,
        "{what}: the journal records {journal} bytes on the wire, the server counted {server}"
    );
}

/// A second machine: git-xet installed, the server's token, a clone of `remote` without LFS
/// objects.
fn fresh_clone(remote: &Path) -> (GitEnv, PathBuf) {
    let other = GitEnv::new();
    other.credential_helper(WRITE_TOKEN);
    let out = other.run_in(other.path(), "git", &["xet", "install", "--global"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    other.clone_skip_smudge(remote.to_str().unwrap(), "clone");
    let clone = other.path().join("clone");
    (other, clone)
}

fn stdout(env: &GitEnv, dir: &Path, args: &[&str]) -> String {
    let out = env.run_in(dir, "git", args);
    assert_eq!(out.status, Some(0), "git {args:?}: {}", out.all());
    out.stdout
}

#[needs(git_lfs)]
#[test]
fn the_journal_counts_the_wire_and_what_this_machine_had_apart() {
    let server = common::server::start();
    let pusher = GitEnv::new();
    let lfs_url = format!("{}/team/split.git/info/lfs", server.url());
    let work = pusher.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    let remote = pusher.path().join("remote.git");

    // Two versions in one push.
    let v0 = common::splitmix64(77, SIZE);
    let v1 = edited(&v0, 3, 1);
    let mut commits = Vec::new();
    for (v, data) in [&v0, &v1].into_iter().enumerate() {
        std::fs::write(work.join("model.bin"), data).unwrap();
        pusher.git(&work, &["add", "."]);
        pusher.git(&work, &["commit", "-q", "-m", &format!("v{v}")]);
        commits.push(
            stdout(&pusher, &work, &["rev-parse", "HEAD"])
                .trim()
                .to_string(),
        );
    }
    let received = server.health("received_xorb_bytes");
    pusher.git(&work, &["push", "-q", "origin", "main"]);
    let received = server.health("received_xorb_bytes") - received;
    // The push's summary counts the wire as the server does.
    let summary: Value =
        serde_json::from_str(stdout(&pusher, &work, &["xet", "push-summary", "--json"]).trim())
            .unwrap();
    eprintln!("push: the server received {received} bytes; push-summary: {summary}");
    assert_wire("push", summary["sent_bytes"].as_u64().unwrap(), received);
    assert!(summary["deduplicated_bytes"].as_u64().unwrap() > (SIZE / 2) as u64);

    // Another machine fetches the newest version: everything over the wire (kept in the chunk
    // cache, since the older version may be wanted next).
    let (other, clone) = fresh_clone(&remote);
    let sent = sent_during(&server, || {
        other.git(&clone, &["lfs", "fetch", "origin", &commits[1]]);
    });
    let (wire, reused, n) = downloads(&other, &clone, 0);
    eprintln!("fetch of v1: server sent {sent}; journal: {wire} on the wire, {reused} reused");
    assert_eq!(n, 1);
    assert_wire("first fetch", wire, sent);
    assert!(sent >= SIZE as u64, "{sent}");
    assert_eq!(reused, 0);

    // Then the older version: all but the edit comes from the chunk cache.
    let sent = sent_during(&server, || {
        other.git(&clone, &["lfs", "fetch", "origin", &commits[0]]);
    });
    let (wire, reused, n) = downloads(&other, &clone, 1);
    eprintln!("fetch of v0: server sent {sent}; journal: {wire} on the wire, {reused} reused");
    assert_eq!(n, 1);
    assert!(sent < 3 * EDIT as u64, "{sent}");
    assert_wire("fetch from the chunk cache", wire, sent);
    assert!(reused >= (SIZE - 2 * EDIT) as u64, "{reused}");

    // The first person edits again; the second pulls: what v2 shares with v1 (on disk, and in
    // the chunk cache) is not fetched.
    let v2 = edited(&v1, 9, 2);
    std::fs::write(work.join("model.bin"), &v2).unwrap();
    pusher.git(&work, &["commit", "-q", "-am", "v2"]);
    pusher.git(&work, &["push", "-q", "origin", "main"]);
    let sent = sent_during(&server, || {
        other.git(&clone, &["pull", "-q", "origin", "main"]);
    });
    assert!(std::fs::read(clone.join("model.bin")).unwrap() == v2);
    let (wire, reused, n) = downloads(&other, &clone, 2);
    eprintln!("pull of v2: server sent {sent}; journal: {wire} on the wire, {reused} reused");
    assert_eq!(n, 1, "{:?}", other.journal(&clone));
    assert!(sent < 3 * EDIT as u64, "{sent}");
    assert_wire("pull", wire, sent);
    assert!(reused >= (SIZE - 2 * EDIT) as u64, "{reused}");

    // All of it adds up to what the server sent this machine.
    let (wire, reused, _) = downloads(&other, &clone, 0);
    let last = other.journal(&clone).pop().unwrap();

    // ls-files: the file's record, both numbers.
    let listing: Value =
        serde_json::from_str(&stdout(&other, &clone, &["xet", "ls-files", "--json"])).unwrap();
    let file = &listing["files"][0];
    assert_eq!(file["direction"], "download", "{listing}");
    assert_eq!(file["transferred_bytes"], last["transferred_bytes"]);
    assert_eq!(file["reused_bytes"], last["reused_bytes"]);
    let table = stdout(&other, &clone, &["xet", "ls-files", "--long"]);
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("WIRE") && header.contains("REUSED"),
        "{table}"
    );
    let row = table.lines().nth(1).unwrap();
    assert!(
        row.contains(&format!(" {} ", last["transferred_bytes"]))
            && row.contains(&format!(" {} ", last["reused_bytes"])),
        "{table}"
    );

    // status: the journal's totals.
    let status: Value = serde_json::from_str(&stdout(
        &other,
        &clone,
        &["xet", "status", "--json", "--no-network"],
    ))
    .unwrap();
    let journal = &status["repository"]["journal"];
    assert_eq!(journal["downloads"], 3, "{journal}");
    assert_eq!(journal["downloaded_bytes"], wire, "{journal}");
    assert_eq!(journal["reused_bytes"], reused, "{journal}");
    let text = stdout(&other, &clone, &["xet", "status", "--no-network"]);
    let size = xet_protocol::util::size::format_size;
    let line = format!(
        "downloaded {}, {} reused from this machine",
        size(wire),
        size(reused)
    );
    assert!(text.contains(&line), "no {line:?} in\n{text}");
}
