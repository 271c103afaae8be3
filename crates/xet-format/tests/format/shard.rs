//! Shard reader and writer: the worked example of docs/test-vectors.md §8 byte-for-byte, keyed shards,
//! the reference client's shards (crates/xet-format/tests/fixtures/reference), property round trips, and no panic
//! (or hang, or huge allocation) on truncated, bit-flipped or random input.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::path::{Path, PathBuf};
use xet_test_tools::needs;

use proptest::prelude::*;
use xet_format::hash::{file_hash, keyed_chunk_hash, verification_hash, xorb_hash};
use xet_format::shard::{
    shard_file_name, ChunkInfo, FileInfo, LookupTables, ParsedShard, Record, Shard, ShardError,
    ShardMeta, ShardTotals, Term, XorbInfo, CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE, MAX_SHARD_SIZE,
};
use xet_format::{
    ChunkHash, ChunkRef, FileHash, HmacKey, LfsOid, ShardHash, VerificationHash, XorbHash,
};

use crate::fixtures;

use fixtures::unhex;

/// docs/test-vectors.md §8, complete form (736 bytes).
const COMPLETE_HEX: &str = "
48465265706f4d6574614461746100556967456a7b815783a5bdd95ccdd14aa90200000000000000c800000000000000
71843d854985b2fcc40ae5d119a2af2b871b107d8bc61083937cb3867f1eb240000000c0010000000000000000000000
f06abd0eb6e2d626b7eb19994d492b525b86d5394556fa3a5611ac78c6eea33d00000000f40300000000000002000000
c9594cadadd2bdc76a809a00dc35dc49a60c82b8528c265a5491ae3eb528c02e00000000000000000000000000000000
53fcf17f65b1837f5dd6a14881c12db92877d6a31f4b2dfc69906d1200d2dd4a00000000000000000000000000000000
ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff00000000000000000000000000000000
f06abd0eb6e2d626b7eb19994d492b525b86d5394556fa3a5611ac78c6eea33d0000000002000000f403000000000000
a29cfb08e608d4d8726dd8659a90b9134b3240d5d8e42d5fcb28e2a6e763a3e8000000000c0000000000000000000000
7a51bffb1e5e5f145018b3907f6e4cb8f08785a88aaccf11e12dc25ce4a28b200c000000e80300000000000000000000
ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff00000000000000000000000000000000
71843d854985b2fc00000000
f06abd0eb6e2d62600000000
7a51bffb1e5e5f140000000001000000
a29cfb08e608d4d80000000000000000
0100000000000000
3000000000000000
2001000000000000
e001000000000000
0100000000000000
ec01000000000000
0100000000000000
f801000000000000
0200000000000000
0000000000000000000000000000000000000000000000000000000000000000
0000000000000000
ffffffffffffffff
000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
0000000000000000
f403000000000000
f403000000000000
1802000000000000
";

/// docs/test-vectors.md §8, upload form (480 bytes).
const UPLOAD_HEX: &str = "
48465265706f4d6574614461746100556967456a7b815783a5bdd95ccdd14aa902000000000000000000000000000000
71843d854985b2fcc40ae5d119a2af2b871b107d8bc61083937cb3867f1eb240000000c0010000000000000000000000
f06abd0eb6e2d626b7eb19994d492b525b86d5394556fa3a5611ac78c6eea33d00000000f40300000000000002000000
c9594cadadd2bdc76a809a00dc35dc49a60c82b8528c265a5491ae3eb528c02e00000000000000000000000000000000
53fcf17f65b1837f5dd6a14881c12db92877d6a31f4b2dfc69906d1200d2dd4a00000000000000000000000000000000
ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff00000000000000000000000000000000
f06abd0eb6e2d626b7eb19994d492b525b86d5394556fa3a5611ac78c6eea33d0000000002000000f403000000000000
a29cfb08e608d4d8726dd8659a90b9134b3240d5d8e42d5fcb28e2a6e763a3e8000000000c0000000000000000000000
7a51bffb1e5e5f145018b3907f6e4cb8f08785a88aaccf11e12dc25ce4a28b200c000000e80300000000000000000000
ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff00000000000000000000000000000000
";

