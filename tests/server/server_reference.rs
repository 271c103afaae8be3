//! The reference client (PyPI `hf-xet`) as the peer of `git xet serve`: it uploads files to the
//! server and downloads them again by Xet hash, with its default settings (xorbs uploaded
//! through upload grants, `/v2/shards`, v2 reconstructions, single-range fetches) and with the legacy settings (direct
//! xorb upload, `/v1/shards`; here also v1 reconstructions); a second upload of an edited copy
//! stores only the changed chunks (global dedup across fresh client caches), and downloading it
//! in multi-range mode gets `multipart/byteranges` answers. The server's request log is captured
//! to check which endpoints the client used.
//!
//! Every Python run has its own `HF_HOME`/`HF_XET_CACHE` (the client keys its cache by host
//! without port, so runs would otherwise share shards) and a time limit; the server stops by
//! itself too. The tests are marked `#[needs(hf_xet)]`: ignored, saying how to install it, where
//! the reference client was missing when they were built; run anyway, they fail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use common::hfxet::Peer;
use common::server::TestServer;
use sha2::{Digest, Sha256};
use xet_format::{FileHash, LfsOid};
use xet_store::Store;

/// The server's log lines (captured for every test of this binary).
type Captured = Arc<Mutex<Vec<u8>>>;

struct Capture(Captured);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs the tests of this binary one at a time, so that the captured server log of a test is
/// its own: returns the guard and the (cleared) log.
fn exclusive() -> (Serial, Captured) {
    static SERIAL: Mutex<()> = Mutex::new(());
    static LOG: OnceLock<Captured> = OnceLock::new();
    let log = LOG
        .get_or_init(|| {
            let log: Captured = Arc::default();
            let writer = Arc::clone(&log);
            use tracing_subscriber::layer::SubscriberExt as _;
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::DEBUG)
                .with_ansi(false)
                .with_writer(move || Capture(Arc::clone(&writer)))
                .finish()
                .with(
                    "git_xet=debug"
                        .parse::<tracing_subscriber::filter::Targets>()
                        .unwrap(),
                );
            tracing::subscriber::set_global_default(subscriber).unwrap();
            log
        })
        .clone();
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    log.lock().unwrap_or_else(|p| p.into_inner()).clear();
    (guard, log)
}

/// The requests the server logged: "METHOD /path/with/hashes/as/H STATUS".
fn requests(log: &Captured) -> Vec<String> {
    let text = String::from_utf8_lossy(&log.lock().unwrap_or_else(|p| p.into_inner())).to_string();
    text.lines()
        .filter_map(|l| {
            let field = |name: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .map(str::to_string)
            };
            let path = field("path=")?;
            let path: String = path
                .split('/')
                .map(|seg| if seg.len() == 64 { "H" } else { seg })
                .collect::<Vec<_>>()
                .join("/");
            Some(format!(
                "{} {path} {}",
                field("method=")?,
                field("status=")?
            ))
        })
        .collect()
}

/// The most ranges one xorb-data request of the log asked for.
fn most_ranges(log: &Captured) -> usize {
    let text = String::from_utf8_lossy(&log.lock().unwrap_or_else(|p| p.into_inner())).to_string();
    text.lines()
        .filter(|l| l.contains("xorb data"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("ranges="))
                .and_then(|n| n.parse().ok())
        })
        .max()
        .unwrap_or(0)
}

/// `n` bytes of mixed content: random, text, zeros and repeated blocks.
fn mixed(seed: u64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let mut i = 0u64;
    while out.len() < n {
        match i % 4 {
            0 => out.extend_from_slice(&common::splitmix64(seed + i, 300_000)),
            1 => {
                for line in 0..8_000 {
                    out.extend_from_slice(
                        format!("{seed} line {line} of section {i}: the quick brown fox\n")
                            .as_bytes(),
                    );
                }
            }
            2 => out.extend_from_slice(&[0u8; 150_000]),
            _ => {
                let block = common::splitmix64(seed ^ 0xabc, 4096);
                for _ in 0..40 {
                    out.extend_from_slice(&block);
                }
            }
        }
        i += 1;
    }
    out.truncate(n);
    out
}

