//! The upload pipeline (`xet_client::pipeline::upload`) against a temporary [`Store`]: what it
//! stores, deduplicates and registers, and how it meets a target that fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{self, Read};
use std::sync::{mpsc, Mutex};

use xet_client::pipeline::download::write_plan;
use xet_client::pipeline::upload::*;
use xet_format::dedup::{is_dense_key, DENSE_KEY_MODULUS, MAX_PROBES};
use xet_format::shard::Shard;
use xet_format::xorb::XorbLimits;
use xet_format::{ChunkHash, FileHash, LfsOid, XorbHash};
use xet_protocol::{CasTarget, TargetError, XorbSource};
use xet_store::Store;

/// The deterministic test data of docs/test-vectors.md (SplitMix64), shared with the format
/// crate's tests.
#[path = "../../xet-format/tests/format/fixtures.rs"]
mod fixtures;

/// SplitMix64 bytes (docs/test-vectors.md §5.1): incompressible, chunk boundaries everywhere.
fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    fixtures::splitmix64(seed, n)
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    (dir, store)
}

/// The file registered under `oid`, rebuilt from the store.
fn download(store: &Store, oid: &LfsOid) -> Vec<u8> {
    let (file, size) = store.file_by_oid(oid).unwrap().expect("registered");
    let plan = store.reconstruction(&file, None).unwrap().unwrap();
    let mut out = Vec::new();
    let n = write_plan(store, &plan, &mut |piece| {
        out.extend_from_slice(piece);
        Ok(())
    })
    .unwrap();
    assert_eq!((n, out.len() as u64), (size, size));
    out
}

/// File `file` rebuilt from `source` by `plan`, its hash checked.
fn rebuilt(
    source: &dyn XorbSource,
    file: &FileHash,
    plan: &xet_protocol::ReconstructionPlan,
) -> Vec<u8> {
    let mut out = Vec::new();
    xet_client::pipeline::download::write_file(source, file, plan, &mut |p| {
        out.extend_from_slice(p);
        Ok(())
    })
    .unwrap();
    out
}

fn xorb_count(store: &Store) -> u64 {
    store.counts().unwrap().xorbs
}

#[test]
fn round_trip_and_summary() {
    let (_d, store) = store();
    let data = random_bytes(1, 3 << 20);
    let s = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(s.size, data.len() as u64);
    assert_eq!(s.sha256, LfsOid::of(&data));
    assert_eq!(
        s.file_hash,
        xet_client::pipeline::hasher::hash_bytes(&data, Default::default()).file_hash
    );
    assert!(s.chunks > 10);
    assert_eq!((s.dedup_chunks, s.new_xorbs, s.shards), (0, 1, 1));
    assert!(
        s.uploaded_bytes > data.len() as u64,
        "random data does not compress"
    );
    assert!(!s.already_stored);
    assert_eq!(download(&store, &s.sha256), data);
}

/// A file uploaded through mappings is the file uploaded through reads: the same Xet file,
/// across several mapped blocks and a last short one, and the same errors for a file shorter
/// than declared.
#[test]
fn a_mapped_file_uploads_as_its_bytes_do() {
    let (d, store) = store();
    let data = random_bytes(11, 2 * READ_BLOCK + 12_345);
    let path = d.path().join("object");
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let options = UploadOptions {
        expected_sha256: Some(LfsOid::of(&data)),
        expected_size: Some(data.len() as u64),
        ..Default::default()
    };
    let mapped = upload_file_with_seeds(&store, &file, &options, &[], &mut |_| {}).unwrap();
    let (_d2, other) = self::store();
    let read = upload(&other, &data[..], &options).unwrap();
    assert_eq!(mapped.file_hash, read.file_hash);
    assert_eq!(mapped.size, data.len() as u64);
    assert_eq!(
        (mapped.chunks, mapped.new_xorbs),
        (read.chunks, read.new_xorbs)
    );
    assert_eq!(download(&store, &mapped.sha256), data);

    // Declared longer than the file: refused, nothing registered.
    let (_d3, empty) = self::store();
    let longer = UploadOptions {
        expected_sha256: None,
        expected_size: Some(data.len() as u64 + 1),
        ..Default::default()
    };
    let e = upload_file_with_seeds(&empty, &file, &longer, &[], &mut |_| {}).unwrap_err();
    assert!(matches!(e, UploadError::TooShort { .. }), "{e}");
    assert_eq!(empty.counts().unwrap().files, 0);

    // An empty file is the empty Xet file, with nothing mapped.
    let empty_path = d.path().join("empty");
    std::fs::write(&empty_path, b"").unwrap();
    let f = std::fs::File::open(&empty_path).unwrap();
    let s =
        upload_file_with_seeds(&empty, &f, &UploadOptions::default(), &[], &mut |_| {}).unwrap();
    assert_eq!(s.size, 0);
    assert_eq!(
        s.file_hash,
        upload(&other, &b""[..], &UploadOptions::default())
            .unwrap()
            .file_hash
    );
}

#[test]
fn chunks_spanning_blocks_upload_as_in_one_piece() {
    // Random bytes across the first block end, a run of zeros (maximal chunks) across the
    // second, then random bytes: the file hash and chunks are those of the whole at once.
    let mut data = random_bytes(7, 2 * READ_BLOCK - (1 << 20));
    data.extend(std::iter::repeat_n(0u8, 2 << 20));
    data.extend(random_bytes(8, 700_001));
    let whole = xet_client::pipeline::hasher::hash_bytes(&data, Default::default());
    let (_d, store) = store();
    let options = UploadOptions {
        expected_sha256: Some(LfsOid::of(&data)),
        expected_size: Some(data.len() as u64),
        ..UploadOptions::default()
    };
    let s = upload(&store, &data[..], &options).unwrap();
    assert_eq!(s.file_hash, whole.file_hash);
    assert_eq!(s.chunks, whole.chunks.len() as u64);
    assert_eq!(download(&store, &s.sha256), data);
}

#[test]
fn repeated_upload_stores_nothing_new() {
    let (_d, store) = store();
    let data = random_bytes(2, 2 << 20);
    let first = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    let xorbs = xorb_count(&store);

    // Without the SHA-256: every chunk deduplicates through the global-dedup answer for the
    // first chunk (the store indexes every file's first chunk).
    let again = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(again.file_hash, first.file_hash);
    assert_eq!(again.dedup_chunks, again.chunks);
    assert_eq!((again.new_xorbs, again.uploaded_bytes), (0, 0));
    assert_eq!(again.dedup_queries, 1);
    assert_eq!(xorb_count(&store), xorbs);

    // With the SHA-256 declared, the stream is not even read.
    let options = UploadOptions {
        expected_sha256: Some(first.sha256),
        ..Default::default()
    };
    let mut unreadable = FailingReader;
    let skipped = upload(&store, &mut unreadable, &options).unwrap();
    assert!(skipped.already_stored);
    assert_eq!(
        (skipped.file_hash, skipped.size),
        (first.file_hash, first.size)
    );
}

struct FailingReader;

impl Read for FailingReader {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::Error::other("must not be read"))
    }
}

