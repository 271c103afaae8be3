//! Differential test against the reference client: `hash_file` must give the same file hash and
//! size as `hf_xet.hash_files` (the Python package of huggingface/xet-core).
//!
//! The reference client is found by `common::reference_python`. The test is marked
//! `#[needs(hf_xet)]`: ignored where the client was missing when the tests were built, and
//! failing when run anyway.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};

use common::splitmix64;
use std::process::Command;

use xet_client::pipeline::hasher::{hash_file, hash_file_with, HashOptions};

/// `(hash, size)` from `hf_xet.hash_files` for each path, in order.
fn reference_hashes(python: &Path, paths: &[PathBuf]) -> Vec<(String, u64)> {
    let script = "import sys, hf_xet\n\
                  for r in hf_xet.hash_files(sys.argv[1:]):\n    print(r.hash, r.file_size)\n";
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(paths)
        .output()
        .expect("run the reference client");
    assert!(
        output.status.success(),
        "hf_xet failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("utf-8 output")
        .lines()
        .map(|line| {
            let (hash, size) = line.split_once(' ').expect("`hash size` line");
            (hash.to_string(), size.parse().expect("decimal size"))
        })
        .collect()
}

#[needs(hf_xet)]
#[test]
fn hash_file_matches_hf_xet() {
    let python = common::reference_python();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut low_entropy = splitmix64(9, 1_000_000);
    low_entropy.extend(std::iter::repeat_n(0u8, 700_000));
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("one-byte", vec![0x42]),
        ("hello", b"Hello World!".to_vec()),
        ("random-3mb", splitmix64(1, 3_000_017)),
        ("low-entropy", low_entropy),
    ];
    let mut paths = Vec::new();
    for (name, data) in &files {
        let path = dir.path().join(name);
        std::fs::write(&path, data).expect("write test file");
        paths.push(path);
    }
    let expected = reference_hashes(&python, &paths);
    assert_eq!(expected.len(), files.len());
    for ((path, (_, data)), (hash, size)) in paths.iter().zip(&files).zip(&expected) {
        let ours = hash_file(path).expect("hash_file");
        assert_eq!(&ours.file_hash.to_hex(), hash, "{}", path.display());
        assert_eq!(ours.size, *size, "{}", path.display());
        assert_eq!(ours.size, data.len() as u64);
        let with_sha = hash_file_with(path, HashOptions { sha256: true }).expect("hash_file");
        assert_eq!(with_sha.file_hash, ours.file_hash);
        assert_eq!(
            with_sha.sha256,
            Some(xet_format::LfsOid::of(data)),
            "{}",
            path.display()
        );
    }
}

/// `hash_bytes` gives the known answers of docs/test-vectors.md (the format crate's tests check
/// the same values against the chunker and hash functions alone).
#[test]
fn hash_bytes_gives_the_known_answers() {
    use xet_client::pipeline::hasher::hash_bytes;
    let hashed = hash_bytes(&splitmix64(0, 1_000_000), HashOptions::default());
    assert_eq!(hashed.size, 1_000_000);
    assert_eq!(
        hashed.file_hash.to_hex(),
        "3d17b2d7d64a0e011b6717a52d9a16bd2c3f05b743fa8adf52a7d75dafab6d89"
    );
    assert_eq!(
        hash_bytes(&[0x3B; 1_000_000], HashOptions::default())
            .file_hash
            .to_hex(),
        "53f845640fcd1c7440befff65bd93434c83a30c6559a705597d61f2ef64e2f88"
    );
}
