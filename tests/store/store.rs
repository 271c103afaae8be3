//! The storage engine with the reference client's real objects: every fixture xorb and shard is
//! uploaded, every file is rebuilt from its reconstruction plan (whole and in ranges), and every
//! refusal of docs/cas-api.md §9 is checked; the index survives reopening.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;

use std::collections::HashMap;

use xet_format::hash::verification_hash;
use xet_format::shard::Shard;
use xet_format::xorb::ParsedXorb;
use xet_format::{FileHash, LfsOid, VerificationHash, XorbHash};
use xet_protocol::ReconstructionPlan;
use xet_store::{ShardRejection, Store, StoreError};

/// Upload bodies (chunk regions) of every fixture xorb.
fn bodies() -> Vec<(XorbHash, Vec<u8>)> {
    let m = common::manifest();
    let mut out = Vec::new();
    for s in &m.sessions {
        for rel in &s.xorbs {
            let stored = common::read(rel);
            let parsed = ParsedXorb::parse(&stored).unwrap();
            out.push((parsed.hash(), parsed.chunk_region().to_vec()));
        }
    }
    out
}

/// The upload form of every fixture session's server shard, in session order.
fn upload_shards() -> Vec<Vec<u8>> {
    let m = common::manifest();
    m.sessions
        .iter()
        .map(|s| {
            Shard::from_bytes(&common::read(&s.shards[0]))
                .unwrap()
                .to_upload_bytes()
                .unwrap()
        })
        .collect()
}

fn loaded_store(dir: &std::path::Path) -> Store {
    let store = Store::open(dir).unwrap();
    for (hash, body) in bodies() {
        assert!(store.put_xorb(hash, &body).unwrap(), "xorb {hash} is new");
    }
    for shard in upload_shards() {
        let outcome = store.register_shard(&shard, &mut |_| {}).unwrap();
        assert!(outcome.newly_registered);
    }
    store
}

/// Rebuilds the bytes a plan describes by fetching and decoding its byte ranges.
fn rebuild(store: &Store, plan: &ReconstructionPlan) -> Vec<u8> {
    let mut fetched: HashMap<(XorbHash, u32), Vec<u8>> = HashMap::new();
    for (xorb, ranges) in &plan.fetch {
        for r in ranges {
            let bytes = store.read_xorb(xorb, r.bytes.clone()).unwrap().unwrap();
            // A fetched range is a run of whole chunks: it parses as a (smaller) upload body.
            let part = ParsedXorb::parse(&bytes).unwrap();
            for (i, _) in part.chunks().iter().enumerate() {
                fetched.insert(
                    (*xorb, r.chunks.start + i as u32),
                    part.extract(i..i + 1).unwrap(),
                );
            }
        }
    }
    let mut out = Vec::new();
    for term in &plan.terms {
        let before = out.len();
        for c in term.chunks.clone() {
            out.extend_from_slice(&fetched[&(term.xorb, c)]);
        }
        assert_eq!(out.len() - before, term.unpacked_len as usize);
    }
    out.drain(..plan.offset_into_first_range as usize);
    out
}

#[test]
fn reference_uploads_register_and_rebuild_whole_and_in_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let store = loaded_store(dir.path());
    let m = common::manifest();
    let mut checked = 0;
    for file in m.sessions.iter().flat_map(|s| &s.files) {
        let hash = FileHash::from_hex(&file.xet_hash).unwrap();
        let content = file.content();
        let plan = store
            .reconstruction(&hash, None)
            .unwrap()
            .expect("registered");
        assert_eq!(plan.file_size, file.size);
        assert_eq!(rebuild(&store, &plan), content, "{}", file.name);
        // Ranges: a few bytes at the start, a span across chunk boundaries, the last byte, and
        // an end past the file (clamped).
        let n = content.len() as u64;
        let ranges = if n == 0 {
            Vec::new()
        } else {
            vec![
                (0, 0),
                (n / 3, 2 * n / 3),
                (n - 1, n - 1),
                (n / 2, n + 1000),
            ]
        };
        for (s, e) in ranges {
            let plan = store.reconstruction(&hash, Some((s, e))).unwrap().unwrap();
            let want = &content[s as usize..=(e.min(n - 1)) as usize];
            let mut got = rebuild(&store, &plan);
            got.truncate(want.len());
            assert_eq!(got, want, "{} bytes {s}-{e}", file.name);
        }
        if n > 0 {
            assert!(matches!(
                store.reconstruction(&hash, Some((n, n + 5))),
                Err(StoreError::Plan { .. })
            ));
            // The LFS oid finds the file.
            let oid = LfsOid::from_hex(&file.sha256).unwrap();
            assert_eq!(store.file_by_oid(&oid).unwrap(), Some((hash, n)));
        }
        checked += 1;
    }
    assert_eq!(checked, 10);
    let unknown = FileHash::from_bytes([0xab; 32]);
    assert_eq!(store.reconstruction(&unknown, None).unwrap(), None);
}

