//! A global-dedup hit reveals the neighbourhood: the answer lists every xorb of the file that
//! holds the chunk, so an uploader with no local shard cache (a fresh clone, a plain-LFS push
//! through the server's basic-transfer bridge) deduplicates an edited copy against the whole
//! file. Byte counts come from the server's store and the agent's journal.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use common::git::{dir_bytes, GitEnv};
use common::server::WRITE_TOKEN;
use xet_client::pipeline::upload::{upload, UploadOptions};
use xet_format::xorb::XorbLimits;
use xet_store::Store;

/// `data` with `len` bytes changed at `at`.
fn edited(data: &[u8], at: usize, len: usize) -> Vec<u8> {
    let mut e = data.to_vec();
    for b in &mut e[at..at + len] {
        *b = b.wrapping_add(0x3d);
    }
    e
}

#[test]
fn a_dedup_answer_lists_every_xorb_of_the_file_in_order_from_the_hit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let data = common::splitmix64(91, 3 << 20);
    // Small xorbs (8 chunks each): the file spans several.
    let options = UploadOptions {
        limits: XorbLimits {
            max_chunks: 8,
            ..XorbLimits::CLIENT
        },
        global_dedup: false,
        ..UploadOptions::default()
    };
    let summary = upload(&store, &data[..], &options).unwrap();
    let record = store.file(&summary.file_hash).unwrap().unwrap();
    let mut order = Vec::new();
    for t in &record.terms {
        if !order.contains(&t.xorb) {
            order.push(t.xorb);
        }
    }
    assert!(order.len() >= 4, "{} xorbs", order.len());
    let first = store.footer(&order[0]).unwrap().unwrap().chunk_hashes[0];
    let answer = store
        .dedup_shard(&first)
        .unwrap()
        .expect("the first chunk is indexed");
    let listed: Vec<_> = answer.xorbs.iter().map(|x| x.hash).collect();
    assert_eq!(listed, order, "the whole file, in order");
    assert!(answer.files.is_empty());
}