#[test]
fn file_spanning_several_xorbs_and_shards() {
    let (_d, store) = store();
    let data = random_bytes(3, 4 << 20);
    let options = UploadOptions {
        limits: XorbLimits {
            max_chunks: 8,
            ..XorbLimits::CLIENT
        },
        // Room for the file block and about two xorb blocks: the rest goes to other shards.
        max_shard_bytes: 48 * 60,
        // Several xorbs in flight at once, finishing in any order.
        parallel_puts: 4,
        ..Default::default()
    };
    let s = upload(&store, &data[..], &options).unwrap();
    assert!(s.new_xorbs >= 6, "{s:?}");
    assert!(s.shards >= 2, "{s:?}");
    assert_eq!(xorb_count(&store), s.new_xorbs);
    let (file, _) = store.file_by_oid(&s.sha256).unwrap().unwrap();
    let record = store.file(&file).unwrap().unwrap();
    assert_eq!(record.terms.len() as u64, s.new_xorbs, "one term per xorb");
    assert_eq!(download(&store, &s.sha256), data);
}

#[test]
fn empty_file() {
    let (_d, store) = store();
    let s = upload(&store, io::empty(), &UploadOptions::default()).unwrap();
    assert_eq!(s.file_hash, FileHash::ZERO);
    assert_eq!(s.sha256, LfsOid::of(b""));
    assert_eq!((s.size, s.chunks, s.shards, s.new_xorbs), (0, 0, 0, 0));
    assert_eq!(store.counts().unwrap().files, 0);
    let plan = store
        .reconstruction(&FileHash::ZERO, None)
        .unwrap()
        .unwrap();
    assert_eq!(plan.file_size, 0);
}

#[test]
fn edited_file_uploads_only_the_changed_chunks() {
    let (_d, store) = store();
    let mut data = random_bytes(4, 6 << 20);
    let first = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    for b in &mut data[3 << 20..(3 << 20) + 100] {
        *b ^= 0xff;
    }
    let edited = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    assert_ne!(edited.file_hash, first.file_hash);
    assert!(edited.dedup_chunks + 4 >= edited.chunks, "{edited:?}");
    assert!(
        edited.uploaded_bytes < 512 << 10,
        "uploaded {} bytes for a 100-byte edit",
        edited.uploaded_bytes
    );
    assert_eq!(download(&store, &edited.sha256), data);
    assert_eq!(download(&store, &first.sha256)[..3 << 20], data[..3 << 20]);
}

#[test]
fn repeated_content_inside_one_file_is_stored_once() {
    let (_d, store) = store();
    let block = random_bytes(5, 1 << 20);
    let data = [block.clone(), block.clone(), block].concat();
    let s = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    assert!(s.dedup_chunks * 2 >= s.chunks, "{s:?}");
    assert!(s.uploaded_bytes < (3 << 20) / 2, "{s:?}");
    assert_eq!(download(&store, &s.sha256), data);
}

#[test]
fn mismatches_register_nothing_and_staging_stores_nothing() {
    let (d, store) = store();
    let data = random_bytes(6, 1 << 20);
    let tmp = d.path().join("stage");
    std::fs::create_dir_all(&tmp).unwrap();

    let wrong = UploadOptions {
        expected_sha256: Some(LfsOid::of(b"something else")),
        limits: XorbLimits {
            max_chunks: 4,
            ..XorbLimits::CLIENT
        },
        ..Default::default()
    };
    let staging = Staging::new(&store, &tmp);
    let e = upload(&staging, &data[..], &wrong).unwrap_err();
    assert!(matches!(e, UploadError::Sha256Mismatch { .. }), "{e}");
    assert!(e.is_input_error());
    drop(staging);
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "staging files removed"
    );
    assert_eq!(store.counts().unwrap().files, 0);
    assert_eq!(xorb_count(&store), 0);

    let short = UploadOptions {
        expected_size: Some(data.len() as u64 + 1),
        ..Default::default()
    };
    let e = upload(&store, &data[..], &short).unwrap_err();
    assert!(matches!(e, UploadError::TooShort { .. }), "{e}");
    let long = UploadOptions {
        expected_size: Some(1000),
        ..Default::default()
    };
    let e = upload(&store, &data[..], &long).unwrap_err();
    assert!(matches!(e, UploadError::TooLong { expected: 1000 }), "{e}");
    assert_eq!(store.counts().unwrap().files, 0);

    // The right SHA-256 through staging: committed at registration.
    let right = UploadOptions {
        expected_sha256: Some(LfsOid::of(&data)),
        expected_size: Some(data.len() as u64),
        ..Default::default()
    };
    let staging = Staging::new(&store, &tmp);
    let s = upload(&staging, &data[..], &right).unwrap();
    assert_eq!(staging.staged(), 0);
    drop(staging);
    assert_eq!(xorb_count(&store), s.new_xorbs);
    assert_eq!(download(&store, &s.sha256), data);
}

/// A target whose xorb uploads fail: the error names the xorb and nothing is registered.
struct BrokenTarget<'a>(&'a Store);

impl CasTarget for BrokenTarget<'_> {
    fn has_xorb(&self, _: &xet_format::XorbHash) -> Result<bool, TargetError> {
        Ok(false)
    }
    fn put_xorb(&self, xorb: xet_format::XorbHash, _: &[u8]) -> Result<bool, TargetError> {
        Err(TargetError::Remote {
            what: format!("POST xorb {xorb}"),
            message: "503".into(),
            retryable: true,
            code: None,
        })
    }
    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        CasTarget::register_shard(self.0, shard)
    }
}

#[test]
fn target_failures_are_reported_with_the_xorb() {
    let (_d, store) = store();
    let data = random_bytes(7, 2 << 20);
    // With one uploader or several: the first failure stops them all, is the error reported
    // (not "uploader gone"), and nothing hangs.
    for parallel_puts in [1, 2, 4] {
        let options = UploadOptions {
            limits: XorbLimits {
                max_chunks: 4,
                ..XorbLimits::CLIENT
            },
            parallel_puts,
            ..Default::default()
        };
        let e = upload(&BrokenTarget(&store), &data[..], &options).unwrap_err();
        assert!(matches!(e, UploadError::Target { .. }), "{e}");
        assert!(e.to_string().contains("uploading xorb"), "{e}");
        assert_eq!(store.counts().unwrap().files, 0);
    }
}

/// 3 MiB of random bytes uploaded to `store` in xorbs of at most `max_chunks` chunks: the
/// bytes, the upload's summary and the file's plan.
fn small_xorbs_file(
    store: &Store,
    seed: u64,
    max_chunks: usize,
) -> (
    Vec<u8>,
    xet_client::pipeline::upload::UploadSummary,
    xet_protocol::ReconstructionPlan,
) {
    let data = random_bytes(seed, 3 << 20);
    let options = UploadOptions {
        limits: XorbLimits {
            max_chunks,
            ..XorbLimits::CLIENT
        },
        ..Default::default()
    };
    let s = upload(store, &data[..], &options).unwrap();
    let plan = store.reconstruction(&s.file_hash, None).unwrap().unwrap();
    (data, s, plan)
}

