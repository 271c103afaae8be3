//! The local shard cache: lookups (raw and keyed, expiry), damaged files, pruning, eight
//! processes writing at once, `git-xet cache`, and uploads that deduplicate through it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use xet_client::pipeline::cached::Cached;
use xet_client::pipeline::download::write_plan;
use xet_client::pipeline::upload::{upload, UploadOptions};
use xet_client::ShardCache;
use xet_format::hash::xorb_hash;
use xet_format::shard::{ParsedShard, Shard, ShardMeta, XorbInfo};
use xet_format::{ChunkHash, ChunkRef, FileHash, HmacKey, LfsOid, ShardHash, XorbHash};
use xet_protocol::{CasTarget, TargetError};
use xet_store::Store;

// ---- helpers ----

fn chunk(seed: u64, i: u64) -> ChunkHash {
    ChunkHash::of(&[seed.to_le_bytes(), i.to_le_bytes()].concat())
}

/// A dedup-style shard: one xorb of `n` chunks derived from `seed`, no files.
fn shard(seed: u64, n: u64) -> Shard {
    let chunks: Vec<ChunkRef> = (0..n)
        .map(|i| ChunkRef::new(chunk(seed, i), 1000))
        .collect();
    let xorb = XorbInfo::from_chunks(xorb_hash(&chunks), &chunks).unwrap();
    Shard {
        files: Vec::new(),
        xorbs: vec![xorb],
        meta: ShardMeta::SESSION,
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn shard_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

fn path_of(dir: &Path, hash: &ShardHash) -> PathBuf {
    dir.join(format!("{hash}.mdb"))
}

fn set_mtime(path: &Path, secs_ago: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
        .unwrap();
}

/// Every file in `dir` is a complete shard with lookup tables whose bytes hash to its name.
fn assert_all_valid(dir: &Path) -> usize {
    let files = shard_files(dir);
    for p in &files {
        let name = p.file_name().unwrap().to_str().unwrap();
        let stem = name
            .strip_suffix(".mdb")
            .unwrap_or_else(|| panic!("stray file {name}"));
        let bytes = std::fs::read(p).unwrap();
        assert_eq!(ShardHash::of(&bytes).to_hex(), stem, "{name}");
        let parsed = ParsedShard::parse(&bytes).unwrap();
        assert!(!parsed.is_upload_form());
        assert!(
            parsed.lookup_tables().chunk,
            "{name} has a chunk lookup table"
        );
    }
    files.len()
}

// ---- lookups ----

#[test]
fn insert_then_lookup_in_this_and_a_new_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cdir = dir.path().join("ep");
    let cache = ShardCache::open(&cdir);
    // Nothing yet, and no directory is created by a lookup.
    assert!(cache.lookup(&chunk(1, 0)).unwrap().is_none());
    assert!(!cdir.exists());

    let a = shard(1, 50);
    let ha = cache.insert_shard(&a).unwrap();
    assert!(path_of(&cdir, &ha).is_file());
    // Inserting again changes nothing.
    assert_eq!(cache.insert_shard(&a).unwrap(), ha);
    assert_eq!(assert_all_valid(&cdir), 1);

    // This process's index (built before the insert) includes it.
    let found = cache
        .lookup(&chunk(1, 17))
        .unwrap()
        .expect("inserted shard found");
    assert_eq!(*found, a);
    assert!(cache.lookup(&chunk(2, 0)).unwrap().is_none());

    // A fresh cache over the same directory reads it from disk.
    let b = shard(2, 30);
    let hb = cache.insert_shard(&b).unwrap();
    let fresh = ShardCache::open(&cdir);
    for i in [0, 29] {
        assert_eq!(*fresh.lookup(&chunk(2, i)).unwrap().unwrap(), b);
    }
    assert_eq!(*fresh.lookup(&chunk(1, 49)).unwrap().unwrap(), a);
    assert!(fresh.lookup(&chunk(1, 50)).unwrap().is_none());

    let stats = fresh.stats().unwrap();
    assert_eq!(stats.shards, 2);
    assert_eq!(
        stats.bytes,
        std::fs::metadata(path_of(&cdir, &ha)).unwrap().len()
            + std::fs::metadata(path_of(&cdir, &hb)).unwrap().len()
    );
    assert_eq!(stats.dir, cdir);
}

#[test]
fn keyed_shards_are_found_by_raw_hash_until_they_expire() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ShardCache::open(dir.path());
    let key = HmacKey::from_bytes([7; 32]);
    let mut live = shard(10, 20).to_keyed(key).unwrap();
    live.meta.key_expiry = now() + 3600;
    let mut expired = shard(11, 20).to_keyed(key).unwrap();
    expired.meta.key_expiry = now() - 60;
    let mut long_expired = shard(12, 20)
        .to_keyed(HmacKey::from_bytes([8; 32]))
        .unwrap();
    long_expired.meta.key_expiry = now() - 8 * 24 * 3600;
    let h_live = cache.insert_shard(&live).unwrap();
    let h_expired = cache.insert_shard(&expired).unwrap();
    let h_long = cache.insert_shard(&long_expired).unwrap();

    for c in [&cache, &ShardCache::open(dir.path())] {
        let got = c
            .lookup(&chunk(10, 5))
            .unwrap()
            .expect("keyed hit by raw hash");
        assert!(got.is_keyed());
        assert_eq!(*got, live);
        // The keyed form itself is not a raw hash of anything in the cache.
        let keyed = live.xorbs[0].chunks[5].hash;
        assert!(c.lookup(&keyed).unwrap().is_none());
        assert!(c.lookup(&chunk(11, 5)).unwrap().is_none(), "expired");
        assert!(c.lookup(&chunk(12, 5)).unwrap().is_none(), "long expired");
    }
    // Building an index deletes shards expired for more than 7 days, and only those.
    assert!(path_of(dir.path(), &h_live).exists());
    assert!(path_of(dir.path(), &h_expired).exists());
    assert!(!path_of(dir.path(), &h_long).exists());
}

