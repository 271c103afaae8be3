//! History and the server's answers together: a push that deduplicates against an earlier
//! version of the file on this machine still asks the server about the chunks that version does
//! not cover (docs/format.md §5.5, run probes), so bytes another repository already pushed to the
//! same server are not sent again. Byte counts are the server's (`received_xorb_bytes` in
//! `/health`); what is new to the server is computed here by chunking every version.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::collections::HashSet;
use std::path::Path;

use common::git::GitEnv;
use common::server::{TestServer, WRITE_TOKEN};
use xet_format::chunking::chunk_boundaries;
use xet_format::ChunkHash;

const MIB: usize = 1 << 20;
/// What a push may send beyond the bytes that are new to the server.
const SLACK: u64 = 3_000_000;

fn received(s: &TestServer) -> u64 {
    s.health("received_xorb_bytes")
}

/// The chunks of `data`: (hash, length).
fn chunks(data: &[u8]) -> Vec<(ChunkHash, u64)> {
    let mut start = 0;
    chunk_boundaries(data)
        .into_iter()
        .map(|end| {
            let c = (ChunkHash::of(&data[start..end]), (end - start) as u64);
            start = end;
            c
        })
        .collect()
}

/// Bytes of `data`'s chunks found in none of `stored` (each new chunk counted once).
fn new_bytes(data: &[u8], stored: &[&[u8]]) -> u64 {
    let mut known: HashSet<ChunkHash> = stored
        .iter()
        .flat_map(|d| chunks(d))
        .map(|(h, _)| h)
        .collect();
    chunks(data)
        .into_iter()
        .filter(|(h, _)| known.insert(*h))
        .map(|(_, len)| len)
        .sum()
}

/// A safetensors-like file: an 8-byte length, a JSON header of `len` bytes, then `tensors`.
fn safetensors(name: &str, tensors: &[u8]) -> Vec<u8> {
    let header = format!(
        "{{\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[0,{}]}}}}",
        tensors.len() / 4,
        tensors.len()
    );
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(tensors);
    out
}

fn commit_push(env: &GitEnv, work: &Path, message: &str, branch: &str) {
    env.git(work, &["add", "-A"]);
    env.git(work, &["commit", "-q", "-m", message]);
    env.git(work, &["push", "-q", "origin", branch]);
}

#[needs(git_lfs)]
#[test]
fn tensors_another_repository_pushed_are_not_sent_again_by_a_push_with_history() {
    let s = common::server::start();

    // Repository B, on its own machine, pushes an adapter: 15 MiB of tensors.
    let b = GitEnv::new();
    let b_work = b.negotiated_work_tree(
        WRITE_TOKEN,
        &[],
        &format!("{}/team/adapter.git/info/lfs", s.url()),
    );
    b.git(&b_work, &["lfs", "track", "*.safetensors"]);
    let tensors = common::splitmix64(121, 15 * MIB);
    let adapter = safetensors("lora.weight", &tensors);
    std::fs::write(b_work.join("adapter.safetensors"), &adapter).unwrap();
    commit_push(&b, &b_work, "adapter", "main");

    // Repository A, on another machine, pushes v1 of its model.
    let a = GitEnv::new();
    let a_work = a.negotiated_work_tree(
        WRITE_TOKEN,
        &[],
        &format!("{}/team/model.git/info/lfs", s.url()),
    );
    a.git(&a_work, &["lfs", "track", "*.safetensors"]);
    let v1 = safetensors("model.weight", &common::splitmix64(122, 12 * MIB));
    std::fs::write(a_work.join("model.safetensors"), &v1).unwrap();
    commit_push(&a, &a_work, "v1", "main");

    // On a branch, A merges the adapter's tensors into its model (everything after them moves)
    // and changes a few bytes further on; v1 is in the history and on this machine.
    a.git(&a_work, &["checkout", "-q", "-b", "merged"]);
    let at = 5 * MIB + 12_345;
    let mut v2: Vec<u8> = v1[..at]
        .iter()
        .chain(tensors.iter())
        .chain(v1[at..].iter())
        .copied()
        .collect();
    let edit = v2.len() - 2 * MIB;
    for byte in &mut v2[edit..edit + 100] {
        *byte ^= 0x5a;
    }
    let new = new_bytes(&v2, &[&v1, &adapter]);
    let before = received(&s);
    std::fs::write(a_work.join("model.safetensors"), &v2).unwrap();
    commit_push(&a, &a_work, "merge the adapter", "merged");
    let sent = received(&s) - before;
    eprintln!(
        "{} byte model with 15 MiB of another repository's tensors inserted: {new} bytes new to \
         the server, the server received {sent} bytes",
        v2.len()
    );
    let uploads: Vec<_> = a
        .journal(&a_work)
        .into_iter()
        .filter(|r| r["direction"] == "upload")
        .collect();
    let last = uploads.last().unwrap();
    assert_eq!(last["oid"], common::sha256_hex(&v2));
    assert!(
        last["history_bytes"].as_u64().unwrap() > (10 * MIB) as u64,
        "deduplicated through v1 too: {last}"
    );
    assert!(
        sent <= new + SLACK,
        "the server received {sent} bytes; {new} were new to it"
    );
}
