//! The agent in standalone mode with the embedded store (a local directory endpoint), driven by
//! real git and git-lfs: push, clone, edit, pull and fetch; many files with concurrent agent
//! processes sharing the store, the small ones gathered into packs; a damaged xorb failing a
//! pull cleanly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::path::Path;
use xet_test_tools::needs;

use crate::common;

use common::git::{count_files, dir_bytes, GitEnv};

fn lfs_objects(repo: &Path) -> usize {
    count_files(&repo.join(".git/lfs/objects"))
}

/// A clone of `remote.git` whose `git lfs pull` gave every one of `files` (name, bytes): its
/// path.
fn clone_and_pull(env: &GitEnv, files: &[(String, Vec<u8>)]) -> std::path::PathBuf {
    env.clone_skip_smudge("remote.git", "clone");
    let clone = env.path().join("clone");
    env.git(&clone, &["lfs", "pull"]);
    for (name, data) in files {
        assert!(
            std::fs::read(clone.join(name)).unwrap() == *data,
            "{name} differs after the pull"
        );
    }
    clone
}

/// `n` files `small/000.bin`… of `least` to `least + spread` bytes of data from `seed`.
fn small_files(n: u64, seed: u64, least: u64, spread: u64) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let len = least + (i * 7919) % spread;
            (
                format!("small/{i:03}.bin"),
                common::splitmix64(seed + i, len as usize),
            )
        })
        .collect()
}

#[needs(git_lfs)]
#[test]
fn push_clone_edit_pull_and_fetch_through_the_embedded_store() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    env.standalone_world(&store, 8);
    let work = env.path().join("work");

    let big = common::splitmix64(21, 6 << 20);
    let small = common::splitmix64(22, 5000);
    std::fs::write(work.join("big.bin"), &big).unwrap();
    std::fs::write(work.join("small.bin"), &small).unwrap();
    std::fs::write(work.join("empty.bin"), b"").unwrap();
    std::fs::write(work.join("README.md"), "plain\n").unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "first"]);
    let push = env.git(&work, &["push", "-q", "origin", "main"]);
    assert!(
        !push.all().to_lowercase().contains("error"),
        "{}",
        push.all()
    );
    let log = env.agent_log();
    assert!(
        log.contains("uploaded"),
        "the agent did the uploads:\n{log}"
    );
    assert!(
        !log.contains('\x1b'),
        "no colour codes in the log file:\n{log:?}"
    );
    let after_first = dir_bytes(&store.join("xorbs"));
    assert!(after_first > 0, "xorbs were stored in {}", store.display());
    assert!(
        after_first < (big.len() + small.len()) as u64 + 65536,
        "random data is stored about once: {after_first} bytes"
    );

    // A fresh clone smudges through the agent.
    env.git(env.path(), &["clone", "-q", "remote.git", "clone"]);
    let clone = env.path().join("clone");
    assert!(
        std::fs::read(clone.join("big.bin")).unwrap() == big,
        "big.bin differs"
    );
    assert_eq!(std::fs::read(clone.join("small.bin")).unwrap(), small);
    assert_eq!(std::fs::read(clone.join("empty.bin")).unwrap(), b"");
    let journal = std::fs::read_to_string(clone.join(".git/xet/transfers.jsonl")).unwrap();
    assert!(journal.contains("\"download\""), "{journal}");

    // Edit 64 bytes in the middle: the second push stores only the chunks around the edit.
    let mut edited = big.clone();
    for b in &mut edited[3 << 20..(3 << 20) + 64] {
        *b = !*b;
    }
    std::fs::write(work.join("big.bin"), &edited).unwrap();
    env.git(&work, &["commit", "-q", "-am", "edit"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let grown = dir_bytes(&store.join("xorbs")) - after_first;
    eprintln!(
        "edited push of a {} byte file stored {grown} new bytes",
        edited.len()
    );
    assert!(
        grown * 16 < edited.len() as u64,
        "the store grew by {grown} bytes for a 64-byte edit"
    );
    let journal = std::fs::read_to_string(work.join(".git/xet/transfers.jsonl")).unwrap();
    let edited_oid = common::sha256_hex(&edited);
    let record = journal
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["oid"] == edited_oid.as_str())
        .expect("the edited file's upload is in the journal");
    assert!(
        record["dedup_bytes"].as_u64().unwrap() * 10 > edited.len() as u64 * 9,
        "most of the edited file was deduplicated: {record}"
    );

    // Pull brings the edit; fetch --all gets every version into a skip-smudge clone.
    env.git(&clone, &["pull", "-q", "--ff-only"]);
    assert!(std::fs::read(clone.join("big.bin")).unwrap() == edited);
    let lazy = env.path().join("lazy");
    env.clone_skip_smudge("remote.git", "lazy");
    assert_eq!(lfs_objects(&lazy), 0);
    env.git(&lazy, &["lfs", "fetch", "--all"]);
    assert_eq!(
        lfs_objects(&lazy),
        3,
        "big (two versions) and small; the empty file has no object"
    );
    env.git(&lazy, &["lfs", "checkout"]);
    assert!(std::fs::read(lazy.join("big.bin")).unwrap() == edited);
    let fsck = env.git(&lazy, &["lfs", "fsck"]);
    assert!(fsck.stdout.contains("OK"), "{}", fsck.stdout);
}