#[test]
fn damaged_files_are_skipped_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = ShardCache::open(d);
    let good = shard(20, 10);
    let h_good = cache.insert_shard(&good).unwrap();
    let h_trunc = cache.insert_shard(&shard(21, 10)).unwrap();
    let h_flip = cache.insert_shard(&shard(22, 10)).unwrap();

    // Truncated.
    let p = path_of(d, &h_trunc);
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 37]).unwrap();
    // One byte of chunk 0's hash flipped: header, footer and lookup table still look right.
    let p = path_of(d, &h_flip);
    let mut bytes = std::fs::read(&p).unwrap();
    let chunk0 = 48 * 3 + 20; // header, file bookend, xorb header, then inside chunk 0's hash
    bytes[chunk0] ^= 0xff;
    std::fs::write(&p, &bytes).unwrap();
    // Garbage, an empty file, and a valid shard under the wrong name.
    let garbage = path_of(d, &ShardHash::from_bytes([1; 32]));
    std::fs::write(&garbage, b"not a shard at all").unwrap();
    let empty = path_of(d, &ShardHash::from_bytes([2; 32]));
    std::fs::write(&empty, b"").unwrap();
    let renamed = path_of(d, &ShardHash::from_bytes([3; 32]));
    let h_other = cache.insert_shard(&shard(23, 10)).unwrap();
    std::fs::rename(path_of(d, &h_other), &renamed).unwrap();
    // Files that are not shards are ignored, not deleted.
    std::fs::write(d.join("README"), b"hello").unwrap();

    let fresh = ShardCache::open(d);
    assert_eq!(*fresh.lookup(&chunk(20, 3)).unwrap().unwrap(), good);
    assert!(fresh.lookup(&chunk(21, 3)).unwrap().is_none());
    // Chunk 1 of the flipped shard is still in its lookup table: the shard is read, fails its
    // hash check and is dropped.
    assert!(fresh.lookup(&chunk(22, 1)).unwrap().is_none());
    assert!(fresh.lookup(&chunk(22, 2)).unwrap().is_none());
    // The shard under a wrong name is read, fails its hash check and is dropped.
    assert!(fresh.lookup(&chunk(23, 0)).unwrap().is_none());

    assert!(path_of(d, &h_good).exists());
    for gone in [
        path_of(d, &h_trunc),
        path_of(d, &h_flip),
        garbage,
        empty,
        renamed,
    ] {
        assert!(!gone.exists(), "{} removed", gone.display());
    }
    assert!(d.join("README").exists());
    assert_eq!(fresh.stats().unwrap().shards, 1);
}