fn sha256_oid(bytes: &[u8]) -> LfsOid {
    LfsOid::from_digest(Sha256::digest(bytes).into())
}

/// Total bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// Uploads a set of files with the given settings, downloads them again by hash, compares the
/// bytes, then checks through the store that each is found by its SHA-256.
type Serial = MutexGuard<'static, ()>;

/// Returns the test's lock and captured server log.
fn round_trip(env: Vec<(&'static str, &'static str)>) -> (Serial, Captured) {
    let python = common::reference_python();
    let (serial, log) = exclusive();
    let peer = Peer { python, env };
    let s = common::server::start();
    let work = tempfile::tempdir().unwrap();
    let inputs = work.path().join("in");
    std::fs::create_dir_all(&inputs).unwrap();
    let mut contents: Vec<(PathBuf, Vec<u8>)> = vec![
        (inputs.join("mixed.bin"), mixed(1, 3_500_000)),
        (inputs.join("empty.bin"), Vec::new()),
    ];
    for i in 0..4 {
        let small = format!("small file {i}\n").repeat(100 + 300 * i);
        contents.push((inputs.join(format!("small-{i}.txt")), small.into_bytes()));
    }
    for (path, bytes) in &contents {
        std::fs::write(path, bytes).unwrap();
    }
    let paths: Vec<PathBuf> = contents.iter().map(|(p, _)| p.clone()).collect();
    let uploaded = peer.upload(&s, &work.path().join("cache-up"), &paths);
    assert_eq!(uploaded.len(), contents.len());
    for ((_, bytes), (_, size)) in contents.iter().zip(&uploaded) {
        assert_eq!(*size, bytes.len() as u64);
    }
    assert_eq!(uploaded[1].0, FileHash::ZERO.to_hex(), "empty file");

    let out = work.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let wanted: Vec<(PathBuf, String, u64)> = contents
        .iter()
        .zip(&uploaded)
        .map(|((p, _), (hash, size))| (out.join(p.file_name().unwrap()), hash.clone(), *size))
        .collect();
    peer.download(&s, &work.path().join("cache-down"), &wanted);
    for ((_, bytes), (dest, _, _)) in contents.iter().zip(&wanted) {
        assert_eq!(
            &std::fs::read(dest).unwrap(),
            bytes,
            "{} comes back byte for byte",
            dest.display()
        );
    }

    // The store knows every non-empty file by its SHA-256 (from the shard's metadata extension).
    let TestServer { server, dir } = s;
    server.stop().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    for ((_, bytes), (hash, size)) in contents.iter().zip(&uploaded) {
        if bytes.is_empty() {
            continue;
        }
        let found = store.file_by_oid(&sha256_oid(bytes)).unwrap();
        assert_eq!(
            found,
            Some((FileHash::from_hex(hash).unwrap(), *size)),
            "file {hash} by its SHA-256"
        );
    }
    (serial, log)
}

fn saw(requests: &[String], what: &str) -> bool {
    requests.iter().any(|r| r.starts_with(what))
}

#[needs(hf_xet)]
#[test]
fn reference_client_round_trip_with_default_settings() {
    let (_serial, log) = round_trip(Vec::new());
    let r = requests(&log);
    for expected in [
        "GET /v1/chunks/default/H 404",
        "POST /v1/xorb-grants/default/H 201",
        "PUT /v1/xorb-uploads/",
        "POST /v1/xorb-commits/default/H/grant/",
        "POST /v2/shards 200",
        "GET /v2/reconstructions/H 200",
        "GET /v1/xorb-data/H 206",
    ] {
        assert!(saw(&r, expected), "{expected} missing from {r:#?}");
    }
    for line in &r {
        if line.starts_with("PUT /v1/xorb-uploads/") || line.starts_with("POST /v1/xorb-commits/") {
            assert!(line.ends_with(" 200"), "{line}");
        }
    }
    // Every xorb went through a grant: none by the direct upload route.
    assert!(!saw(&r, "POST /v1/xorbs/"), "{r:#?}");
    assert!(!saw(&r, "POST /v1/shards"), "{r:#?}");
    assert_eq!(most_ranges(&log), 1, "single-range fetches by default");
}

