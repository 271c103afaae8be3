//! One push, each chunk once: a push of several versions of a file (several local commits, as
//! after `git lfs migrate import`) at git-lfs's default concurrency sends about what a push with
//! one agent sends, the bytes counted by the server; and the transfer journal records what was
//! really sent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::Path;
use std::time::Instant;

use common::git::GitEnv;
use common::server::{TestServer, WRITE_TOKEN};

fn received(server: &TestServer) -> u64 {
    server.health("received_xorb_bytes")
}

fn journal_sent(repo: &Path) -> u64 {
    std::fs::read_to_string(repo.join(".git/xet/transfers.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["direction"] == "upload")
        .map(|r| r["transferred_bytes"].as_u64().unwrap())
        .sum()
}

/// Commits four versions of a 40 MiB file (each a small edit of the one before, past its first
/// chunk) and pushes them at once with `install_args`; returns (server bytes, journal bytes,
/// seconds).
fn push_four_versions(install_args: &[&str]) -> (u64, u64, f64) {
    let server = common::server::start();
    let env = GitEnv::new();
    let lfs_url = format!("{}/team/history.git/info/lfs", server.url());
    let work = env.negotiated_work_tree(WRITE_TOKEN, install_args, &lfs_url);
    let mut data = common::splitmix64(101, 40 << 20);
    for v in 0..4usize {
        if v > 0 {
            let at = (5 + 9 * v) << 20;
            for b in &mut data[at..at + (256 << 10)] {
                *b = b.wrapping_add(v as u8);
            }
        }
        std::fs::write(work.join("model.bin"), &data).unwrap();
        env.git(&work, &["add", "."]);
        env.git(&work, &["commit", "-q", "-m", &format!("v{v}")]);
    }
    let started = Instant::now();
    env.git(&work, &["push", "-q", "origin", "main"]);
    let secs = started.elapsed().as_secs_f64();
    (received(&server), journal_sent(&work), secs)
}

#[needs(git_lfs)]
#[test]
fn a_history_push_sends_each_chunk_once_at_the_default_concurrency() {
    let (one, one_journal, one_secs) = push_four_versions(&["--concurrency", "1"]);
    let (many, many_journal, many_secs) = push_four_versions(&[]);
    eprintln!(
        "four versions of 40 MiB: one agent sent {one} bytes in {one_secs:.1} s; the default \
         concurrency sent {many} bytes in {many_secs:.1} s"
    );
    assert!(
        many as f64 <= one as f64 * 1.1,
        "default concurrency sent {many} bytes, one agent {one}"
    );
    // About one version plus three edits, not four versions.
    assert!(many < 60 << 20, "{many} bytes for 160 MiB of versions");
    assert_eq!(
        one_journal, one,
        "the journal records what went over the wire"
    );
    assert_eq!(
        many_journal, many,
        "the journal records what went over the wire"
    );
}