#[needs(git_lfs)]
#[test]
fn two_hundred_small_files_and_large_ones_with_eight_agents() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    env.standalone_world(&store, 8);
    let work = env.path().join("work");
    let mut files = small_files(200, 1000, 50, 20_000);
    for i in 0..3u64 {
        files.push((
            format!("large-{i}.bin"),
            common::splitmix64(2000 + i, 3 << 20),
        ));
    }
    std::fs::create_dir_all(work.join("small")).unwrap();
    for (name, data) in &files {
        std::fs::write(work.join(name), data).unwrap();
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "many"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let log = env.agent_log();
    let trouble: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    // Every object was uploaded, once, as the transfer journal records (git-lfs may hand an
    // object to a second agent after a failed attempt; the warnings say why).
    let records = env.journal(&work);
    let uploaded = env.uploaded_oids(&work);
    let expected: std::collections::BTreeSet<String> =
        files.iter().map(|(_, d)| common::sha256_hex(d)).collect();
    assert!(
        uploaded == expected,
        "{} of {} objects uploaded; warnings and errors:\n{}",
        uploaded.len(),
        files.len(),
        trouble.join("\n")
    );
    if records.len() != files.len() {
        eprintln!("some objects were uploaded twice:\n{}", trouble.join("\n"));
    }
    // The small objects went up in packs the agents gathered: fewer shards than files.
    let shards = count_files(&store.join("shards"));
    let packs = log.matches("uploaded a pack").count();
    eprintln!(
        "{shards} shards, {packs} gathered packs for {} files",
        files.len()
    );
    assert!(packs >= 1 && shards < 200, "{shards} shards\n{log}");
    // Nothing is left behind but the queue's lock file (no round's lock, no note of which
    // round took an object, no mark).
    let left: Vec<String> = std::fs::read_dir(work.join(".git/lfs/tmp/xet-packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock") || n.contains("-round-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // `xet.packUploads false`: each small object goes up on its own.
    env.git(&work, &["config", "xet.packUploads", "false"]);
    for i in 0..6u64 {
        let data = common::splitmix64(3000 + i, 2000 + i as usize * 100);
        std::fs::write(work.join(format!("small/t{i}.bin")), &data).unwrap();
        files.push((format!("small/t{i}.bin"), data));
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "six more"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    assert_eq!(
        count_files(&store.join("shards")),
        shards + 6,
        "one shard per object"
    );
    assert_eq!(env.agent_log().matches("uploaded a pack").count(), packs);

    let clone = clone_and_pull(&env, &files);
    assert_eq!(lfs_objects(&clone), files.len());
}

#[needs(git_lfs)]
#[test]
fn with_git_xets_hook_a_pushs_small_files_go_up_ahead_in_packs() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    let work = env.standalone_world(&store, 8);
    // The repository's own install writes git-xet's pre-push hook (git-lfs's, which `git lfs
    // track` wrote, runs after it).
    env.install_local(&work, store.to_str().unwrap());
    // 100 bytes to 10 KB each: packs are cut at 64 files before their 1 MiB of bytes.
    let mut files = small_files(150, 5000, 100, 10_000);
    files.push(("large.bin".to_string(), common::splitmix64(6000, 3 << 20)));
    std::fs::create_dir_all(work.join("small")).unwrap();
    for (name, data) in &files {
        std::fs::write(work.join(name), data).unwrap();
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "many"]);
    let push = env.run_in(&work, "git", &["push", "origin", "main"]);
    assert_eq!(push.status, Some(0), "{}", push.all());

    let log = env.agent_log();
    // The hook's step uploaded the 150 small files in three packs (64, 64, 22) before git-lfs
    // started; the agents git-lfs handed them to found them registered; the large file went up
    // on its own.
    assert!(
        log.contains("small objects uploaded ahead of git-lfs") && log.contains("registered=150"),
        "{log}"
    );
    assert_eq!(log.matches("uploaded a pack").count(), 3, "{log}");
    assert_eq!(count_files(&store.join("shards")), 4, "{log}");
    // Every object is in the journal once, and the push's summary counts each once.
    let uploaded = env.uploaded_oids(&work);
    let expected: std::collections::BTreeSet<String> =
        files.iter().map(|(_, d)| common::sha256_hex(d)).collect();
    assert_eq!(uploaded, expected);
    assert_eq!(env.journal(&work).len(), files.len());
    assert!(push.all().contains("pushed 151 objects"), "{}", push.all());
    assert!(
        push.all()
            .contains("git-xet: 150 small LFS files sent in packs ahead of git-lfs"),
        "{}",
        push.all()
    );
    // No mark is left for a later push to trust.
    let left: Vec<String> = std::fs::read_dir(work.join(".git/lfs/tmp/xet-packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ok") || n.ends_with(".taken"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // A second push of new files and an unchanged one: only the new ones go up.
    for i in 0..20u64 {
        let data = common::splitmix64(7000 + i, 3000 + i as usize);
        std::fs::write(work.join(format!("small/n{i:02}.bin")), &data).unwrap();
        files.push((format!("small/n{i:02}.bin"), data));
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "twenty more"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    assert!(env.agent_log().contains("registered=20"));
    assert_eq!(count_files(&store.join("shards")), 5);

    let clone = clone_and_pull(&env, &files);
    let fsck = env.git(&clone, &["lfs", "fsck"]);
    assert!(fsck.stdout.contains("OK"), "{}", fsck.stdout);
}

#[needs(git_lfs)]
#[test]
fn a_damaged_xorb_fails_the_pull_clearly_and_stores_nothing() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    env.standalone_world(&store, 2);
    let work = env.path().join("work");
    let data = common::splitmix64(31, 1 << 20);
    std::fs::write(work.join("data.bin"), &data).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "data"]);
    env.git(&work, &["push", "-q", "origin", "main"]);

    // Flip bytes in the middle of every stored xorb.
    let mut damaged = 0;
    for entry in walk(&store.join("xorbs")) {
        let mut bytes = std::fs::read(&entry).unwrap();
        let mid = bytes.len() / 2;
        for b in &mut bytes[mid..mid + 16] {
            *b ^= 0x5a;
        }
        std::fs::write(&entry, bytes).unwrap();
        damaged += 1;
    }
    assert!(damaged > 0);

    env.clone_skip_smudge("remote.git", "clone");
    let clone = env.path().join("clone");
    let pull = env.run_in(&clone, "git", &["lfs", "pull"]);
    assert_ne!(pull.status, Some(0), "the pull must fail: {}", pull.all());
    let text = pull.all();
    assert!(
        text.contains("damaged") && text.contains("[2]") && !text.contains("inconsistent"),
        "the error names the damage: {text}"
    );
    assert_eq!(lfs_objects(&clone), 0, "nothing reached .git/lfs/objects");
    assert_eq!(
        count_files(&clone.join(".git/lfs/tmp")),
        0,
        "no temp file is left behind"
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[needs(git_lfs)]
#[test]
fn demo_round_trips_and_reports_a_small_second_push() {
    let env = GitEnv::new();
    let out = env.run_in(env.path(), "git", &["xet", "demo", "--size", "8"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(
        out.stdout.contains("identical to the pushed file"),
        "{}",
        out.stdout
    );
    let ratio = |label: &str| -> f64 {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} row: {}", out.stdout));
        line.trim_end_matches('%')
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    // It ends with how to use git-xet on a real repository, not with what install.sh just ran.
    assert!(
        !out.stdout.contains("Set it up for your repositories"),
        "{}",
        out.stdout
    );
    for step in [
        "git xet serve --data",
        "lfs.url",
        "--endpoint",
        "git xet status",
    ] {
        assert!(out.stdout.contains(step), "{step}: {}", out.stdout);
    }
    let first = ratio("first");
    let edited = ratio("after the edit");
    assert!(first > 50.0 && first <= 100.0, "first push ratio {first}");
    assert!(edited < 30.0, "edited push ratio {edited}: {}", out.stdout);
    // The user's (here: the sandbox's) global configuration is untouched.
    let global = std::fs::read_to_string(env.home().join(".gitconfig")).unwrap();
    assert!(!global.contains("standalonetransferagent"), "{global}");
}