/// The worked example built from the model and the hash functions: one file of chunks A
/// (`Hello World!`) and B (1000 zero bytes), one term, verification and SHA-256 ext.
fn worked_example() -> Shard {
    let a = ChunkRef::new(ChunkHash::of(b"Hello World!"), 12);
    let b = ChunkRef::new(ChunkHash::of(&[0u8; 1000]), 1000);
    let xh = xorb_hash(&[a, b]);
    assert_eq!(
        xh.to_hex(),
        "26d6e2b60ebd6af0522b494d9919ebb73afa564539d5865b3da3eec678ac1156"
    );
    let fh = file_hash(&[a, b]);
    assert_eq!(
        fh.to_hex(),
        "fcb28549853d84712bafa219d1e50ac48310c68b7d101b8740b21e7f86b37c93"
    );
    Shard {
        files: vec![FileInfo {
            hash: fh,
            terms: vec![Term::new(xh, 1012, 0, 2)],
            verification: Some(vec![verification_hash([&a.hash, &b.hash])]),
            sha256: Some(LfsOid::of(b"Hello World!")),
            unknown_flags: 0,
        }],
        xorbs: vec![XorbInfo::from_chunks(xh, &[a, b]).unwrap()],
        meta: ShardMeta::SESSION,
    }
}

#[test]
fn worked_example_is_byte_exact() {
    let shard = worked_example();
    let complete = shard.to_complete_bytes(LookupTables::ALL).unwrap();
    assert_eq!(complete.len(), 736);
    assert_eq!(complete, unhex(COMPLETE_HEX));
    let upload = shard.to_upload_bytes().unwrap();
    assert_eq!(upload.len(), 480);
    assert_eq!(upload, unhex(UPLOAD_HEX));

    let (bytes, name) = shard.to_complete_bytes_and_hash(LookupTables::ALL).unwrap();
    assert_eq!(bytes, complete);
    assert_eq!(name, ShardHash::of(&complete));
    assert_eq!(
        shard_file_name(&name),
        "7494c653acf7dae37965060bef8e60b92daf78cfda9806652946f7b0609d277f.mdb"
    );
}

#[test]
fn worked_example_parses_back() {
    let shard = worked_example();
    let complete = unhex(COMPLETE_HEX);
    let parsed = ParsedShard::parse(&complete).unwrap();
    assert_eq!(parsed.shard, shard);
    assert_eq!(parsed.footer_size, 200);
    assert!(!parsed.is_upload_form());
    assert_eq!(parsed.lookup_tables(), LookupTables::ALL);
    assert_eq!(
        parsed.stored_totals(),
        Some(ShardTotals {
            stored_bytes_on_disk: 0,
            materialized_bytes: 1012,
            stored_bytes: 1012
        })
    );
    assert!(parsed.totals_match());
    assert_eq!(parsed.to_bytes().unwrap(), complete);

    // Upload form, as hf_xet >= 1.3 sends it (footer_size 0) and as older clients did (200).
    let mut upload = unhex(UPLOAD_HEX);
    for footer_size in [0u8, 200] {
        upload[40] = footer_size;
        let parsed = ParsedShard::parse(&upload).unwrap();
        assert!(parsed.is_upload_form());
        assert_eq!(parsed.footer_size, u64::from(footer_size));
        assert_eq!(parsed.shard, shard);
        assert_eq!(parsed.lookup_tables(), LookupTables::NONE);
        assert_eq!(parsed.to_bytes().unwrap(), unhex(UPLOAD_HEX));
    }

    // Queries.
    let file = &shard.files[0];
    assert_eq!(shard.lfs_oid(&file.hash), Some(LfsOid::of(b"Hello World!")));
    assert!(shard.check_all_files_verified().is_ok());
    let b = ChunkHash::of(&[0u8; 1000]);
    let loc = shard.find_chunk(&b).unwrap();
    assert_eq!((loc.xorb_index, loc.chunk_index), (0, 1));
    assert_eq!(loc.xorb_hash, file.terms[0].xorb_hash);
    assert_eq!(shard.index().find_chunk(&b), Some(loc));
    assert_eq!(
        shard.index().xorb(&loc.xorb_hash).map(|x| x.chunks.len()),
        Some(2)
    );
}