/// Pushes `original` through the agent (negotiated mode), then from a fresh clone (an empty
/// shard cache) pushes it edited; returns the bytes the store grew by and the bytes the agent
/// sent for the edit.
#[needs(git_lfs)]
#[test]
fn a_fresh_clone_editing_one_mib_sends_under_3_mb() {
    let server = common::server::start();
    let env = GitEnv::new();
    let lfs_url = format!("{}/team/repo.git/info/lfs", server.url());
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    // 100 MiB: two client xorbs, the edit in the first.
    let original = common::splitmix64(92, 100 << 20);
    std::fs::write(work.join("model.bin"), &original).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "v1"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let before = dir_bytes(&server.store_dir().join("xorbs"));

    // Another machine: a fresh clone and an empty shard cache.
    let mut other = GitEnv::new();
    other.vars.push((
        "GIT_XET_CACHE_DIR".into(),
        other.path().join("empty-cache").display().to_string(),
    ));
    std::fs::rename(
        env.path().join("remote.git"),
        other.path().join("remote.git"),
    )
    .unwrap();
    other.credential_helper(WRITE_TOKEN);
    let out = other.run_in(other.path(), "git", &["xet", "install", "--global"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    other.git(other.path(), &["clone", "-q", "remote.git", "clone"]);
    let clone = other.path().join("clone");
    let changed = edited(&original, 10 << 20, 1 << 20);
    std::fs::write(clone.join("model.bin"), &changed).unwrap();
    other.git(&clone, &["commit", "-q", "-am", "edit 1 MiB"]);
    other.git(&clone, &["push", "-q", "origin", "main"]);
    let grown = dir_bytes(&server.store_dir().join("xorbs")) - before;
    eprintln!("fresh-clone edit of 1 MiB in 100 MiB: store grew {grown} bytes");
    assert!(grown < 3_000_000, "the store grew {grown} bytes");
    let journal = std::fs::read_to_string(clone.join(".git/xet/transfers.jsonl")).unwrap();
    let sent: u64 = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["direction"] == "upload")
        .map(|r| r["transferred_bytes"].as_u64().unwrap())
        .sum();
    eprintln!("fresh-clone edit: the agent sent {sent} bytes");
    assert!(sent < 3_000_000, "sent {sent} bytes");
}

/// The same edit pushed by plain git-lfs (basic transfers, no agent): the server's bridge
/// deduplicates it against the stored file.
#[needs(git_lfs)]
#[test]
fn a_plain_lfs_push_of_a_one_mib_edit_stores_under_3_mb() {
    let server = common::server::start();
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    let lfs_url = format!("{}/team/plain.git/info/lfs", server.url());
    std::fs::write(
        work.join(".lfsconfig"),
        format!("[lfs]\n\turl = {lfs_url}\n"),
    )
    .unwrap();
    let original = common::splitmix64(93, 100 << 20);
    std::fs::write(work.join("model.bin"), &original).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "v1"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let before = dir_bytes(&server.store_dir().join("xorbs"));
    let changed = edited(&original, 70 << 20, 1 << 20);
    std::fs::write(work.join("model.bin"), &changed).unwrap();
    env.git(&work, &["commit", "-q", "-am", "edit 1 MiB"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let grown = dir_bytes(&server.store_dir().join("xorbs")) - before;
    eprintln!("plain-LFS edit of 1 MiB in 100 MiB: store grew {grown} bytes");
    assert!(grown < 3_000_000, "the store grew {grown} bytes");
}

#[test]
fn an_edit_at_the_start_of_a_file_is_found_by_probes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let original = common::splitmix64(93, 24 << 20);
    let first = upload(&store, &original[..], &UploadOptions::default()).unwrap();
    assert!(first.uploaded_bytes > 24 << 20);

    // A rewritten header (the first 100 bytes), and 1 KiB inserted before everything else:
    // the first chunk is new, the next ones are the original's.
    let mut header = original.clone();
    for b in &mut header[..100] {
        *b ^= 0x5a;
    }
    let inserted: Vec<u8> = common::splitmix64(94, 1024)
        .into_iter()
        .chain(original.iter().copied())
        .collect();
    for (what, data) in [("header", &header), ("insertion", &inserted)] {
        let s = upload(&store, &data[..], &UploadOptions::default()).unwrap();
        assert!(
            s.uploaded_bytes < 300 << 10,
            "{what}: sent {} bytes of a {} byte file",
            s.uploaded_bytes,
            data.len()
        );
        // The first chunk, then a probe or two (a file-start probe, or a dense key of the
        // first block asked ahead: an eligible one is not counted as a probe).
        eprintln!("{what}: {s:?}");
        assert!(
            s.probe_queries <= 2 && (2..=3).contains(&s.dedup_queries),
            "{what}: {} queries, {} probes",
            s.dedup_queries,
            s.probe_queries
        );
    }

    // A new, unrelated file: every file-start probe asked, then the run's dense keys (the
    // store indexes them) until they thin out, and nothing found.
    let unrelated = common::splitmix64(95, 24 << 20);
    let s = upload(&store, &unrelated[..], &UploadOptions::default()).unwrap();
    let dense = unrelated_dense_keys(&unrelated);
    assert_eq!(
        s.probe_queries,
        xet_format::dedup::MAX_PROBES as u64 + dense,
        "every probe asked"
    );
    assert_eq!(s.dedup_chunks, 0);
    // A small file (its size declared, as the agent does) is not probed.
    let small = common::splitmix64(96, 600 << 10);
    let options = UploadOptions {
        expected_size: Some(small.len() as u64),
        ..UploadOptions::default()
    };
    let s = upload(&store, &small[..], &options).unwrap();
    assert_eq!(s.probe_queries, 0);
}

/// The dense keys of `data` that are not also a file-start probe or eligible (asked about
/// anyway): the run probes of a new file smaller than a run's first thinning.
fn unrelated_dense_keys(data: &[u8]) -> u64 {
    let mut start = 0usize;
    let mut n = 0;
    for (i, end) in xet_format::chunking::chunk_boundaries(data)
        .into_iter()
        .enumerate()
    {
        let h = xet_format::ChunkHash::of(&data[start..end]);
        let probe = xet_format::dedup::is_probe(i, start as u64, end as u64);
        if xet_format::dedup::is_dense_key(&h) && !probe && !h.is_global_dedup_eligible() {
            n += 1;
        }
        start = end;
    }
    n
}