// ---- size ----

#[test]
fn prune_removes_least_recently_used_first() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = ShardCache::open(d);
    let hashes: Vec<ShardHash> = (0..10)
        .map(|i| cache.insert_shard(&shard(100 + i, 40)).unwrap())
        .collect();
    // Shard i was last used 100 - i minutes ago: shard 0 is the oldest.
    for (i, h) in hashes.iter().enumerate() {
        set_mtime(&path_of(d, h), (100 - i as u64) * 60);
    }
    let len = std::fs::metadata(path_of(d, &hashes[0])).unwrap().len();
    let total = cache.stats().unwrap().bytes;
    assert_eq!(total, 10 * len);

    // A hit on shard 1 makes it the most recently used.
    let fresh = ShardCache::open(d);
    assert!(fresh.lookup(&chunk(101, 0)).unwrap().is_some());

    let report = fresh.prune(4 * len).unwrap();
    assert_eq!((report.removed_shards, report.removed_bytes), (6, 6 * len));
    assert_eq!((report.kept_shards, report.kept_bytes), (4, 4 * len));
    let kept: Vec<bool> = hashes.iter().map(|h| path_of(d, h).exists()).collect();
    assert_eq!(
        kept,
        [false, true, false, false, false, false, false, true, true, true]
    );
    assert_eq!(fresh.stats().unwrap().bytes, 4 * len);
    // Pruned shards are no longer found, kept ones are.
    assert!(fresh.lookup(&chunk(100, 0)).unwrap().is_none());
    assert!(fresh.lookup(&chunk(109, 0)).unwrap().is_some());

    // Under the limit: nothing to do.
    assert_eq!(fresh.prune(u64::MAX).unwrap().removed_shards, 0);
    // Clear removes everything, and the directory.
    let report = fresh.clear().unwrap();
    assert_eq!((report.removed_shards, report.kept_shards), (4, 0));
    assert!(!d.exists());
    assert!(fresh.lookup(&chunk(109, 0)).unwrap().is_none());
}

#[test]
fn inserts_keep_the_directory_under_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let probe = ShardCache::open(&dir.path().join("probe"));
    let h = probe.insert_shard(&shard(200, 40)).unwrap();
    let len = std::fs::metadata(path_of(&dir.path().join("probe"), &h))
        .unwrap()
        .len();

    let d = dir.path().join("limited");
    let cache = ShardCache::open(&d).with_max_bytes(5 * len);
    assert_eq!(cache.max_bytes(), 5 * len);
    for i in 0..12 {
        // Distinct modification times (file systems keep them with a coarse clock).
        std::thread::sleep(Duration::from_millis(20));
        cache.insert_shard(&shard(300 + i, 40)).unwrap();
        let bytes = cache.stats().unwrap().bytes;
        assert!(bytes <= 5 * len, "after insert {i}: {bytes} > {}", 5 * len);
    }
    // The newest shards survive.
    assert!(cache.lookup(&chunk(311, 0)).unwrap().is_some());
    assert!(ShardCache::open(&d)
        .lookup(&chunk(311, 0))
        .unwrap()
        .is_some());
    assert!(ShardCache::open(&d)
        .lookup(&chunk(300, 0))
        .unwrap()
        .is_none());
}