/// A source whose `fail_at`-th fetch (counting from 0) fails; the others read the store.
struct FlakySource<'a> {
    store: &'a Store,
    fail_at: usize,
    calls: std::sync::atomic::AtomicUsize,
}

impl XorbSource for FlakySource<'_> {
    fn read_xorb_range(
        &self,
        xorb: &xet_format::XorbHash,
        range: &xet_protocol::FetchRange,
    ) -> Result<Vec<u8>, TargetError> {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n == self.fail_at {
            return Err(TargetError::Remote {
                what: format!("GET xorb {xorb}"),
                message: "connection reset".into(),
                retryable: true,
                code: None,
            });
        }
        XorbSource::read_xorb_range(self.store, xorb, range)
    }
}

#[test]
fn concurrent_fetches_keep_order_and_stop_on_the_first_failure() {
    let (_d, store) = store();
    let (data, s, plan) = small_xorbs_file(&store, 11, 4);
    assert!(s.new_xorbs >= 8, "{s:?}");
    // Every fetch succeeds: the bytes come out in order, and the file hash checks out.
    assert!(rebuilt(&store, &s.file_hash, &plan) == data);
    // A failure in the middle is reported, and nothing hangs.
    for fail_at in [0, 3, s.new_xorbs as usize - 1] {
        let source = FlakySource {
            store: &store,
            fail_at,
            calls: Default::default(),
        };
        let mut written = 0usize;
        let e = write_plan(&source, &plan, &mut |p| {
            written += p.len();
            Ok(())
        })
        .unwrap_err();
        assert!(e.to_string().contains("connection reset"), "{e}");
        assert!(written < data.len());
    }
    // The wrong expected hash is caught.
    let other = xet_format::FileHash::from_hex(&"11".repeat(32)).unwrap();
    let e = xet_client::pipeline::download::write_file(&store, &other, &plan, &mut |_| Ok(()))
        .unwrap_err();
    assert!(e.to_string().contains("damaged"), "{e}");
}

/// Counts the fetches a download makes.
struct CountingSource<'a>(&'a Store, std::sync::atomic::AtomicUsize);

impl XorbSource for CountingSource<'_> {
    fn read_xorb_range(
        &self,
        xorb: &xet_format::XorbHash,
        range: &xet_protocol::FetchRange,
    ) -> Result<Vec<u8>, TargetError> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        XorbSource::read_xorb_range(self.0, xorb, range)
    }
}

/// A 300 KB block repeated 30 times, with a random block between repetitions, stored in small
/// xorbs (8 chunks) so that the terms alternate between xorbs and the plan names the block's
/// chunks again and again: the file, its upload and its plan.
fn repeated_block_file(
    store: &Store,
    seed: u64,
) -> (
    Vec<u8>,
    xet_client::pipeline::upload::UploadSummary,
    xet_protocol::ReconstructionPlan,
) {
    let block = random_bytes(seed, 300_000);
    let mut data = Vec::new();
    for i in 0..30 {
        data.extend_from_slice(&block);
        data.extend_from_slice(&random_bytes(seed * 10 + i, 70_000));
    }
    let options = UploadOptions {
        limits: XorbLimits {
            max_chunks: 8,
            ..XorbLimits::CLIENT
        },
        ..Default::default()
    };
    let s = upload(store, &data[..], &options).unwrap();
    let plan = store.reconstruction(&s.file_hash, None).unwrap().unwrap();
    (data, s, plan)
}

#[test]
fn repeated_ranges_are_fetched_once() {
    let (_d, store) = store();
    let (data, s, plan) = repeated_block_file(&store, 21);
    let source = CountingSource(&store, Default::default());
    assert!(rebuilt(&source, &s.file_hash, &plan) == data);
    let fetches = source.1.load(std::sync::atomic::Ordering::SeqCst);
    assert!(plan.terms.len() >= 40, "{} terms", plan.terms.len());
    assert!(
        fetches * 2 < plan.terms.len(),
        "{fetches} fetches for {} terms",
        plan.terms.len()
    );
}

/// An in-memory file for `write_file_at`.
#[derive(Default)]
struct MemFile(std::sync::Mutex<Vec<u8>>);

impl xet_client::pipeline::download::WriteAt for MemFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let mut v = self.0.lock().unwrap();
        let end = offset as usize + buf.len();
        if v.len() < end {
            v.resize(end, 0);
        }
        v[offset as usize..end].copy_from_slice(buf);
        Ok(())
    }
}

#[test]
fn positional_download_writes_every_term_in_place_fetching_each_range_once() {
    let (_d, store) = store();
    let (data, s, plan) = repeated_block_file(&store, 31);
    let source = CountingSource(&store, Default::default());
    let out = MemFile::default();
    let mut seen = Vec::new();
    let n = xet_client::pipeline::download::write_file_at(
        &source,
        &s.file_hash,
        &plan,
        &out,
        &mut |w| {
            seen.push(w);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(n, data.len() as u64);
    assert!(out.0.into_inner().unwrap() == data);
    // Each distinct range once: no more fetches than ranges in the plan.
    let ranges: usize = plan.fetch.iter().map(|(_, r)| r.len()).sum();
    let fetches = source.1.load(std::sync::atomic::Ordering::SeqCst);
    assert!(fetches <= ranges, "{fetches} fetches for {ranges} ranges");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert!(seen.last().is_some_and(|&w| w <= n));
    // The wrong expected hash is caught.
    let other = xet_format::FileHash::from_hex(&"11".repeat(32)).unwrap();
    let e = xet_client::pipeline::download::write_file_at(
        &store,
        &other,
        &plan,
        &MemFile::default(),
        &mut |_| Ok(()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("damaged"), "{e}");
    // A failing fetch anywhere is reported, and nothing hangs.
    for fail_at in [0, 2, fetches - 1] {
        let source = FlakySource {
            store: &store,
            fail_at,
            calls: Default::default(),
        };
        let e = xet_client::pipeline::download::write_file_at(
            &source,
            &s.file_hash,
            &plan,
            &MemFile::default(),
            &mut |_| Ok(()),
        )
        .unwrap_err();
        assert!(e.to_string().contains("connection reset"), "{e}");
    }
    // A progress callback that fails stops the download.
    let e = xet_client::pipeline::download::write_file_at(
        &store,
        &s.file_hash,
        &plan,
        &MemFile::default(),
        &mut |_| Err(std::io::Error::other("git-lfs went away")),
    )
    .unwrap_err();
    assert!(e.to_string().contains("git-lfs went away"), "{e}");
}

/// A target whose xorb puts wait until the test lets them through, one at a time.
struct Gated<'a> {
    inner: &'a Store,
    gate: Mutex<mpsc::Receiver<()>>,
}

impl CasTarget for Gated<'_> {
    fn has_xorb(&self, xorb: &xet_format::XorbHash) -> Result<bool, TargetError> {
        CasTarget::has_xorb(self.inner, xorb)
    }
    fn put_xorb(&self, xorb: xet_format::XorbHash, body: &[u8]) -> Result<bool, TargetError> {
        // Bounded, so that a failed assertion cannot leave the upload waiting forever.
        let _ = self
            .gate
            .lock()
            .unwrap()
            .recv_timeout(std::time::Duration::from_secs(10));
        CasTarget::put_xorb(self.inner, xorb, body)
    }
    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        CasTarget::register_shard(self.inner, shard)
    }
}