#[needs(hf_xet)]
#[test]
fn reference_client_round_trip_with_legacy_settings() {
    let (_serial, log) = round_trip(vec![
        ("HF_XET_CLIENT_LEGACY_DIRECT_XORB_UPLOAD", "true"),
        ("HF_XET_CLIENT_SHARD_API_VERSION", "1"),
        ("HF_XET_CLIENT_RECONSTRUCTION_API_VERSION", "1"),
    ]);
    let r = requests(&log);
    for expected in [
        "POST /v1/xorbs/default/H 200",
        "POST /v1/shards 200",
        "GET /v1/reconstructions/H 200",
        "GET /v1/xorb-data/H 206",
    ] {
        assert!(saw(&r, expected), "{expected} missing from {r:#?}");
    }
    for unexpected in ["POST /v1/xorb-grants", "POST /v2/shards", "GET /v2/"] {
        assert!(!saw(&r, unexpected), "{unexpected} in {r:#?}");
    }
    assert_eq!(most_ranges(&log), 1, "v1 entries carry one range each");
}

#[needs(hf_xet)]
#[test]
fn an_edited_copy_stores_only_the_changed_chunks() {
    let python = common::reference_python();
    let (_serial, log) = exclusive();
    let peer = Peer {
        python,
        env: Vec::new(),
    };
    let s = common::server::start();
    let work = tempfile::tempdir().unwrap();
    let original = mixed(7, 8_000_000);
    let mut edited = original.clone();
    let middle = edited.len() / 2;
    edited[middle..middle + 4096].copy_from_slice(&common::splitmix64(99, 4096));
    let (a, b) = (
        work.path().join("big.bin"),
        work.path().join("big-edited.bin"),
    );
    std::fs::write(&a, &original).unwrap();
    std::fs::write(&b, &edited).unwrap();

    let xorbs = s.store_dir().join("xorbs");
    let before = bytes_under(&xorbs);
    peer.upload(&s, &work.path().join("cache-1"), std::slice::from_ref(&a));
    let after_first = bytes_under(&xorbs);
    // A fresh client cache: what the second upload does not send, it learned from the server's
    // global dedup answer.
    let uploaded = peer.upload(&s, &work.path().join("cache-2"), std::slice::from_ref(&b));
    let after_second = bytes_under(&xorbs);
    let added = after_second - after_first;
    assert!(
        saw(&requests(&log), "GET /v1/chunks/default/H 200"),
        "the second upload got a global dedup answer"
    );
    eprintln!(
        "xorb bytes stored: first upload {} for {} bytes; edited copy added {added} bytes",
        after_first - before,
        original.len()
    );
    assert!(
        after_first - before > 1_000_000,
        "the first upload is stored"
    );
    assert!(
        added < edited.len() as u64 / 20,
        "the edited copy added {added} bytes, more than 5% of {}",
        edited.len()
    );

    // Download in multi-range mode: the edited copy uses two separate runs of the original's
    // xorb, which the v2 answer lists in one entry, fetched with one multi-range request.
    let peer = Peer {
        env: vec![("HF_XET_CLIENT_ENABLE_MULTIRANGE_FETCHING", "true")],
        ..peer
    };
    let dest = work.path().join("back.bin");
    let (hash, size) = uploaded[0].clone();
    peer.download(
        &s,
        &work.path().join("cache-3"),
        &[(dest.clone(), hash.clone(), size)],
    );
    assert_eq!(std::fs::read(&dest).unwrap(), edited);
    assert!(
        most_ranges(&log) >= 2,
        "a multi-range fetch was served: {:#?}",
        requests(&log)
    );

    let TestServer { server, dir } = s;
    server.stop().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    assert_eq!(
        store.file_by_oid(&sha256_oid(&edited)).unwrap(),
        Some((FileHash::from_hex(&hash).unwrap(), size))
    );
}