#[test]
fn keyed_shard_round_trip() {
    let key = HmacKey::from_bytes([7; 32]);
    let raw = worked_example();
    let mut keyed = raw.to_keyed(key).unwrap();
    keyed.meta.creation_timestamp = 1_700_000_000;
    keyed.meta.key_expiry = 1_700_003_600;
    let a = ChunkHash::of(b"Hello World!");
    assert_eq!(
        keyed.xorbs[0].chunks[0].hash.to_hex(),
        "382f6e4c9d9b34ce24b403ecc189256135b31bd7dcfc69e85819bf43b65a0416"
    );
    // The way xet-core answers dedup queries: no file section, empty lookup tables.
    let mut answer = keyed.clone();
    answer.files.clear();
    for (shard, tables) in [
        (&keyed, LookupTables::ALL),
        (&keyed, LookupTables::NONE),
        (&answer, LookupTables::NONE),
        (&answer, LookupTables::ALL),
    ] {
        let bytes = shard.to_complete_bytes(tables).unwrap();
        let footer = bytes.len() - 200;
        assert_eq!(&bytes[footer + 72..footer + 104], &[7u8; 32]);
        let parsed = ParsedShard::parse(&bytes).unwrap();
        assert_eq!(&parsed.shard, shard);
        assert!(parsed.shard.is_keyed());
        assert_eq!(parsed.shard.meta.hmac_key, key);
        assert_eq!(parsed.to_bytes().unwrap(), bytes);
        let loc = parsed.shard.find_chunk(&a).unwrap();
        assert_eq!(loc.chunk_index, 0);
        assert_eq!(parsed.shard.find_stored_chunk(&a), None);
        assert_eq!(
            parsed
                .shard
                .index()
                .find_chunk(&ChunkHash::of(&[0u8; 1000])),
            parsed.shard.find_chunk(&ChunkHash::of(&[0u8; 1000]))
        );
    }
    // Keying twice is refused; keying with zero is the identity.
    assert_eq!(keyed.to_keyed(key), Err(ShardError::AlreadyKeyed));
    assert_eq!(raw.to_keyed(HmacKey::ZERO).unwrap(), raw);
    assert_eq!(keyed_chunk_hash(&key, &a), keyed.xorbs[0].chunks[0].hash);
}

#[test]
fn huge_counts_fail_fast_with_a_precise_message() {
    // A 100-byte input whose only file block claims 2^32 - 1 terms with verification.
    let mut bytes = unhex(UPLOAD_HEX)[..100].to_vec();
    bytes[84..88].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = ParsedShard::parse(&bytes).unwrap_err();
    assert_eq!(
        err,
        ShardError::EntriesExceedInput {
            record: Record::File(0),
            offset: 48,
            entries: u64::from(u32::MAX),
            remaining: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "file block 0 at offset 48: 4294967295 entries exceed the 4 bytes remaining"
    );

    // Same for a xorb block, in the complete form.
    let mut bytes = unhex(COMPLETE_HEX);
    bytes[324..328].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        ParsedShard::parse(&bytes).unwrap_err().to_string(),
        "xorb block 0 at offset 288: 4294967295 entries exceed the 400 bytes remaining"
    );

    // Over the size cap.
    let big = vec![0u8; MAX_SHARD_SIZE as usize + 1];
    assert!(matches!(
        ParsedShard::parse(&big),
        Err(ShardError::TooLarge { .. })
    ));
}