/// Progress counts bytes when they are safe at the target: nothing while the first xorb is
/// still being put, then each xorb's bytes once its put returned, the whole file at the end.
#[test]
fn progress_follows_the_puts_not_the_reading() {
    let (_d, store) = store();
    let data = random_bytes(21, 3 << 20);
    let (open, gate) = mpsc::channel::<()>();
    let target = Gated {
        inner: &store,
        gate: Mutex::new(gate),
    };
    let options = UploadOptions {
        limits: XorbLimits {
            max_chunks: 16,
            ..XorbLimits::CLIENT
        },
        parallel_puts: 1,
        ..UploadOptions::default()
    };
    let events: Mutex<Vec<UploadProgress>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            upload_with_progress(&target, &data[..], &options, &mut |p| {
                events.lock().unwrap().push(p)
            })
        });
        // Nothing is stored yet: whatever was read, nothing is done.
        std::thread::sleep(PROGRESS_TICK * 4);
        {
            let seen = events.lock().unwrap();
            assert!(!seen.is_empty(), "progress is reported while puts wait");
            assert!(seen.iter().all(|p| p.bytes_done == 0), "{seen:?}");
        }
        // Let the puts through one by one: the done bytes grow with them.
        let mut last = 0;
        while !worker.is_finished() {
            let _ = open.send(());
            std::thread::sleep(PROGRESS_TICK * 2);
            let now = events.lock().unwrap().last().map_or(0, |p| p.bytes_done);
            assert!(now >= last, "done bytes never go back");
            last = now;
        }
        let summary = worker.join().unwrap().unwrap();
        assert!(summary.new_xorbs >= 3, "{summary:?}");
    });
    let seen = events.into_inner().unwrap();
    let distinct: std::collections::BTreeSet<u64> = seen.iter().map(|p| p.bytes_done).collect();
    assert!(distinct.len() >= 3, "it moved in steps: {distinct:?}");
    assert!(seen.iter().all(|p| p.bytes_done <= data.len() as u64));
}

/// A source that streams each range in pieces of `piece` bytes; with `restart`, each range
/// first breaks off halfway and starts again from its first byte (a retry); with `flip`, one
/// byte at that offset of every range is changed.
struct PieceSource<'a> {
    store: &'a Store,
    piece: usize,
    restart: bool,
    flip: Option<usize>,
    streamed: std::sync::atomic::AtomicUsize,
}

impl XorbSource for PieceSource<'_> {
    fn read_xorb_range(
        &self,
        xorb: &xet_format::XorbHash,
        range: &xet_protocol::FetchRange,
    ) -> Result<Vec<u8>, TargetError> {
        XorbSource::read_xorb_range(self.store, xorb, range)
    }

    fn stream_xorb_range(
        &self,
        xorb: &xet_format::XorbHash,
        range: &xet_protocol::FetchRange,
        sink: &mut xet_protocol::RangeSink<'_>,
    ) -> Result<(), TargetError> {
        self.streamed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut bytes = XorbSource::read_xorb_range(self.store, xorb, range)?;
        if let Some(at) = self.flip {
            if let Some(b) = bytes.get_mut(at) {
                *b ^= 0x55;
            }
        }
        let mut send = |upto: usize| {
            for (i, p) in bytes[..upto].chunks(self.piece).enumerate() {
                if sink((i * self.piece) as u64, p).is_break() {
                    return false;
                }
            }
            true
        };
        if self.restart && !send(bytes.len() / 2) {
            return Ok(());
        }
        send(bytes.len());
        Ok(())
    }
}