// ---- eight processes ----

const CHILD_DIR: &str = "SHARD_CACHE_TEST_CHILD_DIR";
const CHILD_ID: &str = "SHARD_CACHE_TEST_CHILD_ID";
const CHILD_MAX: &str = "SHARD_CACHE_TEST_CHILD_MAX";
const PER_CHILD: u64 = 25;
const SHARED: u64 = 5;

/// Runs `parent`, the body of an `eight_processes_*` test, or, in the child processes that test
/// starts (the test binary running the same test with [`CHILD_DIR`] set), the child's part.
fn as_parent_or_child(parent: impl FnOnce()) {
    match std::env::var_os(CHILD_DIR) {
        Some(dir) => child(Path::new(&dir)),
        None => parent(),
    }
}

/// A child process's part: writes its shards (and the shared ones) and looks up others'.
fn child(dir: &Path) {
    let id: u64 = std::env::var(CHILD_ID).unwrap().parse().unwrap();
    let max: u64 = std::env::var(CHILD_MAX).unwrap().parse().unwrap();
    let cache = ShardCache::open(dir).with_max_bytes(max);
    for i in 0..PER_CHILD {
        cache.insert_shard(&shard(1000 * (id + 1) + i, 30)).unwrap();
        // Every child also writes the same few shards, at the same time as the others.
        if i < SHARED {
            cache.insert_shard(&shard(i, 30)).unwrap();
        }
        // Lookups while others write must never fail.
        cache.lookup(&chunk(1000 * (id + 1), 0)).unwrap();
        ShardCache::open(dir)
            .lookup(&chunk(1000 * (((id + 1) % 8) + 1), 0))
            .unwrap();
    }
}

/// Starts eight child processes running test `test` (of this module) on `dir`, and checks that
/// each ran it and succeeded.
fn spawn_children(test: &str, dir: &Path, max: u64) {
    let exe = std::env::current_exe().unwrap();
    // This file is a module of the `store` test binary: the name without the crate's.
    let module = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_, rest)| rest);
    let name = format!("{module}::{test}");
    let children: Vec<_> = (0..8)
        .map(|id| {
            Command::new(&exe)
                .args([name.as_str(), "--exact", "--test-threads=1"])
                .env(CHILD_DIR, dir)
                .env(CHILD_ID, id.to_string())
                .env(CHILD_MAX, max.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a child process failed:\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        // The filter matched the one test: the child really ran it.
        assert!(
            text(&out.stdout).contains("1 passed"),
            "{}",
            text(&out.stdout)
        );
    }
}

#[test]
fn eight_processes_writing_at_once_lose_nothing() {
    as_parent_or_child(eight_writers);
}

fn eight_writers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("ep");
    spawn_children("eight_processes_writing_at_once_lose_nothing", &d, u64::MAX);
    // Every shard of every child, and the shared ones once; no temporary files left.
    assert_eq!(assert_all_valid(&d) as u64, 8 * PER_CHILD + SHARED);
    let cache = ShardCache::open(&d);
    for id in 0..8 {
        for i in 0..PER_CHILD {
            let seed = 1000 * (id + 1) + i;
            let found = cache.lookup(&chunk(seed, 29)).unwrap();
            assert_eq!(*found.expect("every entry present"), shard(seed, 30));
        }
    }
    for i in 0..SHARED {
        assert!(cache.lookup(&chunk(i, 0)).unwrap().is_some());
    }
}

#[test]
fn eight_processes_pruning_at_once_stay_near_the_limit() {
    as_parent_or_child(eight_pruners);
}