#[test]
fn uploads_are_idempotent_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let counts = {
        let store = loaded_store(dir.path());
        for (hash, body) in bodies() {
            assert!(
                !store.put_xorb(hash, &body).unwrap(),
                "second upload is not an insert"
            );
        }
        for shard in upload_shards() {
            let again = store.register_shard(&shard, &mut |_| {}).unwrap();
            assert!(!again.newly_registered);
        }
        store.counts().unwrap()
    };
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.counts().unwrap(), counts);
    assert_eq!(counts.files, 10);
    let m = common::manifest();
    let hello = &m.sessions[0].files[0];
    let plan = store
        .reconstruction(&FileHash::from_hex(&hello.xet_hash).unwrap(), None)
        .unwrap()
        .unwrap();
    assert_eq!(rebuild(&store, &plan), b"Hello World!");
}

#[test]
fn first_chunks_of_files_answer_dedup_queries() {
    let dir = tempfile::tempdir().unwrap();
    let store = loaded_store(dir.path());
    let m = common::manifest();
    let text = m.sessions.iter().find(|s| s.name == "text").unwrap();
    let xorb_hash = XorbHash::from_hex(
        text.xorbs[0]
            .rsplit('/')
            .next()
            .unwrap()
            .trim_end_matches(".xorb"),
    )
    .unwrap();
    let footer = store.footer(&xorb_hash).unwrap().unwrap();
    let first = footer.chunk_hashes[0];
    let shard = store
        .dedup_shard(&first)
        .unwrap()
        .expect("first chunk of text-300k.txt");
    assert!(shard.files.is_empty());
    assert_eq!(shard.xorbs.len(), 1);
    assert_eq!(shard.xorbs[0].hash, xorb_hash);
    assert_eq!(shard.xorbs[0].chunks[0].hash, first);
    // The next chunks are dedup probes (docs/format.md §5.5), indexed too; a chunk that is
    // neither first, nor a probe, nor a dense key (hash % 64 == 0, every eligible chunk among
    // them) is not.
    let probe = footer.chunk_hashes[1];
    assert!(store.dedup_shard(&probe).unwrap().is_some());
    assert!(footer.num_chunks() > 3 && text.files[0].size < 1 << 20);
    let other = footer.chunk_hashes[3];
    assert_eq!(
        store.dedup_shard(&other).unwrap().is_some(),
        xet_format::dedup::is_dense_key(&other)
    );
}

/// The hello-and-zeros shard, parsed, for tampering.
fn hello_shard() -> Shard {
    let m = common::manifest();
    Shard::from_bytes(&common::read(&m.sessions[0].shards[0])).unwrap()
}

fn store_with_hello_xorb(dir: &std::path::Path) -> Store {
    let store = Store::open(dir).unwrap();
    let (hash, body) = bodies().into_iter().next().unwrap();
    store.put_xorb(hash, &body).unwrap();
    store
}

/// The wire code the server answers `r` with.
fn code(r: &ShardRejection) -> &'static str {
    git_xet::server::error::shard_rejection_code(r).as_str()
}

