//! The golden fixtures the reference client wrote (`crates/xet-format/tests/fixtures/reference`,
//! made by `crates/xet-format/tests/fixtures/make_fixtures.py`) and the deterministic data of
//! docs/test-vectors.md, and the reference client itself for oracle tests. Shared by the format crate's tests and, through `#[path]`, by the
//! integration tests of git-xet (tests/common), so the manifest is read by one piece of code.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `crates/xet-format/tests/fixtures/reference`, found from the manifest directory of the crate
/// whose tests include this file (the format crate, or the workspace root above it).
pub fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("crates/xet-format/tests/fixtures/reference"))
        .find(|root| root.is_dir())
        .expect("crates/xet-format/tests/fixtures/reference is committed")
}

#[derive(Debug, Deserialize)]
pub struct Manifest {
    pub hf_xet_version: String,
    pub sessions: Vec<Session>,
}

#[derive(Debug, Deserialize)]
pub struct Session {
    pub name: String,
    pub files: Vec<FixtureFile>,
    pub xorbs: Vec<String>,
    pub shards: Vec<String>,
    pub cache_shards: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct FixtureFile {
    pub name: String,
    pub size: u64,
    pub xet_hash: String,
    pub sha256: String,
}

impl FixtureFile {
    pub fn content(&self) -> Vec<u8> {
        read(&format!("inputs/{}", self.name))
    }
}

/// The manifest written by `make_fixtures.py`.
pub fn manifest() -> Manifest {
    let text = std::fs::read_to_string(fixture_root().join("manifest.json"))
        .expect("the fixtures' manifest.json is committed");
    serde_json::from_str(&text).expect("manifest.json parses")
}

/// Reads a fixture by its path relative to the fixture root (as the manifest lists them).
pub fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixture_root().join(rel)).unwrap_or_else(|e| panic!("fixture {rel}: {e}"))
}

/// The SplitMix64 byte generator of docs/test-vectors.md §5.1 (also used by make_fixtures.py).
pub fn splitmix64(seed: u64, n: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(n);
    out
}

/// Bytes from hex digits, whitespace ignored (the layout of the worked examples).
pub fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Bytes as lowercase hex digits.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The Python interpreter of a venv with `hf_xet` installed: `$GIT_XET_HF_PYTHON`, then
/// `.venv/bin/python` in the workspace root. Tests that call this are marked `#[needs(hf_xet)]`
/// (ignored where the reference client was missing when they were built); run anyway, this
/// fails saying how to install it.
pub fn reference_python() -> PathBuf {
    let candidates = std::env::var_os("GIT_XET_HF_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .ancestors()
                .map(|dir| dir.join(".venv/bin/python"))
                .filter(|python| python.exists())
                .take(1),
        );
    for python in candidates {
        let ok = std::process::Command::new(&python)
            .args(["-c", "import hf_xet"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return python;
        }
    }
    panic!(
        "the reference client is missing: run `python3 -m venv .venv && .venv/bin/pip install \
         hf-xet==1.8.0` (or `.ci/run`, which does it), or set GIT_XET_HF_PYTHON to a Python \
         that can `import hf_xet`"
    )
}