fn eight_pruners() {
    let dir = tempfile::tempdir().unwrap();
    let probe = ShardCache::open(&dir.path().join("probe"));
    let h = probe.insert_shard(&shard(1, 30)).unwrap();
    let len = std::fs::metadata(path_of(&dir.path().join("probe"), &h))
        .unwrap()
        .len();
    let max = 20 * len;
    let d = dir.path().join("ep");
    spawn_children(
        "eight_processes_pruning_at_once_stay_near_the_limit",
        &d,
        max,
    );
    let n = assert_all_valid(&d) as u64;
    let bytes = ShardCache::open(&d).stats().unwrap().bytes;
    // Each process measures after its own inserts; one that has not seen another's newest
    // files may leave up to a few shards over until its next insert.
    assert!(n >= 1 && bytes <= 2 * max, "{n} shards, {bytes} bytes");
}

// ---- git-xet cache ----

fn git_xet(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_git-xet"))
        .args(args)
        .env("GIT_XET_CACHE_DIR", root)
        .env_remove("GIT_XET_CACHE_MAX_SIZE")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

#[test]
fn cli_show_prune_clear() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cache root");
    let key_a = ShardCache::endpoint_key("https://cas.example.com");
    let key_b = ShardCache::endpoint_key("/srv/xet-store");
    let a = ShardCache::open(&root.join("shards").join(&key_a));
    let b = ShardCache::open(&root.join("shards").join(&key_b));
    for i in 0..3 {
        a.insert_shard(&shard(500 + i, 40)).unwrap();
    }
    let hb = b.insert_shard(&shard(600, 40)).unwrap();
    let len = std::fs::metadata(path_of(b.dir(), &hb)).unwrap().len();
    let total = a.stats().unwrap().bytes + len;

    // `show`, also the default.
    for args in [&["cache", "show"][..], &["cache"][..]] {
        let out = git_xet(&root, args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let s = text(&out.stdout);
        assert!(
            s.contains(&format!("cache root: {}", root.display())),
            "{s}"
        );
        assert!(s.contains("limit 1.0 GiB per endpoint"), "{s}");
        assert!(
            s.contains(&format!("  {key_a}: 3 shards, {} bytes", 3 * len)),
            "{s}"
        );
        assert!(
            s.contains(&format!("  {key_b}: 1 shard, {len} bytes")),
            "{s}"
        );
        assert!(
            s.contains(&format!("total: 4 shards, {total} bytes")),
            "{s}"
        );
        assert!(s.contains("in 2 endpoint directories"), "{s}");
    }

    // `prune` to one shard's worth per endpoint.
    let out = git_xet(&root, &["cache", "prune", "--max-size", &len.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains(&format!("removed 2 shards, {} bytes", 2 * len)),
        "{s}"
    );
    assert_eq!(a.stats().unwrap().shards, 1);
    assert_eq!(b.stats().unwrap().shards, 1);
    // Sizes with units; a bad one is a usage error naming the value.
    let out = git_xet(&root, &["cache", "prune", "--max-size", "2G"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("pruned to 2.0 GiB per endpoint: removed 0 shards"));
    let out = git_xet(&root, &["cache", "prune", "--max-size", "lots"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("`lots` is not a size"),
        "{}",
        text(&out.stderr)
    );

    // `clear`.
    let out = git_xet(&root, &["cache", "clear"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("removed 2 shards"),
        "{}",
        text(&out.stdout)
    );
    assert!(!root.join("shards").exists());
    let out = git_xet(&root, &["cache", "show"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("total: 0 shards, 0 bytes"));

    // Failures exit 1 with a message naming the problem.
    let file = dir.path().join("a file");
    std::fs::write(&file, b"x").unwrap();
    let out = git_xet(&file, &["cache", "show"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.starts_with("git-xet: error: cannot list "), "{err}");
    assert!(err.contains("a file"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_git-xet"))
        .args(["cache", "prune"])
        .env("GIT_XET_CACHE_DIR", &root)
        .env("GIT_XET_CACHE_MAX_SIZE", "huge")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("GIT_XET_CACHE_MAX_SIZE"));

    // Help texts.
    let out = git_xet(&root, &["cache", "--help"]);
    let s = text(&out.stdout);
    assert!(s.contains("GIT_XET_CACHE_DIR") && s.contains("prune") && s.contains("clear"));
    let out = git_xet(&root, &["cache", "prune", "--help"]);
    assert!(text(&out.stdout).contains("--max-size <SIZE>"));
}

// ---- uploads ----

fn edited(data: &[u8], at: usize) -> Vec<u8> {
    let mut e = data.to_vec();
    for b in &mut e[at..at + 16] {
        *b ^= 0x5a;
    }
    e
}

fn download(store: &Store, oid: &LfsOid) -> Vec<u8> {
    let (file, _) = store.file_by_oid(oid).unwrap().expect("registered");
    let plan = store.reconstruction(&file, None).unwrap().unwrap();
    let mut out = Vec::new();
    write_plan(store, &plan, &mut |piece| {
        out.extend_from_slice(piece);
        Ok(())
    })
    .unwrap();
    out
}

const NO_GLOBAL: UploadOptions = UploadOptions {
    expected_sha256: None,
    expected_size: None,
    policy: xet_format::xorb::CompressionPolicy::Auto,
    limits: xet_format::xorb::XorbLimits::CLIENT,
    global_dedup: false,
    max_shard_bytes: xet_format::shard::MAX_SHARD_SIZE,
    parallel_puts: 2,
    sha256_declared_by_namer: false,
};

#[test]
fn upload_deduplicates_against_the_cache_of_an_earlier_upload() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let cache_dir = dir.path().join("cache");
    let data = common::splitmix64(42, 6 << 20);
    let edit = edited(&data, 3 << 20);

    let first = upload(
        &Cached::new(&store, ShardCache::open(&cache_dir)),
        &data[..],
        &NO_GLOBAL,
    )
    .unwrap();
    assert_eq!(first.dedup_bytes, 0);
    assert_eq!(ShardCache::open(&cache_dir).stats().unwrap().shards, 1);

    // A new wrapper (a new process, say) over the same directory.
    let second = upload(
        &Cached::new(&store, ShardCache::open(&cache_dir)),
        &edit[..],
        &NO_GLOBAL,
    )
    .unwrap();
    assert_eq!(second.dedup_queries, 0);
    assert!(
        second.dedup_bytes > second.size * 9 / 10,
        "dedup {} of {}",
        second.dedup_bytes,
        second.size
    );
    assert!(
        second.uploaded_bytes < second.size / 10,
        "uploaded {} of {}",
        second.uploaded_bytes,
        second.size
    );
    assert_eq!(download(&store, &second.sha256), edit);
    assert_eq!(ShardCache::open(&cache_dir).stats().unwrap().shards, 2);

    // Without the cache, the same uploads deduplicate nothing.
    let plain = Store::open(&dir.path().join("plain")).unwrap();
    upload(&plain, &data[..], &NO_GLOBAL).unwrap();
    let control = upload(&plain, &edit[..], &NO_GLOBAL).unwrap();
    assert_eq!(control.dedup_bytes, 0);
    assert!(control.uploaded_bytes > control.size);
}

/// A target whose global-dedup answers are keyed, as a real server's are.
struct KeyingTarget<'a>(&'a Store);

impl CasTarget for KeyingTarget<'_> {
    fn has_xorb(&self, xorb: &XorbHash) -> Result<bool, TargetError> {
        CasTarget::has_xorb(self.0, xorb)
    }
    fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, TargetError> {
        CasTarget::put_xorb(self.0, xorb, body)
    }
    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        CasTarget::register_shard(self.0, shard)
    }
    fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        Ok(CasTarget::dedup_query(self.0, chunk)?.map(|s| {
            let mut k = s.to_keyed(HmacKey::from_bytes([9; 32])).unwrap();
            k.meta.key_expiry = now() + 3600;
            k
        }))
    }
    fn file_by_sha256(&self, _: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        Ok(None)
    }
}

#[test]
fn keyed_dedup_answers_are_cached_and_used() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let cache_dir = dir.path().join("cache");
    let data = common::splitmix64(7, 4 << 20);
    // Someone else uploaded the original: this cache knows nothing of it.
    upload(&store, &data[..], &NO_GLOBAL).unwrap();

    // With global dedup: the keyed answer for the first chunk is used and cached.
    let with_global = UploadOptions {
        global_dedup: true,
        ..NO_GLOBAL
    };
    let target = KeyingTarget(&store);
    let one = upload(
        &Cached::new(&target, ShardCache::open(&cache_dir)),
        &edited(&data, 1 << 20)[..],
        &with_global,
    )
    .unwrap();
    assert!(one.dedup_queries >= 1);
    assert!(one.dedup_bytes > one.size * 9 / 10);
    let keyed = shard_files(&cache_dir)
        .iter()
        .map(|p| {
            ParsedShard::parse(&std::fs::read(p).unwrap())
                .unwrap()
                .shard
        })
        .filter(Shard::is_keyed)
        .count();
    assert_eq!(keyed, 1, "the keyed answer is cached");

    // Without global dedup, a new wrapper finds the same xorbs through the cached answer.
    let edit2 = edited(&data, 2 << 20);
    let two = upload(
        &Cached::new(&target, ShardCache::open(&cache_dir)),
        &edit2[..],
        &NO_GLOBAL,
    )
    .unwrap();
    assert_eq!(two.dedup_queries, 0);
    assert!(two.dedup_bytes > two.size * 9 / 10, "{two:?}");
    assert_eq!(download(&store, &two.sha256), edit2);
}

/// A xorb the cache knows but the server lost: the upload that deduplicated against it is refused
/// naming it, the cache forgets it, and the next upload sends its chunks again, which repairs the
/// server's copy for every file that needed it.
#[test]
fn xorbs_the_server_lost_are_forgotten_and_uploaded_again() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let store = Store::open(&store_dir).unwrap();
    let cache_dir = dir.path().join("cache");
    let data = common::splitmix64(7, 3 << 20);
    let edit = edited(&data, 1 << 20);
    let first = upload(
        &Cached::new(&store, ShardCache::open(&cache_dir)),
        &data[..],
        &NO_GLOBAL,
    )
    .unwrap();

    // The server loses the first upload's xorbs (deleted from its disk).
    let mut lost = Vec::new();
    for sub in std::fs::read_dir(store_dir.join("xorbs"))
        .unwrap()
        .flatten()
    {
        for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
            lost.push(XorbHash::from_hex(f.file_name().to_str().unwrap()).unwrap());
            std::fs::remove_file(f.path()).unwrap();
        }
    }
    assert!(!lost.is_empty());

    let refused = upload(
        &Cached::new(&store, ShardCache::open(&cache_dir)),
        &edit[..],
        &NO_GLOBAL,
    )
    .unwrap_err();
    let text = refused.to_string();
    assert!(
        text.contains("xorb_damaged") || text.contains("damaged"),
        "{text}"
    );
    assert!(lost.iter().any(|x| text.contains(&x.to_hex())), "{text}");

    // The cache no longer offers them: the retry uploads the chunks and succeeds.
    let retry = upload(
        &Cached::new(&store, ShardCache::open(&cache_dir)),
        &edit[..],
        &NO_GLOBAL,
    )
    .unwrap();
    assert!(retry.uploaded_bytes > retry.size / 2, "{retry:?}");
    assert_eq!(download(&store, &retry.sha256), edit);
    // Uploading the original again (its xorbs are rebuilt identically) repairs the first file.
    let again = upload(&store, &data[..], &NO_GLOBAL).unwrap();
    assert_eq!(again.file_hash, first.file_hash);
    assert_eq!(download(&store, &first.sha256), data);
}
