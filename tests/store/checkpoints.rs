//! Checkpoints of the shard log on a real bucket (Garage): after many simulated pushes, the
//! bucket's metadata is a checkpoint and what came after it, a node on an empty disk reads the
//! checkpoint in a few requests and has every file, scope and checked claim, gc keeps what the
//! checkpoint's files use, scrub does not miss the shards it covers, and a damaged checkpoint
//! is ignored.
//!
//! The pushes are simulated cheaply (a test tool writes what a node leaves in the bucket after
//! it accepted a shard: the shard and its log entry), as a year of a team's pushes would be
//! too slow to push for real.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use crate::s3_storage::{download_whole, store_requests};
use xet_test_tools::needs;

use std::time::{Duration, Instant};

use common::garage::Garage;
use xet_format::shard::{FileInfo, Shard, Term};
use xet_format::xorb::XorbFooter;
use xet_format::{ChunkRef, FileHash, LfsOid, ShardHash, XorbHash};
use xet_store::backend::{ObjectBackend, ObjectKey, SharedBucket};
use xet_store::checkpoint::{CompactOptions, CompactReport};
use xet_store::s3::S3Backend;
use xet_store::Store;

/// The repository every tenth simulated push goes through (the others use server-wide tokens).
const REPO: &str = "team/models";

/// One simulated push: a shard of one file, logged as a node logs what it accepted.
struct Push {
    shard: ShardHash,
    bytes: Vec<u8>,
    file: FileHash,
    repo: Option<&'static str>,
    /// Where the file's bytes are in the data the xorb was made of, and its SHA-256 claim.
    range: std::ops::Range<usize>,
    oid: Option<LfsOid>,
}

/// `n` pushes of distinct files, each a run of chunks of the one xorb `refs` describes.
fn pushes(xorb: XorbHash, refs: &[ChunkRef], data: &[u8], n: usize) -> Vec<Push> {
    let mut starts = vec![0usize];
    for c in refs {
        starts.push(starts.last().unwrap() + c.len as usize);
    }
    let mut out = Vec::with_capacity(n);
    'all: for len in 1..refs.len() {
        for first in 0..refs.len() - len {
            if out.len() == n {
                break 'all;
            }
            let chunks = &refs[first..first + len];
            let file = xet_format::hash::file_hash(chunks);
            let bytes_len: u64 = chunks.iter().map(|c| c.len).sum();
            let range = starts[first]..starts[first + len];
            // Every hundredth file carries its SHA-256 (a claim to check).
            let oid = (out.len() % 100 == 0)
                .then(|| LfsOid::from_hex(&common::sha256_hex(&data[range.clone()])).unwrap());
            let mut shard = Shard::new();
            shard.files.push(FileInfo {
                hash: file,
                terms: vec![Term::new(
                    xorb,
                    bytes_len as u32,
                    first as u32,
                    (first + len) as u32,
                )],
                verification: Some(vec![xet_format::hash::verification_hash(
                    chunks.iter().map(|c| &c.hash),
                )]),
                sha256: oid,
                unknown_flags: 0,
            });
            let bytes = shard.to_upload_bytes().unwrap();
            out.push(Push {
                shard: ShardHash::of(&bytes),
                bytes,
                file,
                repo: (out.len() % 10 == 0).then_some(REPO),
                range,
                oid,
            });
        }
    }
    assert_eq!(
        out.len(),
        n,
        "the xorb has chunks enough for {n} distinct files"
    );
    out
}

/// What the pushes leave in the bucket, written on 16 threads.
fn simulate(b: &S3Backend, pushes: &[Push]) {
    std::thread::scope(|s| {
        for part in pushes.chunks(pushes.len().div_ceil(16)) {
            s.spawn(move || {
                for p in part {
                    b.put_new(ObjectKey::Shard(p.shard), &p.bytes).unwrap();
                    b.log_shard(&p.shard, p.repo.map(repo_name).as_ref())
                        .unwrap();
                }
            });
        }
    });
}

/// The bucket's metadata objects: log entries, shards, claim batches, checkpoints.
fn metadata(b: &S3Backend) -> (usize, usize, usize, usize) {
    (
        b.list_log().unwrap().len(),
        b.list_shards().unwrap().len(),
        b.list_claim_batches().unwrap().len(),
        b.list_checkpoints().unwrap().len(),
    )
}