fn rejection(store: &Store, shard: &Shard) -> ShardRejection {
    let bytes = shard.to_upload_bytes().unwrap();
    match store.register_shard(&bytes, &mut |_| {}) {
        Err(StoreError::ShardRejected(r)) => r,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn shards_that_lie_are_refused_and_register_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_hello_xorb(dir.path());
    let good = hello_shard();

    let mut s = good.clone();
    s.files[0].verification.as_mut().unwrap()[0] = VerificationHash::from_bytes([1; 32]);
    assert_eq!(code(&rejection(&store, &s)), "verification_mismatch");

    let mut s = good.clone();
    s.files[0].hash = FileHash::from_bytes([2; 32]);
    assert_eq!(code(&rejection(&store, &s)), "file_hash_mismatch");

    let mut s = good.clone();
    s.files[0].terms[0].unpacked_segment_bytes += 1;
    assert_eq!(code(&rejection(&store, &s)), "unpacked_length_mismatch");

    let mut s = good.clone();
    s.files[0].terms[0].chunk_index_end = 99;
    assert_eq!(code(&rejection(&store, &s)), "chunk_range");

    let mut s = good.clone();
    s.files[0].verification = None;
    assert_eq!(code(&rejection(&store, &s)), "missing_verification");

    let mut s = good.clone();
    s.files[0].terms[0].xorb_hash = XorbHash::from_bytes([3; 32]);
    assert_eq!(code(&rejection(&store, &s)), "unknown_xorb");

    let mut s = good.clone();
    s.xorbs[0].chunks[0].unpacked_segment_bytes += 1;
    assert_eq!(code(&rejection(&store, &s)), "xorb_block_mismatch");

    // A verification hash computed over the right chunks passes that check: the refusal above
    // really compares against the stored xorb.
    let footer = store
        .footer(&good.files[0].terms[0].xorb_hash)
        .unwrap()
        .unwrap();
    let t = &good.files[0].terms[0];
    let expected = verification_hash(
        &footer.chunk_hashes[t.chunk_index_start as usize..t.chunk_index_end as usize],
    );
    assert_eq!(good.files[0].verification.as_ref().unwrap()[0], expected);

    assert_eq!(
        store.counts().unwrap().files,
        0,
        "nothing registered by refused shards"
    );
    assert_eq!(store.counts().unwrap().shards, 0);
    let bytes = good.to_upload_bytes().unwrap();
    assert!(
        store
            .register_shard(&bytes, &mut |_| {})
            .unwrap()
            .newly_registered
    );
    assert_eq!(store.counts().unwrap().files, 2);
}

#[test]
fn malformed_and_mismatched_xorbs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (hash, body) = bodies().into_iter().next().unwrap();
    let wrong = XorbHash::from_bytes([5; 32]);
    let err = store.put_xorb(wrong, &body).unwrap_err();
    assert!(err.is_client_error());
    assert!(err.to_string().contains(&hash.to_hex()), "{err}");
    let mut bad = body.clone();
    bad[4] = 9;
    assert!(store.put_xorb(hash, &bad).unwrap_err().is_client_error());
    assert!(store
        .put_xorb(hash, &body[..body.len() - 1])
        .unwrap_err()
        .is_client_error());
    assert!(store.put_xorb(hash, &[]).unwrap_err().is_client_error());
    assert!(!store.has_xorb(&hash).unwrap());
    // A body that ends with a valid footer (older clients) is accepted.
    let m = common::manifest();
    let stored = common::read(&m.sessions[0].xorbs[0]);
    let with_footer = &stored[..stored.len() - 4];
    assert!(store.put_xorb(hash, with_footer).unwrap());
    assert_eq!(
        store
            .read_xorb(&hash, 0..=(stored.len() as u64 - 1))
            .unwrap()
            .unwrap(),
        stored
    );
}

#[test]
fn concurrent_uploads_of_one_xorb_insert_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (hash, body) = bodies().into_iter().max_by_key(|(_, b)| b.len()).unwrap();
    let inserted: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| s.spawn(|| store.put_xorb(hash, &body).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(inserted.iter().filter(|i| **i).count(), 1, "{inserted:?}");
    assert!(store.has_xorb(&hash).unwrap());
}

#[test]
fn a_directory_that_is_not_a_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.txt"), b"user data").unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("refusing"), "{err}");
}

/// A second opener waits while the store is open elsewhere, gets it once it is closed, and
/// gives up with the lock error after its patience.
#[test]
fn open_waiting_gets_the_store_when_the_holder_closes_it_and_gives_up_after_its_patience() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let holder = Store::open(dir.path()).unwrap();

    let started = Instant::now();
    let err = Store::open_waiting(dir.path(), Duration::from_millis(300), || {}).unwrap_err();
    assert!(err.is_locked(), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));

    let path = dir.path().to_path_buf();
    let waiter = std::thread::spawn(move || {
        let mut announced = 0;
        let store = Store::open_waiting(&path, Duration::from_secs(30), || announced += 1);
        (store.map(|_| ()), announced)
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the store is held"
    );
    drop(holder);
    let (opened, announced) = waiter.join().unwrap();
    opened.unwrap();
    assert_eq!(announced, 1, "the wait is announced once");
}