#[test]
fn ranges_used_in_order_are_decoded_as_they_arrive_whatever_the_pieces() {
    let (_d, store) = store();
    let (data, s, plan) = small_xorbs_file(&store, 12, 6);
    // Rebuilds the file from `source`: the bytes written, or why not.
    let rebuild = |source: &PieceSource| {
        let out = MemFile::default();
        xet_client::pipeline::download::write_file_at(
            source,
            &s.file_hash,
            &plan,
            &out,
            &mut |_| Ok(()),
        )
        .map(|n| (n, out.0.into_inner().unwrap()))
    };
    let source = |piece, restart, flip| PieceSource {
        store: &store,
        piece,
        restart,
        flip,
        streamed: Default::default(),
    };
    for (piece, restart) in [(1, false), (7, true), (4096, true), (1 << 20, false)] {
        let src = source(piece, restart, None);
        let (n, out) = rebuild(&src).unwrap();
        assert_eq!(n, data.len() as u64);
        assert!(out == data, "pieces of {piece}");
        // Every range was streamed, none read whole.
        let ranges: usize = plan.fetch.iter().map(|(_, r)| r.len()).sum();
        let streamed = src.streamed.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(streamed, ranges, "pieces of {piece}");
    }
    // A damaged payload byte is caught: by its chunk's decoding or by the file hash.
    for flip in [100, 70_000] {
        let e = rebuild(&source(1000, false, Some(flip))).unwrap_err();
        assert!(e.to_string().contains("damaged"), "{e}");
    }
    // A damaged chunk header names the xorb, the range and the offset.
    let e = rebuild(&source(1000, false, Some(0))).unwrap_err();
    assert!(
        matches!(
            e,
            xet_client::pipeline::download::DownloadError::Damaged { .. }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("offset 0"), "{e}");
}

/// A file of 300 KiB, then `n` files of 1-100 KiB of random bytes, then one that is the first
/// followed by 4 KiB more (its chunks up to the first one's last boundary deduplicate against
/// the pack's own xorb).
fn small_files(n: u64) -> Vec<Vec<u8>> {
    let mut files = vec![random_bytes(199, 300 << 10)];
    files.extend((0..n).map(|i| {
        let len = 1024 + (fixtures::splitmix64(100 + i, 8)[0] as usize * 397) % (99 << 10);
        random_bytes(200 + i, len)
    }));
    let mut echo = files[0].clone();
    echo.extend(random_bytes(999, 4096));
    files.push(echo);
    files
}

fn pack(
    store: &Store,
    files: &[Vec<u8>],
    oids: &[LfsOid],
    options: &UploadOptions,
) -> Result<PackSummary, UploadError> {
    let mut readers: Vec<&[u8]> = files.iter().map(|f| &f[..]).collect();
    let mut members: Vec<PackMember<'_>> = readers
        .iter_mut()
        .zip(files.iter().zip(oids))
        .map(|(r, (f, oid))| PackMember {
            reader: r,
            oid: *oid,
            size: f.len() as u64,
        })
        .collect();
    upload_pack(store, &mut members, options, &mut |_| {})
}

#[test]
fn a_pack_of_small_files_is_one_xorb_and_one_shard() {
    let (_d, store) = store();
    let files = small_files(24);
    let oids: Vec<LfsOid> = files.iter().map(|f| LfsOid::of(f)).collect();
    let options = UploadOptions {
        sha256_declared_by_namer: true,
        ..Default::default()
    };
    let s = pack(&store, &files, &oids, &options).unwrap();
    assert_eq!(s.files.len(), files.len());
    assert_eq!((s.new_xorbs, s.shards), (1, 1));
    assert_eq!(xorb_count(&store), 1);
    assert_eq!(store.counts().unwrap().files, files.len() as u64);
    for (f, (data, oid)) in s.files.iter().zip(files.iter().zip(&oids)) {
        assert_eq!((f.oid, f.size), (*oid, data.len() as u64));
        // Each member is chunked on its own: its hash is the one of the file alone.
        assert_eq!(
            f.file_hash,
            xet_client::pipeline::hasher::hash_bytes(data, Default::default()).file_hash
        );
        assert_eq!(download(&store, oid), *data);
    }
    let echo = s.files.last().unwrap();
    assert!(
        echo.dedup_bytes > 100 << 10,
        "the last member repeats the first: {echo:?}"
    );
    assert_eq!(s.files[0].dedup_bytes, 0);

    // A pack of the same files again stores nothing new.
    let again = pack(&store, &files, &oids, &options).unwrap();
    assert_eq!(again.new_xorbs, 0);
    assert_eq!(xorb_count(&store), 1);
}

#[test]
fn a_pack_spills_into_more_xorbs_but_keeps_one_shard() {
    let (_d, store) = store();
    let files = small_files(12);
    let oids: Vec<LfsOid> = files.iter().map(|f| LfsOid::of(f)).collect();
    let options = UploadOptions {
        limits: XorbLimits {
            max_chunks: 5,
            ..XorbLimits::CLIENT
        },
        ..Default::default()
    };
    let s = pack(&store, &files, &oids, &options).unwrap();
    assert!(s.new_xorbs > 2, "{s:?}");
    assert_eq!(s.shards, 1);
    assert!(s.sha256_computed, "not declared by the namer: hashed here");
    for (data, oid) in files.iter().zip(&oids) {
        assert_eq!(download(&store, oid), *data);
    }
}

#[test]
fn a_pack_with_a_wrong_member_registers_nothing_and_names_it() {
    let (_d, store) = store();
    let files = small_files(6);
    let mut oids: Vec<LfsOid> = files.iter().map(|f| LfsOid::of(f)).collect();
    oids[3] = LfsOid::of(b"not these bytes");
    let e = pack(&store, &files, &oids, &UploadOptions::default()).unwrap_err();
    assert!(
        matches!(&e, UploadError::Member { oid, source }
            if *oid == oids[3] && matches!(**source, UploadError::Sha256Mismatch { .. })),
        "{e}"
    );
    assert!(e.is_input_error());
    assert!(e.to_string().contains(&oids[3].to_hex()), "{e}");
    assert_eq!(store.counts().unwrap().files, 0, "no shard registered");

    // A member shorter than declared fails the same way.
    let mut short = files.clone();
    short[1].pop();
    let right: Vec<LfsOid> = files.iter().map(|f| LfsOid::of(f)).collect();
    let mut readers: Vec<&[u8]> = short.iter().map(|f| &f[..]).collect();
    let mut members: Vec<PackMember<'_>> = readers
        .iter_mut()
        .zip(files.iter().zip(&right))
        .map(|(r, (f, oid))| PackMember {
            reader: r,
            oid: *oid,
            size: f.len() as u64,
        })
        .collect();
    let e = upload_pack(&store, &mut members, &UploadOptions::default(), &mut |_| {}).unwrap_err();
    assert!(
        matches!(&e, UploadError::Member { source, .. } if matches!(**source, UploadError::TooShort { .. })),
        "{e}"
    );
    assert_eq!(store.counts().unwrap().files, 0);
}

/// Where each chunk of the stored `file` is: the seeds an earlier version of a file gives an
/// upload (`upload_with_seeds`).
fn seeds_of(store: &Store, file: &FileHash) -> Vec<(ChunkHash, XorbHash, u32)> {
    let record = store.file(file).unwrap().expect("registered");
    let mut seeds = Vec::new();
    for t in &record.terms {
        let footer = store.footer(&t.xorb).unwrap().unwrap();
        for i in t.chunk_start..t.chunk_end {
            seeds.push((footer.chunk_hashes[i as usize], t.xorb, i));
        }
    }
    seeds
}

/// `data` with `inserted` put in at `at`, and 100 bytes changed 2 MiB before its end.
fn with_inserted(data: &[u8], at: usize, inserted: &[u8]) -> Vec<u8> {
    let mut out: Vec<u8> = data[..at]
        .iter()
        .chain(inserted)
        .chain(&data[at..])
        .copied()
        .collect();
    let edit = out.len() - (2 << 20);
    for b in &mut out[edit..edit + 100] {
        *b ^= 0x5a;
    }
    out
}

/// The store, as Hugging Face's server (or an older one of ours) is seen: it does not say it
/// indexes dense keys. Every query is recorded.
struct Plain<'a> {
    store: &'a Store,
    dense_keys: bool,
    queries: Mutex<Vec<ChunkHash>>,
}

impl<'a> Plain<'a> {
    fn new(store: &'a Store, dense_keys: bool) -> Self {
        Self {
            store,
            dense_keys,
            queries: Mutex::new(Vec::new()),
        }
    }
}

impl CasTarget for Plain<'_> {
    fn has_xorb(&self, xorb: &XorbHash) -> Result<bool, TargetError> {
        CasTarget::has_xorb(self.store, xorb)
    }
    fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, TargetError> {
        CasTarget::put_xorb(self.store, xorb, body)
    }
    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        CasTarget::register_shard(self.store, shard)
    }
    fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        self.queries.lock().unwrap().push(*chunk);
        CasTarget::dedup_query(self.store, chunk)
    }
    fn dense_key_modulus(&self) -> Option<u64> {
        self.dense_keys.then_some(DENSE_KEY_MODULUS)
    }
}

/// Stores `other` (a file another repository pushed) and `v1`; then uploads `v2` with `v1`'s
/// seeds through `target`.
fn upload_over_history(
    store: &Store,
    target: &dyn CasTarget,
    other: &[u8],
    v1: &[u8],
    v2: &[u8],
) -> UploadSummary {
    upload(store, other, &UploadOptions::default()).unwrap();
    let first = upload(store, v1, &UploadOptions::default()).unwrap();
    let seeds = seeds_of(store, &first.file_hash);
    let s = upload_with_seeds(target, v2, &UploadOptions::default(), &seeds, &mut |_| {}).unwrap();
    assert_eq!(download(store, &s.sha256), v2);
    assert!(s.history_dedup_bytes > 8 << 20, "{s:?}");
    s
}

