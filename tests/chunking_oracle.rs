//! Differential test against the reference client: `hash_file` must give the same file hash and
//! size as `hf_xet.hash_files` (the Python package of huggingface/xet-core).
//!
//! The Python interpreter is `$GIT_XET_HF_PYTHON`, else `.venv/bin/python` in the crate root, else
//! `/tmp/hfvenv/bin/python`. Without a usable one the test is skipped with a message, unless
//! `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use git_xet::pipeline::hasher::{hash_file, hash_file_with, HashOptions};

/// The interpreter to use, or why there is none.
fn python() -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match std::env::var_os("GIT_XET_HF_PYTHON") {
        Some(p) => vec![PathBuf::from(p)],
        None => vec![
            Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"),
            PathBuf::from("/tmp/hfvenv/bin/python"),
        ],
    };
    for candidate in &candidates {
        if !candidate.exists() {
            continue;
        }
        let ok = Command::new(candidate)
            .args(["-c", "import hf_xet"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return Ok(candidate.clone());
        }
        return Err(format!("{} cannot import hf_xet", candidate.display()));
    }
    Err(format!("no Python found (tried {candidates:?})"))
}

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

fn random_bytes(n: usize, mut state: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(n);
    out
}

#[test]
fn hash_file_matches_hf_xet() {
    let python = match python() {
        Ok(p) => p,
        Err(why) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("reference client unavailable in CI: {why}");
            }
            eprintln!("skipping hash_file_matches_hf_xet: {why}; set GIT_XET_HF_PYTHON");
            return;
        }
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut low_entropy = random_bytes(1_000_000, 9);
    low_entropy.extend(std::iter::repeat(0u8).take(700_000));
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("one-byte", vec![0x42]),
        ("hello", b"Hello World!".to_vec()),
        ("random-3mb", random_bytes(3_000_017, 1)),
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
            Some(git_xet::format::LfsOid::of(data)),
            "{}",
            path.display()
        );
    }
}