fn compact_now(s: &Store) -> CompactReport {
    s.compact(CompactOptions {
        grace: Duration::ZERO,
    })
    .unwrap()
}

/// 10,000 single-file pushes (a tenth through a repository, a hundredth with a SHA-256 claim,
/// some claims checked by a node): compacted twice, the bucket holds one checkpoint and no
/// log entry, shard or claim batch; a node on an empty disk reads it in a few requests and
/// serves every file, with its scope and its checked claim; pushes after the checkpoint come
/// from the log; gc keeps the xorb; scrub finds nothing missing; a newer damaged checkpoint
/// and one cut short are ignored.
#[needs(garage)]
#[test]
fn ten_thousand_pushes_compact_into_one_checkpoint_a_new_node_reads_at_once() {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    const PUSHES: usize = 10_000;

    let g = Garage::start();
    g.create_bucket("ckpt");
    let (b, _spool) = {
        let spool = tempfile::tempdir().unwrap();
        let b =
            S3Backend::open(&g.s3_config("ckpt", ""), spool.path(), 0, Garage::runtime()).unwrap();
        (b, spool)
    };
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = g.open_store("ckpt", dirs[0].path());

    // One xorb of about 190 chunks, pushed for real; 10,000 files are runs of its chunks.
    let data = xet_format::test_util::pseudo_random(12 << 20, 4242);
    let up = upload(&a, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(up.new_xorbs, 1);
    let xorb = b.list_xorbs().unwrap()[0].hash;
    let stored = b.read_all(ObjectKey::Xorb(xorb)).unwrap().unwrap();
    let refs = XorbFooter::from_stored(&stored).unwrap().0.chunk_refs();
    let mut pushes = pushes(xorb, &refs, &data, PUSHES + 1);
    // One more push comes after the checkpoints.
    let extra = pushes.pop().unwrap();
    let started = Instant::now();
    simulate(&b, &pushes);
    eprintln!("simulated {PUSHES} pushes in {:?}", started.elapsed());

    // Node A registers them from the bucket, checks a few claims for the cluster, and
    // compacts: the first checkpoint covers everything, and deletes nothing yet.
    let started = Instant::now();
    let caught = a.catch_up_all().unwrap();
    eprintln!(
        "node A registered {} shards in {:?}",
        caught.registered,
        started.elapsed()
    );
    assert_eq!((caught.registered, caught.refused), (PUSHES, 0));
    let checked: Vec<&Push> = pushes.iter().filter(|p| p.oid.is_some()).take(5).collect();
    for p in &checked {
        a.settle_claim(&p.oid.unwrap(), &p.file, true).unwrap();
    }
    a.record_checked_claims();
    assert_eq!(b.list_claim_batches().unwrap().len(), 1);
    let before = metadata(&b);
    let first = compact_now(&a);
    assert!(first.written.is_some(), "{first:?}");
    // Log entries and shards of the pushes and of the real upload, and the batch of claims.
    assert_eq!(first.covered, 2 * (PUSHES as u64 + 1) + 1, "{first:?}");
    assert_eq!(
        (
            first.log_entries_removed,
            first.shards_removed,
            first.checkpoints_removed
        ),
        (0, 0, 0)
    );
    assert_eq!(metadata(&b), (before.0, before.1, before.2, 1));

    // The second deletes what the first covers, and the first.
    let second = compact_now(&a);
    assert_eq!(
        (
            second.log_entries_removed,
            second.shards_removed,
            second.claim_batches_removed,
            second.checkpoints_removed
        ),
        (PUSHES as u64 + 1, PUSHES as u64 + 1, 1, 1),
        "{second:?}"
    );
    assert_eq!(
        metadata(&b),
        (0, 0, 0, 1),
        "only the new checkpoint is left"
    );
    eprintln!(
        "checkpoint of {PUSHES} pushes: {} rows, {} bytes",
        second.rows, second.bytes
    );

    // A push after the checkpoint, through the log as usual.
    let late = &pushes[PUSHES - 1];
    simulate(&b, std::slice::from_ref(&extra));

    // Node B on an empty disk: listings of the checkpoints, the log and the shards, the
    // checkpoint, and the one shard logged after it.
    let node_b = g.open_store("ckpt", dirs[1].path());
    let gets = store_requests(&node_b, "get");
    let started = Instant::now();
    let caught = node_b.catch_up_all().unwrap();
    let took = started.elapsed();
    eprintln!(
        "node B on an empty disk caught up in {took:?} with {} GETs",
        store_requests(&node_b, "get") - gets
    );
    assert_eq!(
        caught.registered, 1,
        "only the push after the checkpoint: {caught:?}"
    );
    assert!(
        store_requests(&node_b, "get") - gets <= 6,
        "a handful of reads (the checkpoint, the new shard, the xorb's footer), not one per \
         push: {:?}",
        node_b.storage_timings()
    );
    assert!(!node_b.catching_up());
    for p in [&pushes[0], &pushes[4321], late, &extra] {
        let got = download_whole(&node_b, &p.file);
        assert!(got == data[p.range.clone()], "file {}", p.file);
    }
    // Scopes: what went through the repository is its own, and only that.
    let scoped = pushes.iter().find(|p| p.repo.is_some()).unwrap();
    let unscoped = pushes.iter().find(|p| p.repo.is_none()).unwrap();
    assert!(node_b
        .visible_to(&scoped.file, Some(&repo_name(REPO)))
        .unwrap());
    assert!(!node_b
        .visible_to(&unscoped.file, Some(&repo_name(REPO)))
        .unwrap());
    assert!(!node_b
        .visible_to(&scoped.file, Some(&repo_name("team/other")))
        .unwrap());
    // Claims: those checked are checked at B; the others wait to be checked.
    for p in &checked {
        assert!(!node_b.claim_pending(&p.oid.unwrap(), &p.file).unwrap());
    }
    let pending = pushes.iter().filter(|p| p.oid.is_some()).nth(10).unwrap();
    assert!(node_b
        .claim_pending(&pending.oid.unwrap(), &pending.file)
        .unwrap());

    // gc at B keeps the xorb every file uses; scrub misses no shard the checkpoint holds.
    let gc = node_b
        .gc(xet_store::GcOptions {
            grace: Duration::ZERO,
            dry_run: false,
        })
        .unwrap();
    assert_eq!((gc.xorbs_removed, gc.xorbs_used), (0, 1), "{gc:?}");
    let scrub = node_b.scrub(&mut |_| {}).unwrap();
    assert!(!scrub.found_damage(), "{scrub:?}");
    assert_eq!(scrub.checkpoints_checked, 1);

    // A newer checkpoint that does not hash to its name, and one cut short: ignored.
    let good = b.list_checkpoints().unwrap()[0];
    let body = b.read_all(ObjectKey::Checkpoint(good)).unwrap().unwrap();
    let cut = &body[..body.len() / 2];
    let cut_id = xet_store::checkpoint::format::CheckpointId {
        ms: good.ms + 1,
        sum: good.sum,
    };
    b.put_new(ObjectKey::Checkpoint(cut_id), cut).unwrap();
    let mut changed = body.clone();
    let last = changed.len() - 1;
    changed[last] ^= 0x55;
    let changed_id = xet_store::checkpoint::format::CheckpointId {
        ms: good.ms + 2,
        sum: good.sum,
    };
    b.put_new(ObjectKey::Checkpoint(changed_id), &changed)
        .unwrap();
    let node_c = g.open_store("ckpt", dirs[2].path());
    node_c.catch_up_all().unwrap();
    assert!(node_c
        .reconstruction(&pushes[77].file, None)
        .unwrap()
        .is_some());
    assert!(node_c.reconstruction(&extra.file, None).unwrap().is_some());
    let scrub = node_c.scrub(&mut |_| {}).unwrap();
    assert_eq!(scrub.damaged_checkpoints.len(), 2, "{scrub:?}");

    // The next compaction replaces them all with one, which covers the late push too; the
    // one after it deletes the late push's log entry and shard.
    let third = compact_now(&node_c);
    assert_eq!(third.damaged_checkpoints.len(), 2, "{third:?}");
    assert_eq!(metadata(&b), (1, 1, 0, 1));
    compact_now(&node_c);
    assert_eq!(metadata(&b), (0, 0, 0, 1));
    let node_d = g.open_store("ckpt", dirs[3].path());
    node_d.catch_up_all().unwrap();
    assert!(node_d.reconstruction(&extra.file, None).unwrap().is_some());
    assert_eq!(
        node_d.counts().unwrap().files,
        node_b.counts().unwrap().files
    );
}

/// A repository name for the store's tenancy API.
fn repo_name(name: &str) -> xet_store::RepoName {
    xet_store::RepoName::new(name).unwrap()
}