#[test]
fn history_seeds_do_not_stop_queries_about_a_region_another_file_stored() {
    // Another repository's adapter: a header, then 15 MiB of tensors. This repository's v2
    // inserts those tensors into its model, whose v1 is the earlier version (the seeds).
    let tensors = random_bytes(131, 15 << 20);
    let adapter: Vec<u8> = random_bytes(132, 200)
        .into_iter()
        .chain(tensors.clone())
        .collect();
    let v1 = random_bytes(133, 12 << 20);
    let v2 = with_inserted(&v1, (5 << 20) + 12_345, &tensors);

    let (_d, store) = store();
    let target = Plain::new(&store, true);
    let s = upload_over_history(&store, &target, &adapter, &v1, &v2);
    eprintln!("tensors inserted, run probes: {s:?}");
    assert!(
        s.uploaded_bytes < 1 << 20,
        "sent {} bytes",
        s.uploaded_bytes
    );
    assert!(s.probe_queries >= 1, "{s:?}");
    // The first chunk is asked about although v1 covers it.
    let queries = target.queries.lock().unwrap();
    assert_eq!(queries.first(), Some(&seeds_of(&store, &s.file_hash)[0].0));

    // A server that does not say it indexes dense keys (Hugging Face's) gets no run probes:
    // the first chunk, the eligible ones, nothing else (v1 covers the file's start).
    let (_d2, plain) = crate::store();
    let target = Plain::new(&plain, false);
    let s = upload_over_history(&plain, &target, &adapter, &v1, &v2);
    eprintln!("tensors inserted, no run probes: {s:?}");
    assert_eq!(s.probe_queries, 0, "{s:?}");
    let queries = target.queries.lock().unwrap();
    assert!(queries[1..].iter().all(|q| q.is_global_dedup_eligible()));
}

#[test]
fn a_region_from_the_middle_of_another_file_is_found_by_its_dense_keys() {
    // 15 MiB from the middle of another file: no chunk of it is that file's first or probe.
    let other = random_bytes(141, 40 << 20);
    let region = &other[(17 << 20) + 999..(32 << 20) + 999];
    let v1 = random_bytes(142, 12 << 20);
    for at in [(5 << 20) + 12_345, (8 << 20) - 70_000] {
        let v2 = with_inserted(&v1, at, region);
        let (_d, store) = store();
        let target = Plain::new(&store, true);
        let s = upload_over_history(&store, &target, &other, &v1, &v2);
        eprintln!("a middle region inserted at {at}: {s:?}");
        assert!(
            s.uploaded_bytes < 3_000_000,
            "sent {} bytes",
            s.uploaded_bytes
        );
    }
}

#[test]
fn run_probes_of_new_data_are_bounded() {
    let (_d, store) = store();
    let data = random_bytes(151, 96 << 20);
    let target = Plain::new(&store, true);
    let s = upload(&target, &data[..], &UploadOptions::default()).unwrap();
    eprintln!("96 MiB of new data: {s:?}");
    assert_eq!(s.dedup_chunks, 0);
    // The file-start probes, then dense keys, thinning out as they miss.
    let dense = xet_format::dedup::DENSE_MISSES_PER_LEVEL as u64 * 4;
    assert!(s.probe_queries > MAX_PROBES as u64, "{s:?}");
    assert!(s.probe_queries <= MAX_PROBES as u64 + dense, "{s:?}");
    // Every other query is of the first chunk or an eligible one, asked about anyway.
    let anyway = data_chunks(&data)
        .iter()
        .enumerate()
        .filter(|(i, h)| *i == 0 || h.is_global_dedup_eligible())
        .count() as u64;
    assert_eq!(s.dedup_queries, anyway + s.probe_queries, "{s:?}");

    // Without dense keys: the file-start probes only, as before.
    let (_d2, plain) = crate::store();
    let target = Plain::new(&plain, false);
    let s = upload(&target, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(s.probe_queries, MAX_PROBES as u64, "{s:?}");
}

/// The chunk hashes of `data`.
fn data_chunks(data: &[u8]) -> Vec<ChunkHash> {
    let mut start = 0;
    xet_format::chunking::chunk_boundaries(data)
        .into_iter()
        .map(|end| {
            let h = ChunkHash::of(&data[start..end]);
            start = end;
            h
        })
        .collect()
}

#[test]
fn the_store_indexes_the_dense_keys_of_every_xorb() {
    let (_d, store) = store();
    let data = random_bytes(161, 64 << 20);
    let before = store.counts().unwrap();
    let s = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    let after = store.counts().unwrap();
    let hashes = data_chunks(&data);
    let dense: Vec<_> = hashes.iter().filter(|h| is_dense_key(h)).collect();
    let eligible = hashes
        .iter()
        .filter(|h| h.is_global_dedup_eligible())
        .count();
    eprintln!(
        "64 MiB, {} chunks: {} dense keys ({} eligible); index dedup rows {} -> {}",
        s.chunks,
        dense.len(),
        eligible,
        before.dedup_chunks,
        after.dedup_chunks
    );
    for h in &dense {
        assert!(store.dedup_shard(h).unwrap().is_some());
    }
    // The dense keys, plus the file's first chunk and file-start probes (some may be dense).
    let indexed = after.dedup_chunks - before.dedup_chunks;
    assert!(indexed >= dense.len() as u64);
    assert!(
        indexed <= (dense.len() + 1 + MAX_PROBES) as u64,
        "{indexed}"
    );
}

#[test]
fn small_files_cost_at_most_one_dedup_query_each() {
    let (_d, store) = store();
    let files = small_files(24);
    let oids: Vec<LfsOid> = files.iter().map(|f| LfsOid::of(f)).collect();
    // A pack (how the agent pushes objects under 1 MiB): no query at all.
    let target = Plain::new(&store, true);
    let mut readers: Vec<&[u8]> = files.iter().map(|f| &f[..]).collect();
    let mut members: Vec<PackMember<'_>> = readers
        .iter_mut()
        .zip(files.iter().zip(&oids))
        .map(|(r, (f, oid))| PackMember {
            reader: r,
            oid: *oid,
            size: f.len() as u64,
        })
        .collect();
    upload_pack(
        &target,
        &mut members,
        &UploadOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(target.queries.lock().unwrap().len(), 0);
    // One at a time, with their sizes declared: the first chunk each, no probes.
    let (_d2, alone) = crate::store();
    let target = Plain::new(&alone, true);
    for f in &files {
        let options = UploadOptions {
            expected_size: Some(f.len() as u64),
            ..UploadOptions::default()
        };
        let s = upload(&target, &f[..], &options).unwrap();
        assert_eq!((s.dedup_queries, s.probe_queries), (1, 0), "{s:?}");
    }
}

/// A source that hands ranges over in 16 KiB pieces, as a connection does, and breaks down
/// once `budget` bytes have gone (an interrupted download); counts the bytes handed over.
struct Budgeted<'a> {
    store: &'a Store,
    budget: u64,
    sent: std::sync::atomic::AtomicU64,
}

impl<'a> Budgeted<'a> {
    fn new(store: &'a Store, budget: u64) -> Self {
        Self {
            store,
            budget,
            sent: Default::default(),
        }
    }

    /// Takes `n` bytes of the budget; `false` once it is spent.
    fn spend(&self, n: u64) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.sent
            .fetch_update(SeqCst, SeqCst, |s| (s + n <= self.budget).then_some(s + n))
            .is_ok()
    }

    fn sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn connection_reset() -> TargetError {
    TargetError::Remote {
        what: "GET xorb".into(),
        message: "connection reset".into(),
        retryable: true,
        code: None,
    }
}

impl XorbSource for Budgeted<'_> {
    fn read_xorb_range(
        &self,
        xorb: &xet_format::XorbHash,
        range: &xet_protocol::FetchRange,
    ) -> Result<Vec<u8>, TargetError> {
        let bytes = XorbSource::read_xorb_range(self.store, xorb, range)?;
        if !self.spend(bytes.len() as u64) {
            return Err(connection_reset());
        }
        Ok(bytes)
    }

    fn stream_xorb_range(
        &self,
        xorb: &xet_format::XorbHash,
        range: &xet_protocol::FetchRange,
        sink: &mut xet_protocol::RangeSink<'_>,
    ) -> Result<(), TargetError> {
        let bytes = XorbSource::read_xorb_range(self.store, xorb, range)?;
        let mut at = 0u64;
        for piece in bytes.chunks(16 << 10) {
            if !self.spend(piece.len() as u64) {
                return Err(connection_reset());
            }
            if sink(at, piece).is_break() {
                return Ok(());
            }
            at += piece.len() as u64;
        }
        Ok(())
    }
}

