//! Cross-checks of the golden fixtures written by the reference client (hf-xet, `local://`):
//! every file of every upload session is rebuilt byte for byte from its shard's terms and the
//! xorbs, and every hash along the way (chunk, verification, file, SHA-256) is recomputed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::fixtures;

use std::collections::HashMap;

use xet_format::hash::{file_hash, verification_hash};
use xet_format::shard::ParsedShard;
use xet_format::xorb::ParsedXorb;
use xet_format::{ChunkRef, FileHash, LfsOid, XorbHash};

fn all_xorbs(m: &fixtures::Manifest) -> HashMap<XorbHash, Vec<u8>> {
    let mut xorbs = HashMap::new();
    for session in &m.sessions {
        for rel in &session.xorbs {
            let name = rel.rsplit('/').next().unwrap().trim_end_matches(".xorb");
            let hash = XorbHash::from_hex(name).unwrap();
            xorbs.insert(hash, fixtures::read(rel));
        }
    }
    xorbs
}

#[test]
fn manifest_covers_the_interesting_cases() {
    let m = fixtures::manifest();
    assert_eq!(m.hf_xet_version, "1.8.0");
    let names: Vec<&str> = m.sessions.iter().map(|s| s.name.as_str()).collect();
    for wanted in [
        "hello-and-zeros",
        "text",
        "text-edited",
        "empty",
        "many-small",
    ] {
        assert!(
            names.contains(&wanted),
            "session {wanted} missing from the manifest"
        );
    }
    for s in &m.sessions {
        assert!(
            !s.shards.is_empty() && !s.cache_shards.is_empty(),
            "session {}",
            s.name
        );
    }
}

#[test]
fn every_reference_file_rebuilds_from_shard_terms_and_xorbs() {
    let m = fixtures::manifest();
    let xorbs = all_xorbs(&m);
    let mut rebuilt = 0;
    for session in &m.sessions {
        let expected: HashMap<FileHash, &fixtures::FixtureFile> = session
            .files
            .iter()
            .map(|f| (FileHash::from_hex(&f.xet_hash).unwrap(), f))
            .collect();
        for rel in session.shards.iter().chain(&session.cache_shards) {
            let bytes = fixtures::read(rel);
            let parsed = ParsedShard::parse(&bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
            assert!(parsed.totals_match(), "{rel}: footer totals");
            parsed.shard.check_all_files_verified().unwrap();
            let listed: Vec<FileHash> = parsed.shard.files.iter().map(|f| f.hash).collect();
            for hash in expected.keys() {
                assert!(listed.contains(hash), "{rel} does not list file {hash}");
            }
            for file in &parsed.shard.files {
                let fixture = expected
                    .get(&file.hash)
                    .unwrap_or_else(|| panic!("{rel} lists unknown file {}", file.hash));
                let verification = file.verification.as_ref().expect("verification entries");
                let mut content = Vec::new();
                let mut chunks = Vec::new();
                for (i, term) in file.terms.iter().enumerate() {
                    let xorb_bytes = xorbs.get(&term.xorb_hash).unwrap_or_else(|| {
                        panic!("{rel}: term {i} names unknown xorb {}", term.xorb_hash)
                    });
                    let xorb = ParsedXorb::parse(xorb_bytes).unwrap();
                    let range = term.chunk_index_start as usize..term.chunk_index_end as usize;
                    let data = xorb.extract(range.clone()).unwrap();
                    assert_eq!(
                        data.len() as u64,
                        u64::from(term.unpacked_segment_bytes),
                        "{rel} term {i}"
                    );
                    content.extend_from_slice(&data);
                    let term_chunks = &xorb.chunks()[range];
                    assert_eq!(
                        verification_hash(term_chunks.iter().map(|c| &c.hash)),
                        verification[i],
                        "{rel}: verification hash of term {i}"
                    );
                    chunks.extend(
                        term_chunks
                            .iter()
                            .map(|c| ChunkRef::new(c.hash, u64::from(c.uncompressed_len))),
                    );
                }
                assert_eq!(
                    content,
                    fixture.content(),
                    "{rel}: rebuilt {}",
                    fixture.name
                );
                assert_eq!(content.len() as u64, fixture.size);
                assert_eq!(
                    file_hash(&chunks),
                    file.hash,
                    "{rel}: file hash of {}",
                    fixture.name
                );
                let oid = file.sha256.expect("reference shards carry the SHA-256");
                if fixture.size == 0 {
                    // The reference stores zeros, not SHA-256(""), for a file that had no data.
                    assert_eq!(oid, LfsOid::from_digest([0; 32]));
                } else {
                    assert_eq!(
                        oid.to_hex(),
                        fixture.sha256,
                        "{rel}: sha256 of {}",
                        fixture.name
                    );
                    assert_eq!(oid, LfsOid::of(&content));
                }
                rebuilt += 1;
            }
        }
    }
    // 10 files, each listed in a server shard and a cache shard.
    assert_eq!(rebuilt, 20);
}

#[test]
fn edited_file_reuses_the_original_xorb() {
    let m = fixtures::manifest();
    let session = |name: &str| m.sessions.iter().find(|s| s.name == name).unwrap();
    let original: Vec<&String> = session("text").xorbs.iter().collect();
    let original_hash = XorbHash::from_hex(
        original[0]
            .rsplit('/')
            .next()
            .unwrap()
            .trim_end_matches(".xorb"),
    )
    .unwrap();
    let shard = ParsedShard::parse(&fixtures::read(&session("text-edited").shards[0]))
        .unwrap()
        .shard;
    let file = &shard.files[0];
    let reused: u64 = file
        .terms
        .iter()
        .filter(|t| t.xorb_hash == original_hash)
        .map(|t| u64::from(t.unpacked_segment_bytes))
        .sum();
    let total: u64 = file
        .terms
        .iter()
        .map(|t| u64::from(t.unpacked_segment_bytes))
        .sum();
    // The edit touched a few KiB: most of the file comes from the first upload's xorb, and the
    // new session's shard lists only its own new xorb.
    assert!(reused * 2 > total, "reused {reused} of {total} bytes");
    assert!(shard.xorbs.iter().all(|x| x.hash != original_hash));
}