#[test]
fn corruptions_are_named() {
    let good = unhex(COMPLETE_HEX);
    let check = |patch: &dyn Fn(&mut Vec<u8>), want: &str| {
        let mut b = good.clone();
        patch(&mut b);
        let err = ParsedShard::parse(&b).unwrap_err().to_string();
        assert!(err.contains(want), "{err:?} does not contain {want:?}");
    };
    check(&|b| b[31] ^= 1, "tag does not match");
    check(&|b| b[32] = 3, "version 3, expected 2");
    check(&|b| b[40] = 0, "footer_size 0, expected 200");
    check(&|b| b[40] = 7, "footer_size 7, expected 0 or 200");
    check(&|b| b[536] = 2, "footer at offset 536: version 2");
    check(
        &|b| b[552] = 0x30,
        "xorb_info_offset at offset 552 is 304, expected 288",
    );
    check(&|b| b[568] = 2, "file_lookup_num_entry at offset 568 is 2");
    check(
        &|b| b[728] = 0,
        "footer_offset at offset 728 is 512, expected 536",
    );
    // Chunk lookup entries swapped: unsorted.
    check(
        &|b| {
            let (x, y) = (b[504..520].to_vec(), b[520..536].to_vec());
            b[504..520].copy_from_slice(&y);
            b[520..536].copy_from_slice(&x);
        },
        "chunk lookup entry 1 at offset 520: key 0x145f5e1efbbf517a sorts before",
    );
    check(&|b| b[516] = 2, "chunk index 2 is past the 2 chunks");
    check(
        &|b| b[500] = 1,
        "record index 1 is not the header of a xorb block",
    );
    check(
        &|b| b[480] ^= 1,
        "file lookup entry 0 at offset 480: key 0xfcb28549853d8470",
    );
    // Both chunk entries name chunk 1 (keys made equal too, so only the duplicate is wrong).
    check(
        &|b| {
            let first = b[504..520].to_vec();
            b[520..536].copy_from_slice(&first);
        },
        "chunk lookup entry 1 at offset 520: points at a record that an earlier entry",
    );
    // A stray byte after the xorb bookend.
    let mut upload = unhex(UPLOAD_HEX);
    upload.push(0);
    let err = ParsedShard::parse(&upload).unwrap_err().to_string();
    assert!(err.contains("1 bytes at offset 480"), "{err}");
}

#[test]
fn unknown_file_flags_are_kept() {
    let mut b = unhex(COMPLETE_HEX);
    b[80] = 0x01; // flags 0xc0000001
    let parsed = ParsedShard::parse(&b).unwrap();
    assert_eq!(parsed.shard.files[0].unknown_flags, 1);
    assert_eq!(parsed.shard.files[0].flags(), 0xc000_0001);
    assert_eq!(parsed.to_bytes().unwrap(), b);
}