/// The bytes of every fetch range of `plan`.
fn range_bytes(plan: &xet_protocol::ReconstructionPlan) -> u64 {
    plan.fetch
        .iter()
        .flat_map(|(_, r)| r)
        .map(|r| r.bytes.end() - r.bytes.start() + 1)
        .sum()
}

/// A new partial file of the download of `data` (stored as `file`) in `path`.
fn new_part(
    path: &std::path::Path,
    data: &[u8],
    file: &FileHash,
) -> xet_client::pipeline::resume::PartialFile {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    xet_client::pipeline::resume::PartialFile::create(f, &LfsOid::of(data), file, data.len() as u64)
        .unwrap()
}

/// The partial file in `path` a download of `data` left, reopened.
fn reopen_part(
    path: &std::path::Path,
    data: &[u8],
    file: &FileHash,
) -> xet_client::pipeline::resume::PartialFile {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    xet_client::pipeline::resume::PartialFile::reopen(f, &LfsOid::of(data), file, data.len() as u64)
        .unwrap()
        .expect("a record of the interrupted download")
}

/// 24 MiB in xorbs of 64 chunks (about 4 MiB each): a plan of several ranges, each read
/// forward once.
fn many_ranges_file(
    store: &Store,
    seed: u64,
) -> (
    Vec<u8>,
    xet_client::pipeline::upload::UploadSummary,
    xet_protocol::ReconstructionPlan,
) {
    let data = random_bytes(seed, 24 << 20);
    let options = UploadOptions {
        limits: XorbLimits {
            max_chunks: 64,
            ..XorbLimits::CLIENT
        },
        ..Default::default()
    };
    let s = upload(store, &data[..], &options).unwrap();
    let plan = store.reconstruction(&s.file_hash, None).unwrap().unwrap();
    (data, s, plan)
}

#[test]
fn an_interrupted_download_resumes_from_what_its_partial_file_recorded() {
    use xet_client::pipeline::download::write_part;
    use xet_client::pipeline::prior::LocalChunks;
    let (_d, store) = store();
    let (data, s, plan) = many_ranges_file(&store, 41);
    assert!(plan.fetch.len() >= 4, "{} xorbs", plan.fetch.len());
    let total = range_bytes(&plan);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("object.part");

    // Half way, the connection breaks.
    let part = new_part(&path, &data, &s.file_hash);
    let cut = Budgeted::new(&store, total / 2);
    let e = write_part(&cut, &plan, &part, &LocalChunks::default(), &mut |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("connection reset"), "{e}");
    let recorded = part.resumable();
    drop(part);

    // The next download takes what was recorded and fetches the rest only.
    let part = reopen_part(&path, &data, &s.file_hash);
    assert_eq!(part.found(), recorded);
    let again = Budgeted::new(&store, u64::MAX);
    let mut seen = Vec::new();
    let w = write_part(&again, &plan, &part, &LocalChunks::default(), &mut |n| {
        seen.push(n);
        Ok(())
    })
    .unwrap();
    assert_eq!(w.written, data.len() as u64);
    assert_eq!(w.resumed, recorded, "every recorded stretch is taken");
    assert!(
        recorded > total / 4,
        "{recorded} of {total} bytes recorded when the connection broke half way"
    );
    // Stored chunks of incompressible data are no smaller than the bytes they decode to.
    assert!(
        again.sent() + w.resumed <= total,
        "{} bytes fetched again, {} kept, of {total}",
        again.sent(),
        w.resumed
    );
    assert!(seen.last().is_some_and(|&n| n == w.written), "{seen:?}");
    part.finish().unwrap();
    drop(part);
    assert!(std::fs::read(&path).unwrap() == data);
}

#[test]
fn recorded_bytes_are_checked_before_they_are_kept() {
    use xet_client::pipeline::download::{write_part, DownloadError};
    use xet_client::pipeline::prior::LocalChunks;
    use xet_client::pipeline::resume::Extent;
    use xet_format::{ChunkHash, ChunkRef};
    let (_d, store) = store();
    let (data, s, plan) = many_ranges_file(&store, 42);
    let total = range_bytes(&plan);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("object.part");
    let interrupt = |path: &std::path::Path| {
        let part = new_part(path, &data, &s.file_hash);
        let cut = Budgeted::new(&store, total / 2);
        write_part(&cut, &plan, &part, &LocalChunks::default(), &mut |_| Ok(())).unwrap_err();
        part.resumable()
    };

    // A byte of what was recorded changed since (the page never reached the disk before a
    // crash, say): its stretch is fetched again, and the file comes out right.
    let recorded = interrupt(&path);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[data[100] ^ 0xff], 100).unwrap();
    drop(file);
    let part = reopen_part(&path, &data, &s.file_hash);
    let again = Budgeted::new(&store, u64::MAX);
    let w = write_part(&again, &plan, &part, &LocalChunks::default(), &mut |_| {
        Ok(())
    })
    .unwrap();
    assert!(w.resumed < recorded, "{} of {recorded} kept", w.resumed);
    part.finish().unwrap();
    drop(part);
    assert!(std::fs::read(&path).unwrap() == data);

    // A record that names other bytes than the file's (hashes that match what is written,
    // but not the stored file): the Xet file hash at the end refuses the result, and a
    // restart without the record gets it right.
    let (first, xorb_range) = {
        let (xorb, ranges) = &plan.fetch[0];
        (*xorb, ranges[0].clone())
    };
    assert_eq!(plan.terms[0].xorb, first);
    let forged = vec![7u8; plan.terms[0].unpacked_len as usize];
    let part = new_part(&path, &data, &s.file_hash);
    xet_client::pipeline::download::WriteAt::write_all_at(&part, &forged, 0).unwrap();
    // All of the first term's chunks, as one chunk of the forged bytes (the chunk count is
    // the plan's, so that the stretch fits the term).
    let n = plan.terms[0].chunks.len();
    let mut chunks = Vec::new();
    let per = forged.len() / n;
    for k in 0..n {
        let piece = if k + 1 == n {
            &forged[k * per..]
        } else {
            &forged[k * per..(k + 1) * per]
        };
        chunks.push(ChunkRef::new(ChunkHash::of(piece), piece.len() as u64));
    }
    let whole = xorb_range.chunks.end == plan.terms[0].chunks.end;
    assert!(whole, "the first term uses its whole range in this file");
    part.record(&Extent {
        at: 0,
        xorb: first,
        from: (xorb_range.chunks.start, *xorb_range.bytes.start()),
        to: (xorb_range.chunks.end, xorb_range.bytes.end() + 1),
        chunks,
    })
    .unwrap();
    drop(part);
    let part = reopen_part(&path, &data, &s.file_hash);
    let e = write_part(&store, &plan, &part, &LocalChunks::default(), &mut |_| {
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(e, DownloadError::WrongFile { .. }), "{e}");
    part.restart(&LfsOid::of(&data)).unwrap();
    let w = write_part(&store, &plan, &part, &LocalChunks::default(), &mut |_| {
        Ok(())
    })
    .unwrap();
    assert_eq!((w.written, w.resumed), (data.len() as u64, 0));
    part.finish().unwrap();
    drop(part);
    assert!(std::fs::read(&path).unwrap() == data);
}

#[test]
fn steps_decoded_from_a_shared_range_resume_whole() {
    use xet_client::pipeline::download::write_part;
    use xet_client::pipeline::prior::LocalChunks;
    let (_d, store) = store();
    let (data, s, plan) = repeated_block_file(&store, 43);
    let ranges: usize = plan.fetch.iter().map(|(_, r)| r.len()).sum();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("object.part");
    let part = new_part(&path, &data, &s.file_hash);
    let cut = FlakySource {
        store: &store,
        fail_at: ranges / 2,
        calls: Default::default(),
    };
    write_part(&cut, &plan, &part, &LocalChunks::default(), &mut |_| Ok(())).unwrap_err();
    let recorded = part.resumable();
    assert!(recorded > 0);
    drop(part);
    let part = reopen_part(&path, &data, &s.file_hash);
    let again = CountingSource(&store, Default::default());
    let w = write_part(&again, &plan, &part, &LocalChunks::default(), &mut |_| {
        Ok(())
    })
    .unwrap();
    assert_eq!(w.resumed, recorded);
    let fetches = again.1.load(std::sync::atomic::Ordering::SeqCst);
    assert!(fetches < ranges, "{fetches} fetches of {ranges} ranges");
    part.finish().unwrap();
    drop(part);
    assert!(std::fs::read(&path).unwrap() == data);
}

/// The bytes of a plan's fetch ranges of xorbs other than `except`.
fn range_bytes_except(
    plan: &xet_protocol::ReconstructionPlan,
    except: &[xet_format::XorbHash],
) -> u64 {
    plan.fetch
        .iter()
        .filter(|(x, _)| !except.contains(x))
        .flat_map(|(_, ranges)| ranges.iter())
        .map(|r| r.bytes.end() - r.bytes.start() + 1)
        .sum()
}

#[test]
fn a_download_says_what_it_fetched_and_what_the_chunk_cache_served() {
    use xet_client::pipeline::cached::Cached;
    use xet_client::pipeline::download::{write_file_at_with, Written};
    use xet_client::pipeline::prior::LocalChunks;
    use xet_client::{ChunkCache, ShardCache};
    use xet_protocol::Tallied;

    let (d, store) = store();
    let cached = Cached::new(&store, ShardCache::open(&d.path().join("shards")))
        .with_chunk_cache(ChunkCache::open(&d.path().join("chunks")));
    let v1 = random_bytes(91, 6 << 20);
    let s1 = upload(&store, &v1[..], &UploadOptions::default()).unwrap();
    let plan1 = store.reconstruction(&s1.file_hash, None).unwrap().unwrap();
    let xorbs1: Vec<_> = plan1.fetch.iter().map(|(x, _)| *x).collect();
    let get = |hash: &FileHash, plan: &xet_protocol::ReconstructionPlan| -> (Written, u64) {
        let source = Tallied::new(&cached);
        let out = MemFile::default();
        let w = write_file_at_with(
            &source,
            hash,
            plan,
            &out,
            &LocalChunks::default(),
            &mut |_| Ok(()),
        )
        .unwrap();
        (w, source.fetched())
    };

    // The first download fetches every range: stored xorb bytes, not file bytes.
    let (w, tallied) = get(&s1.file_hash, &plan1);
    let ranges = range_bytes_except(&plan1, &[]);
    assert_eq!(w.written, v1.len() as u64);
    assert_eq!((w.fetched, tallied, w.cached), (ranges, ranges, 0), "{w:?}");
    // Again: all of it from the chunk cache.
    let (w, tallied) = get(&s1.file_hash, &plan1);
    assert_eq!(
        (w.fetched, tallied, w.cached),
        (0, 0, v1.len() as u64),
        "{w:?}"
    );

    // An edit of the last 2 MiB: the first 4 MiB come from the cache, only the new xorb's
    // range crosses.
    let mut v2 = v1.clone();
    for b in &mut v2[4 << 20..] {
        *b ^= 0x5a;
    }
    let s2 = upload(&store, &v2[..], &UploadOptions::default()).unwrap();
    let plan2 = store.reconstruction(&s2.file_hash, None).unwrap().unwrap();
    let (w, tallied) = get(&s2.file_hash, &plan2);
    let new_ranges = range_bytes_except(&plan2, &xorbs1);
    let new_file_bytes: u64 = plan2
        .terms
        .iter()
        .filter(|t| !xorbs1.contains(&t.xorb))
        .map(|t| u64::from(t.unpacked_len))
        .sum();
    assert!(new_ranges > 0 && new_file_bytes > 0);
    assert_eq!((w.fetched, tallied), (new_ranges, new_ranges), "{w:?}");
    assert_eq!(w.cached, v2.len() as u64 - new_file_bytes, "{w:?}");
    assert!(w.cached >= 3 << 20, "{w:?}");
}

#[test]
fn bounded_plans_rebuild_the_same_file_in_small_pieces() {
    let (_d, store) = store();
    // 3 MiB of random bytes, its first MiB twice more: terms that return to a range.
    let mut data = random_bytes(12, 3 << 20);
    let head = data[..1 << 20].to_vec();
    data.extend_from_slice(&head);
    data.extend_from_slice(&head);
    let s = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    let whole = store.reconstruction(&s.file_hash, None).unwrap().unwrap();
    let max = 256 << 10;
    let plan = store
        .reconstruction_bounded(&s.file_hash, max)
        .unwrap()
        .unwrap();
    assert_eq!(plan.file_size, whole.file_size);
    assert!(plan.terms.len() > whole.terms.len());
    let largest = |p: &xet_protocol::ReconstructionPlan| {
        (p.fetch.iter().flat_map(|(_, r)| r))
            .map(|r| r.bytes.end() - r.bytes.start() + 1)
            .max()
            .unwrap()
    };
    assert!(largest(&whole) > 2 << 20);
    // A chunk is at most 128 KiB (and its header): no range holds more than `max` and a chunk.
    assert!(largest(&plan) <= max + (130 << 10), "{}", largest(&plan));
    assert!(rebuilt(&store, &s.file_hash, &plan) == data);
}