#[test]
fn duplicate_files_are_read_but_not_written() {
    // Two empty files with different hashes, then the second renamed to the first.
    let mut shard = Shard::new();
    shard
        .files
        .push(FileInfo::new(FileHash::from_bytes([1; 32]), vec![]));
    shard
        .files
        .push(FileInfo::new(FileHash::from_bytes([2; 32]), vec![]));
    let mut bytes = shard.to_upload_bytes().unwrap();
    bytes.copy_within(48..80, 96);
    let parsed = ParsedShard::parse(&bytes).unwrap();
    assert_eq!(parsed.shard.files.len(), 2);
    assert_eq!(parsed.shard.files[0], parsed.shard.files[1]);
    assert_eq!(
        parsed.to_bytes(),
        Err(ShardError::DuplicateFile(FileHash::from_bytes([1; 32])))
    );
    // Lookups return the first one; the server check names the first unverified file.
    assert!(parsed.shard.file(&FileHash::from_bytes([1; 32])).is_some());
    assert!(matches!(
        parsed.shard.check_all_files_verified(),
        Err(ShardError::MissingVerification { index: 0, .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// The reference client's shards (hf-xet 1.8.0, local://), committed under crates/xet-format/tests/fixtures.

fn fixture_shards(kind: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reference/sessions");
    let mut out = Vec::new();
    for session in std::fs::read_dir(&root).unwrap() {
        let dir = session.unwrap().path().join(kind);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries {
                out.push(e.unwrap().path());
            }
        }
    }
    out.sort();
    assert!(
        !out.is_empty(),
        "no {kind} fixtures under {}",
        root.display()
    );
    out
}

fn name_hash(path: &Path) -> ShardHash {
    let stem = path.file_stem().unwrap().to_str().unwrap();
    ShardHash::from_hex(stem).unwrap()
}

#[test]
fn reference_cache_shards_reserialise_identically() {
    for path in fixture_shards("cache_shards") {
        let bytes = std::fs::read(&path).unwrap();
        let parsed = ParsedShard::parse(&bytes).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert_eq!(parsed.lookup_tables().chunk, parsed.shard.num_chunks() > 0);
        assert!(parsed.totals_match(), "{path:?}");
        assert!(parsed.shard.check_all_files_verified().is_ok());
        assert!(parsed.shard.files.iter().all(|f| f.sha256.is_some()));
        assert_eq!(parsed.to_bytes().unwrap(), bytes, "{path:?}");
        assert_eq!(ShardHash::of(&bytes), name_hash(&path), "{path:?}");
    }
}

#[test]
fn reference_server_shards_reserialise_identically() {
    for path in fixture_shards("shards") {
        let bytes = std::fs::read(&path).unwrap();
        let parsed = ParsedShard::parse(&bytes).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        // The local server stores MDBMinimalShard output: no lookup tables, creation 0,
        // expiry 0, file-start chunks flagged.
        assert_eq!(parsed.lookup_tables(), LookupTables::NONE);
        assert_eq!(parsed.shard.meta.creation_timestamp, 0);
        assert_eq!(parsed.shard.meta.key_expiry, 0);
        assert!(parsed.totals_match(), "{path:?}");
        assert_eq!(parsed.to_bytes().unwrap(), bytes, "{path:?}");
        assert_eq!(ShardHash::of(&bytes), name_hash(&path), "{path:?}");

        // Rebuilt from the upload form, as the server would do it.
        let mut upload = ParsedShard::parse(&parsed.shard.to_upload_bytes().unwrap())
            .unwrap()
            .shard;
        for x in &mut upload.xorbs {
            for c in &mut x.chunks {
                c.flags &= !CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE;
            }
        }
        upload.mark_file_start_chunks();
        upload.meta.key_expiry = 0;
        assert_eq!(upload.to_complete_bytes(LookupTables::NONE).unwrap(), bytes);
    }
}

// ---------------------------------------------------------------------------------------------
// Property tests.

fn arb_hash() -> impl Strategy<Value = [u8; 32]> {
    // Mostly random, sometimes sharing the first word (ties in the lookup keys).
    prop_oneof![
        4 => any::<[u8; 32]>(),
        1 => (any::<[u8; 24]>(), 0u8..2).prop_map(|(rest, w)| {
            let mut h = [w; 32];
            h[8..].copy_from_slice(&rest);
            h
        }),
    ]
    .prop_filter("bookend", |h| h != &[0xff; 32])
}

fn arb_term() -> impl Strategy<Value = Term> {
    (
        arb_hash(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(h, flags, bytes, start, end)| Term {
            xorb_hash: XorbHash::from_bytes(h),
            xorb_flags: flags,
            unpacked_segment_bytes: bytes,
            chunk_index_start: start,
            chunk_index_end: end,
        })
}

fn arb_file() -> impl Strategy<Value = FileInfo> {
    (
        arb_hash(),
        proptest::collection::vec((arb_term(), any::<[u8; 32]>()), 0..5),
        any::<bool>(),
        proptest::option::of(any::<[u8; 32]>()),
        prop_oneof![3 => Just(0u32), 1 => any::<u32>().prop_map(|f| f & 0x3fff_ffff)],
    )
        .prop_map(|(h, terms, with_v, sha, unknown_flags)| FileInfo {
            hash: FileHash::from_bytes(h),
            verification: with_v.then(|| {
                terms
                    .iter()
                    .map(|(_, v)| VerificationHash::from_bytes(*v))
                    .collect()
            }),
            terms: terms.into_iter().map(|(t, _)| t).collect(),
            sha256: sha.map(LfsOid::from_digest),
            unknown_flags,
        })
}

fn arb_xorb() -> impl Strategy<Value = XorbInfo> {
    (
        arb_hash(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec((arb_hash(), any::<u32>(), any::<u32>(), any::<u32>()), 0..6),
    )
        .prop_map(|(h, flags, in_xorb, on_disk, chunks)| XorbInfo {
            hash: XorbHash::from_bytes(h),
            flags,
            num_bytes_in_xorb: in_xorb,
            num_bytes_on_disk: on_disk,
            chunks: chunks
                .into_iter()
                .map(|(h, start, len, flags)| ChunkInfo {
                    hash: ChunkHash::from_bytes(h),
                    chunk_byte_range_start: start,
                    unpacked_segment_bytes: len,
                    flags,
                })
                .collect(),
        })
}

fn arb_shard() -> impl Strategy<Value = Shard> {
    (
        proptest::collection::vec(arb_file(), 0..5),
        proptest::collection::vec(arb_xorb(), 0..5),
        prop_oneof![Just([0u8; 32]), any::<[u8; 32]>()],
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(mut files, mut xorbs, key, created, expiry)| {
            files.sort_by_key(|f| f.hash);
            files.dedup_by_key(|f| f.hash);
            xorbs.sort_by_key(|x| x.hash);
            xorbs.dedup_by_key(|x| x.hash);
            Shard {
                files,
                xorbs,
                meta: ShardMeta {
                    hmac_key: HmacKey::from_bytes(key),
                    creation_timestamp: created,
                    key_expiry: expiry,
                },
            }
        })
}

fn arb_tables() -> impl Strategy<Value = LookupTables> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(file, xorb, chunk)| LookupTables {
        file,
        xorb,
        chunk,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn complete_form_round_trips(shard in arb_shard(), tables in arb_tables()) {
        let bytes = shard.to_complete_bytes(tables).unwrap();
        let parsed = ParsedShard::parse(&bytes).unwrap();
        prop_assert_eq!(&parsed.shard, &shard);
        prop_assert!(parsed.totals_match());
        prop_assert_eq!(parsed.to_bytes().unwrap(), bytes.clone());
        // Deterministic, and the model order does not matter.
        let mut reversed = shard.clone();
        reversed.files.reverse();
        reversed.xorbs.reverse();
        prop_assert_eq!(reversed.to_complete_bytes(tables).unwrap(), bytes);
    }

    #[test]
    fn upload_form_round_trips(mut shard in arb_shard()) {
        shard.meta.hmac_key = HmacKey::ZERO;
        let bytes = shard.to_upload_bytes().unwrap();
        let complete = shard.to_complete_bytes(LookupTables::ALL).unwrap();
        prop_assert_eq!(&bytes[40..48], &[0u8; 8]);
        prop_assert_eq!(&bytes[48..], &complete[48..bytes.len()]);
        let parsed = ParsedShard::parse(&bytes).unwrap();
        prop_assert!(parsed.is_upload_form());
        prop_assert_eq!(&parsed.shard.files, &shard.files);
        prop_assert_eq!(&parsed.shard.xorbs, &shard.xorbs);
        prop_assert_eq!(parsed.shard.meta, ShardMeta::SESSION);
    }

    #[test]
    fn random_flips_never_panic(
        shard in arb_shard(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..6),
    ) {
        let mut bytes = shard.to_complete_bytes(LookupTables::ALL).unwrap();
        for (i, bit) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        let _ = ParsedShard::parse(&bytes);
    }

    #[test]
    fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = ParsedShard::parse(&body);
        // With a valid header in front, so the parser gets past it.
        let mut bytes = unhex(UPLOAD_HEX)[..48].to_vec();
        bytes.extend_from_slice(&body);
        let _ = ParsedShard::parse(&bytes);
    }
}

// ---------------------------------------------------------------------------------------------
// Exhaustive never-panic sweeps.

#[test]
fn every_prefix_and_bit_flip_of_the_worked_example() {
    let complete = unhex(COMPLETE_HEX);
    for n in 0..complete.len() {
        let prefix = &complete[..n];
        let result = ParsedShard::parse(prefix);
        // The only valid proper prefix is the upload form (with footer_size 200).
        assert_eq!(result.is_ok(), n == 480, "prefix {n}: {result:?}");
    }
    // Every flip either fails or parses to a model that writes back to the flipped bytes, to the
    // original bytes (the flip hit a reserved field) or, when the footer totals no longer agree
    // with the content, to bytes that differ from the flipped ones only in the totals.
    let (mut rejected, mut same, mut original, mut totals) = (0, 0, 0, 0);
    let mut b = complete.clone();
    for i in 0..b.len() {
        for bit in 0..8 {
            b[i] ^= 1 << bit;
            match ParsedShard::parse(&b) {
                Err(_) => rejected += 1,
                Ok(p) => {
                    let again = p.to_bytes().unwrap();
                    if again == b {
                        same += 1;
                    } else if again == complete {
                        original += 1;
                    } else {
                        assert!(!p.totals_match(), "flip {i}/{bit}");
                        let differ = (0..b.len()).filter(|&j| again[j] != b[j]);
                        assert!(differ.into_iter().all(|j| (704..728).contains(&j)));
                        totals += 1;
                    }
                }
            }
            b[i] ^= 1 << bit;
        }
    }
    // Back to the original: the reserved 8 bytes of the file header, 16 of each verification,
    // ext and bookend record, 4 of each chunk entry, 48 in the footer, and the 24 bytes of
    // footer totals (the writer recomputes them).
    assert_eq!(original, 8 * (8 + 16 * 4 + 4 * 2 + 48 + 24));
    // The term length and the xorb's two lengths, which the totals are computed from.
    assert_eq!(totals, 8 * (4 + 8));
    assert!(rejected > 1000 && same > 1000, "{rejected} {same}");
}

fn bigger_shard() -> Shard {
    let mut shard = Shard::new();
    for x in 0u8..20 {
        let chunks: Vec<ChunkRef> = (0u32..40)
            .map(|c| {
                ChunkRef::new(
                    ChunkHash::of(&[x, c as u8, (c >> 8) as u8]),
                    1000 + u64::from(c),
                )
            })
            .collect();
        let xh = xorb_hash(&chunks);
        shard
            .xorbs
            .push(XorbInfo::from_chunks(xh, &chunks).unwrap());
        let terms = vec![Term::new(xh, 5000, 0, 5), Term::new(xh, 1000, 10, 11)];
        shard.files.push(FileInfo {
            hash: file_hash(&chunks[..7]),
            verification: Some(vec![VerificationHash::ZERO; terms.len()]),
            terms,
            sha256: Some(LfsOid::of(&[x])),
            unknown_flags: 0,
        });
    }
    shard
}

#[test]
fn prefixes_of_a_bigger_shard() {
    let shard = bigger_shard();
    let bytes = shard.to_complete_bytes(LookupTables::ALL).unwrap();
    let upload_len = shard.to_upload_bytes().unwrap().len();
    assert!(bytes.len() > 50_000);
    let parsed = ParsedShard::parse(&bytes).unwrap();
    let mut sorted = shard.clone();
    sorted.sort();
    assert_eq!(parsed.shard, sorted);
    for n in (0..bytes.len())
        .step_by(37)
        .chain([upload_len, bytes.len() - 1])
    {
        let result = ParsedShard::parse(&bytes[..n]);
        assert_eq!(result.is_ok(), n == upload_len, "prefix {n}");
    }
}

/// Shards written now by the reference client: two files (one of them half a copy of the
/// other, so the second shard deduplicates) uploaded with `hf_xet.upload_files` to a
/// `local://` store in a temporary directory. Returns the directory that holds the store.
fn fresh_reference_shards(dir: &Path) -> PathBuf {
    let python = fixtures::reference_python();
    let inputs = dir.join("in");
    std::fs::create_dir_all(&inputs).unwrap();
    let a = fixtures::splitmix64(21, 1_500_000);
    let mut b = a[..700_000].to_vec();
    b.extend(fixtures::splitmix64(22, 300_000));
    std::fs::write(inputs.join("a.bin"), &a).unwrap();
    std::fs::write(inputs.join("b.bin"), &b).unwrap();
    let store = dir.join("store");
    for name in ["a.bin", "b.bin"] {
        let out = std::process::Command::new(&python)
            .arg("-c")
            .arg(
                "import hf_xet, sys\n\
                 hf_xet.upload_files([sys.argv[1]], 'local://' + sys.argv[2], None, None, None, 'model')",
            )
            .arg(inputs.join(name))
            .arg(&store)
            .env("HF_HOME", dir.join("hf"))
            .env("HF_XET_TELEMETRY_ENABLED", "false")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "hf_xet.upload_files: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    store
}

/// The reference client's shards, fresh: every shard it writes (its session and cache shards
/// and the local store's) must parse, re-serialise to the same bytes and hash to its file name;
/// the store's shards must also be rebuilt from their upload form. The shards come from
/// [`fresh_reference_shards`], or, to check a directory by hand, from
/// `SHARD_REF_DIR=/some/dir cargo test --test shard -- --ignored`, where the directory holds
/// `*/xet/**/*.mdb` written by `hf_xet.upload_files(.., "local://DIR", ..)`.
#[needs(hf_xet)]
#[test]
fn fresh_reference_shards_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let by_hand = std::env::var_os("SHARD_REF_DIR");
    let root = match &by_hand {
        Some(dir) => PathBuf::from(dir),
        None => fresh_reference_shards(tmp.path()),
    };
    let mut store_shards = 0;
    let mut stack = vec![root.clone()];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|x| x != "mdb") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let parsed = ParsedShard::parse(&bytes).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            assert!(parsed.totals_match(), "{path:?}");
            assert_eq!(parsed.to_bytes().unwrap(), bytes, "{path:?}");
            assert_eq!(ShardHash::of(&bytes), name_hash(&path), "{path:?}");
            if path.to_string_lossy().contains("xorbs/shards") {
                store_shards += 1;
                let mut rebuilt = parsed.shard.clone();
                for x in &mut rebuilt.xorbs {
                    for c in &mut x.chunks {
                        c.flags &= !CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE;
                    }
                }
                rebuilt.mark_file_start_chunks();
                assert_eq!(
                    rebuilt.to_complete_bytes(LookupTables::NONE).unwrap(),
                    bytes
                );
            }
            let s = &parsed.shard;
            println!(
                "{}: {} bytes, {} files, {} xorbs, {} chunks, tables {:?}, created {}, expiry {}",
                path.display(),
                bytes.len(),
                s.files.len(),
                s.xorbs.len(),
                s.num_chunks(),
                parsed.lookup_tables(),
                s.meta.creation_timestamp,
                s.meta.key_expiry
            );
            seen += 1;
        }
    }
    assert!(seen > 0, "no shard under {}", root.display());
    if by_hand.is_none() {
        assert!(store_shards > 0, "no store shard under {}", root.display());
    }
}
