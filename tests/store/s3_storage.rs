//! `git xet serve --storage s3://…` against a real distributed object store (a single-node
//! Garage started by the test): the object backend's guarantees (create-if-absent under
//! concurrency, ranged reads, stamps, listing, quarantine, the shard log), and several server
//! nodes on one bucket: a push through one node cloned through another, a node started on an
//! empty disk, the reference client across nodes, the same file pushed through two nodes at
//! once stored once.
//!
//! Every test needs Garage and is ignored unless asked for (`--include-ignored`, as CI runs).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::PathBuf;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use std::time::Duration;

use common::garage::Garage;
use common::server::{start_with, TestServer, WRITE_TOKEN};
use xet_format::{ShardHash, XorbHash};
use xet_store::backend::{BackendError, LogCursor, ObjectBackend, ObjectKey, SharedBucket};
use xet_store::s3::S3Backend;

fn backend(g: &Garage, bucket: &str, prefix: &str) -> (S3Backend, tempfile::TempDir) {
    let spool = tempfile::tempdir().unwrap();
    let b = S3Backend::open(
        &g.s3_config(bucket, prefix),
        spool.path(),
        0,
        Garage::runtime(),
    )
    .unwrap();
    (b, spool)
}

#[needs(garage)]
#[test]
fn the_backend_on_garage_creates_once_reads_ranges_and_lists() {
    let g = Garage::start();
    g.create_bucket("backend");
    let (b, _spool) = backend(&g, "backend", "team/a");
    let b = Arc::new(b);
    let key = ObjectKey::Xorb(XorbHash::from_bytes([7; 32]));
    assert_eq!(b.len(key).unwrap(), None);
    assert_eq!(b.stamp(key).unwrap(), None);
    assert_eq!(b.read_range(key, 0..4).unwrap(), None);
    assert!(b.put_if_absent(key, b"hello world").unwrap());
    assert!(
        !b.put_if_absent(key, b"other bytes").unwrap(),
        "a second create of the same key must not replace it"
    );
    assert_eq!(b.read_all(key).unwrap().unwrap(), b"hello world");
    assert_eq!(b.read_range(key, 6..11).unwrap().unwrap(), b"world");
    match b.read_range(key, 6..12) {
        Err(BackendError::RangeOutOfBounds { len, .. }) => assert_eq!(len, 11),
        other => panic!("a range past the end: {other:?}"),
    }
    assert_eq!(b.len(key).unwrap(), Some(11));
    let stamp = b.stamp(key).unwrap().unwrap();
    assert_eq!(stamp.len, 11);
    assert_eq!(b.stamp(key).unwrap(), Some(stamp), "stable while untouched");

    // Eight writers of one key at once. Garage 2.5 ignores `If-None-Match: *`, so several may
    // report that they created it; what matters is that one whole copy, one writer's, remains.
    let shard = ObjectKey::Shard(ShardHash::from_bytes([1; 32]));
    let created: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8u8)
            .map(|i| {
                let b = Arc::clone(&b);
                s.spawn(move || b.put_if_absent(shard, &[i; 100_000]).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(created.iter().any(|c| *c), "{created:?}");
    let stored = b.read_all(shard).unwrap().unwrap();
    assert_eq!(stored.len(), 100_000);
    let writer = stored[0] as usize;
    assert!(
        created[writer],
        "the copy that remains is from a writer that wrote"
    );
    assert!(
        stored.iter().all(|&x| x == stored[0]),
        "one writer's bytes, whole"
    );
    assert!(!b.put_if_absent(shard, b"later").unwrap());
    assert_eq!(
        b.list_shards().unwrap(),
        vec![ShardHash::from_bytes([1; 32])]
    );

    // A file is sent as it is and consumed.
    let other = ObjectKey::Xorb(XorbHash::from_bytes([8; 32]));
    let tmp = b.temp_path("xorb");
    std::fs::write(&tmp, vec![5u8; 3 << 20]).unwrap();
    assert!(b.put_file_if_absent(other, &tmp).unwrap());
    assert!(!tmp.exists());
    assert_eq!(
        b.read_range(other, (3 << 20) - 4..3 << 20)
            .unwrap()
            .unwrap(),
        vec![5u8; 4]
    );
    let listed = b.list_xorbs().unwrap();
    assert_eq!(
        listed.iter().map(|x| (x.hash, x.len)).collect::<Vec<_>>(),
        vec![
            (XorbHash::from_bytes([7; 32]), 11),
            (XorbHash::from_bytes([8; 32]), 3 << 20)
        ]
    );

    // Touching re-dates a xorb for garbage collection without changing its stamp.
    let before = b.modified(key).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    b.touch(key).unwrap();
    assert!(b.modified(key).unwrap().unwrap() > before);
    assert_eq!(b.stamp(key).unwrap(), Some(stamp));

    // Quarantine moves it aside; the key is free again.
    assert!(b.quarantine(key).unwrap());
    assert_eq!(b.len(key).unwrap(), None);
    assert!(!b.quarantine(key).unwrap());
    assert!(b.put_if_absent(key, b"repaired").unwrap());
    assert!(b.remove(key).unwrap());
    assert!(!b.remove(key).unwrap());

    // The shard log: what one node logs, another finds, and the cursor moves on.
    let (b2, _spool2) = backend(&g, "backend", "team/a");
    let mut cursor = LogCursor::default();
    assert!(b2.logged_shards(&mut cursor).unwrap().is_empty());
    let logged = ShardHash::from_bytes([9; 32]);
    b.log_shard(&logged, None).unwrap();
    b.log_shard(&logged, Some(&repo_name("team/models")))
        .unwrap();
    let entries = b2.logged_shards(&mut cursor).unwrap();
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.shard, e.repo.clone()))
            .collect::<Vec<_>>(),
        vec![(logged, None), (logged, Some(repo_name("team/models")))]
    );
    assert!(entries.iter().all(|e| e.ms > 0 && e.ms <= cursor.newest_ms));
    assert!(cursor.newest_ms > 0);
    // The registration through a repository is also kept for good, in the log; a record an
    // earlier version wrote beside its log entry (`access/<shard>/<repo, base64url>`) still
    // counts, and one registration written both ways is listed once.
    assert_eq!(
        b2.list_access().unwrap(),
        vec![(logged, repo_name("team/models"))]
    );
    let older = ShardHash::from_bytes([3; 32]);
    for (shard, repo) in [(older, "team/old"), (logged, "team/models")] {
        let name = format!("access/{shard}/{}", URL_SAFE_NO_PAD.encode(repo));
        b.shared_value(&name, b"").unwrap();
    }
    assert_eq!(
        b2.list_access().unwrap(),
        vec![
            (older, repo_name("team/old")),
            (logged, repo_name("team/models"))
        ]
    );

    // Shared values: the first writer's value is everyone's.
    assert_eq!(
        b.shared_value("server.key", b"first").unwrap().unwrap(),
        b"first"
    );
    assert_eq!(
        b2.shared_value("server.key", b"second").unwrap().unwrap(),
        b"first"
    );

    // Another prefix of the same bucket is another store.
    let (b3, _spool3) = backend(&g, "backend", "team/b");
    assert!(b3.list_xorbs().unwrap().is_empty());
    assert!(b3.list_shards().unwrap().is_empty());
}

/// A server node on `bucket`/`prefix` of `g`, with a directory of its own.
fn node(g: &Garage, bucket: &str, prefix: &str) -> TestServer {
    let storage = g.s3_config(bucket, prefix);
    start_with(move |c| c.storage = Some(storage))
}

#[needs(garage)]
#[test]
fn a_store_directory_and_a_node_cache_are_not_mixed_up() {
    let g = Garage::start();
    g.create_bucket("mixup");
    let a = node(&g, "mixup", "");
    let dir = a.store_dir();
    drop(a.server);
    // The node's directory is not a directory store.
    let e = xet_store::Store::open(&dir).unwrap_err().to_string();
    assert!(e.contains("--storage s3://mixup"), "{e}");
    // A directory store cannot become a node's cache.
    let store_dir = tempfile::tempdir().unwrap();
    drop(xet_store::Store::open(store_dir.path()).unwrap());
    let e = xet_store::Store::open_s3(
        store_dir.path(),
        Default::default(),
        &g.s3_config("mixup", ""),
        Garage::runtime(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("directory store"), "{e}");
}

/// The xorbs stored in the bucket under `prefix`.
fn stored_xorbs(g: &Garage, bucket: &str, prefix: &str) -> Vec<(XorbHash, u64)> {
    let (b, _spool) = backend(g, bucket, prefix);
    b.list_xorbs()
        .unwrap()
        .into_iter()
        .map(|x| (x.hash, x.len))
        .collect()
}

/// Bytes of regular files under `dir` larger than 64 KiB (xorbs would be; the databases and
/// logs of a node's directory are not).
fn large_files(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if m.len() > 64 << 10 && e.path().extension().is_none_or(|x| x != "redb") {
                eprintln!("large file: {} ({} bytes)", e.path().display(), m.len());
                total += m.len();
            }
        }
    }
    total
}

/// `size` bytes: random with a seeded generator, in 1 KiB runs repeated so that part of it
/// deduplicates.
fn content(seed: u64, size: usize) -> Vec<u8> {
    common::splitmix64(seed, size)
}

#[needs(git_lfs, garage)]
#[test]
fn a_push_through_one_node_is_cloned_through_another_and_a_fresh_node() {
    let g = Garage::start();
    g.create_bucket("nodes");
    let a = node(&g, "nodes", "xet");
    let b = node(&g, "nodes", "xet");
    let env = common::git::GitEnv::new();
    let lfs_path = "/team/models.git/info/lfs";
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], &format!("{}{lfs_path}", a.url()));
    let mut edited = content(2, 3 << 20);
    edited[1 << 20..(1 << 20) + 4096].fill(0x5a);
    let files = [("a.bin", content(1, 2 << 20)), ("b.bin", edited)];
    for (name, data) in &files {
        std::fs::write(work.join(name), data).unwrap();
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "two files"]);
    env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    let in_bucket = stored_xorbs(&g, "nodes", "xet");
    assert!(
        !in_bucket.is_empty(),
        "the push stored no xorb in the bucket"
    );
    assert_eq!(
        large_files(&a.store_dir()),
        0,
        "node A kept object bytes on its own disk"
    );

    // Cloned through node B, right after the push (B finds A's shards on the miss).
    let clone_through = |server: &TestServer, name: &str| {
        env.clone_skip_smudge("remote.git", name);
        let clone = env.path().join(name);
        env.git(&clone, &["checkout", "-q", "main"]);
        env.git(
            &clone,
            &["config", "lfs.url", &format!("{}{lfs_path}", server.url())],
        );
        env.git(&clone, &["lfs", "pull"]);
        for (file, data) in &files {
            let got = std::fs::read(clone.join(file)).unwrap();
            assert!(got == *data, "{name}/{file} differs after lfs pull");
        }
    };
    clone_through(&b, "through-b");

    // A third node on an empty disk serves everything too.
    let c = node(&g, "nodes", "xet");
    clone_through(&c, "through-c");
    assert_eq!(large_files(&c.store_dir()), 0);
    // Nothing was stored twice.
    assert_eq!(stored_xorbs(&g, "nodes", "xet"), in_bucket);

    // Readiness follows the bucket: ready while it answers, 503 once it is gone.
    let ready = |s: &TestServer| {
        reqwest::blocking::get(format!("{}/ready", s.url()))
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(ready(&c), 200);
    // B caught up with A (the clone above needed it): its knowledge of the others has an age.
    let metrics = reqwest::blocking::get(format!("{}/metrics", b.url()))
        .unwrap()
        .text()
        .unwrap();
    let age: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gitxet_catch_up_age_seconds "))
        .unwrap_or_else(|| panic!("no catch-up age in:\n{metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert!(age >= 0.0, "B has caught up at least once: {age}");
    drop(g);
    assert_eq!(ready(&c), 503);
}

#[needs(garage, hf_xet)]
#[test]
fn the_reference_client_uploads_through_one_node_and_downloads_through_another() {
    let g = Garage::start();
    g.create_bucket("reference");
    let a = node(&g, "reference", "");
    let b = node(&g, "reference", "");
    let peer = common::hfxet::Peer {
        python: common::reference_python(),
        env: Vec::new(),
    };
    let work = tempfile::tempdir().unwrap();
    let data = content(7, 5 << 20);
    let input = work.path().join("model.bin");
    std::fs::write(&input, &data).unwrap();
    let uploaded = peer.upload(&a, &work.path().join("cache-up"), &[input]);
    let (hash, size) = uploaded[0].clone();
    assert_eq!(size, data.len() as u64);
    let dest = work.path().join("out.bin");
    peer.download(
        &b,
        &work.path().join("cache-down"),
        &[(dest.clone(), hash, size)],
    );
    assert!(
        std::fs::read(&dest).unwrap() == data,
        "downloaded bytes differ"
    );
}

#[needs(garage, hf_xet)]
#[test]
fn the_same_file_uploaded_through_two_nodes_at_once_is_stored_once() {
    let g = Garage::start();
    g.create_bucket("race");
    let a = node(&g, "race", "");
    let b = node(&g, "race", "");
    let peer = common::hfxet::Peer {
        python: common::reference_python(),
        env: Vec::new(),
    };
    let work = tempfile::tempdir().unwrap();
    let data = content(11, 6 << 20);
    let input = work.path().join("same.bin");
    std::fs::write(&input, &data).unwrap();
    let up = |server: &TestServer, cache: &str| {
        peer.upload(
            server,
            &work.path().join(cache),
            std::slice::from_ref(&input),
        )
    };
    let (ha, hb) = std::thread::scope(|s| {
        let ta = s.spawn(|| up(&a, "cache-a"));
        let tb = s.spawn(|| up(&b, "cache-b"));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert_eq!(ha, hb, "both uploads name the same file");
    let xorbs = stored_xorbs(&g, "race", "");
    let stored: u64 = xorbs.iter().map(|x| x.1).sum();
    // One copy: the stored xorbs hold the file once (compression aside, random data does not
    // shrink; a second copy would double it).
    assert!(
        stored < data.len() as u64 + (data.len() as u64 / 4),
        "{} bytes stored for a {}-byte file: {xorbs:?}",
        stored,
        data.len()
    );
    // Either node serves it.
    for (server, name) in [(&a, "from-a.bin"), (&b, "from-b.bin")] {
        let dest = work.path().join(name);
        peer.download(
            server,
            &work.path().join(format!("cache-{name}")),
            &[(dest.clone(), ha[0].0.clone(), ha[0].1)],
        );
        assert!(std::fs::read(&dest).unwrap() == data);
    }
}

/// A node as a `git-xet serve` child process on `bucket` of `g` with a fresh directory (it can
/// be killed like a crashed machine).
fn node_process(g: &Garage, bucket: &str) -> common::server::ServeProcess {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_git-xet"));
    cmd.args(common::server::serve_args(&dir.path().join("store")))
        .args(["--storage", &format!("s3://{bucket}")]);
    for (k, v) in g.settings() {
        cmd.env(k, v);
    }
    common::server::ServeProcess::from_command(cmd, dir)
}

#[needs(garage, hf_xet)]
#[test]
fn nodes_killed_mid_upload_and_restarted_on_empty_disks_lose_nothing() {
    let g = Garage::start();
    g.create_bucket("crash");
    let b = node(&g, "crash", "");
    let peer = common::hfxet::Peer {
        python: common::reference_python(),
        env: Vec::new(),
    };
    let work = tempfile::tempdir().unwrap();
    let write = |name: &str, seed: u64, size: usize| {
        let path = work.path().join(name);
        let data = content(seed, size);
        std::fs::write(&path, &data).unwrap();
        (path, data)
    };
    let (first_path, first) = write("first.bin", 21, 4 << 20);
    let first_hash = peer.upload(&b, &work.path().join("c1"), &[first_path])[0].clone();

    // An upload in flight through node A while node B answers reads of the first file.
    let mut a = node_process(&g, "crash");
    let (second_path, second) = write("second.bin", 22, 24 << 20);
    let second_hash = std::thread::scope(|s| {
        let up = s.spawn(|| peer.upload_to(&a.url, &work.path().join("c2"), &[second_path]));
        for i in 0..3 {
            let dest = work.path().join(format!("read-{i}.bin"));
            peer.download(
                &b,
                &work.path().join(format!("c3-{i}")),
                &[(dest.clone(), first_hash.0.clone(), first_hash.1)],
            );
            assert!(std::fs::read(&dest).unwrap() == first);
        }
        up.join().unwrap()[0].clone()
    });

    // Node A dies with an upload in flight (killed as a machine would crash), and comes back
    // on an empty disk.
    let (third_path, third) = write("third.bin", 23, 40 << 20);
    let upload = {
        let url = a.url.clone();
        let cache = work.path().join("c4");
        let python = peer.python.clone();
        let path = third_path.clone();
        std::thread::spawn(move || {
            let peer = common::hfxet::Peer {
                python,
                env: Vec::new(),
            };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                peer.upload_to(&url, &cache, &[path])
            }))
            .is_ok()
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    let _ = a.child.kill();
    let _ = a.child.wait();
    let _ = upload.join();
    drop(a);
    let a = node_process(&g, "crash");

    // Everything registered before the crash is served by the new node, and by B.
    for (url, name) in [(a.url.as_str(), "a"), (b.url(), "b")] {
        for (hash, data, file) in [(&first_hash, &first, "1"), (&second_hash, &second, "2")] {
            let dest = work.path().join(format!("after-{name}-{file}.bin"));
            peer.download_from(
                url,
                &work.path().join(format!("c5-{name}-{file}")),
                &[(dest.clone(), hash.0.clone(), hash.1)],
            );
            assert!(std::fs::read(&dest).unwrap() == *data, "{name}/{file}");
        }
    }
    // The interrupted upload, tried again through the new node, completes and reads back.
    let third_hash = peer.upload_to(&a.url, &work.path().join("c6"), &[third_path])[0].clone();
    let dest = work.path().join("third-back.bin");
    peer.download(
        &b,
        &work.path().join("c7"),
        &[(dest.clone(), third_hash.0, third_hash.1)],
    );
    assert!(std::fs::read(&dest).unwrap() == third);
}

#[needs(garage)]
#[test]
fn what_a_repository_registered_through_one_node_is_its_own_at_every_node() {
    use git_xet::server::auth::{RepoPattern, Scope, ServerToken};
    const A: &str = "team-a-secret-0123456789";
    const B: &str = "team-b-secret-0123456789";
    let g = Garage::start();
    g.create_bucket("teams");
    let scoped_node = || {
        let storage = g.s3_config("teams", "");
        start_with(move |c| {
            c.storage = Some(storage);
            c.secrets = vec![
                ServerToken::new(A, Scope::Write, "a")
                    .unwrap()
                    .scoped(RepoPattern::parse("team-a/*").unwrap()),
                ServerToken::new(B, Scope::Write, "b")
                    .unwrap()
                    .scoped(RepoPattern::parse("team-b/*").unwrap()),
            ];
        })
    };
    let n1 = scoped_node();
    let n2 = scoped_node();
    wait_ready(&n2);
    let http = reqwest::blocking::Client::new();
    let object = |s: &TestServer, repo: &str, oid: &str| {
        format!("{}/{repo}/info/lfs/objects/{oid}", s.url())
    };
    let data = content(51, 200_000);
    let oid = common::sha256_hex(&data);
    let put = http
        .put(object(&n1, "team-a/models", &oid))
        .basic_auth("git", Some(A))
        .body(data.clone())
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
    let get = |s: &TestServer, secret: &str, repo: &str| {
        let r = http
            .get(object(s, repo, &oid))
            .basic_auth("git", Some(secret))
            .send()
            .unwrap();
        let status = r.status().as_u16();
        let body = r.bytes().unwrap().to_vec();
        (status, status == 200 && body == data)
    };
    // Node 2 learns A's registration from the bucket (at once, on the miss).
    assert_eq!(get(&n2, A, "team-a/models"), (200, true));
    assert_eq!(get(&n2, B, "team-b/x").0, 404);
    // So does a node started later on an empty disk, from the registrations kept for good.
    let n3 = scoped_node();
    wait_ready(&n3);
    assert_eq!(get(&n3, A, "team-a/models"), (200, true));
    assert_eq!(get(&n3, B, "team-b/x").0, 404);
}

#[needs(garage)]
#[test]
fn garbage_collection_and_scrub_work_on_the_bucket() {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    use xet_format::xorb::ParsedXorb;
    use xet_store::{GcOptions, Store};

    let g = Garage::start();
    g.create_bucket("upkeep");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_s3(
        dir.path(),
        Default::default(),
        &g.s3_config("upkeep", ""),
        Garage::runtime(),
    )
    .unwrap();
    // A registered file, and an orphan: a fixture xorb no shard names (an interrupted push).
    let data = content(61, 2 << 20);
    let kept = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    let m = common::manifest();
    let parsed_bytes = common::read(&m.sessions[0].xorbs[0]);
    let parsed = ParsedXorb::parse(&parsed_bytes).unwrap();
    let orphan = parsed.hash();
    assert!(store.put_xorb(orphan, parsed.chunk_region()).unwrap());
    let before = stored_xorbs(&g, "upkeep", "");
    assert!(before.iter().any(|(h, _)| *h == orphan));

    // Young orphans are kept; past the grace period they go, and only they.
    let report = store
        .gc(GcOptions {
            grace: Duration::from_secs(3600),
            dry_run: false,
        })
        .unwrap();
    assert_eq!((report.xorbs_removed, report.xorbs_young), (0, 1));
    let report = store
        .gc(GcOptions {
            grace: Duration::ZERO,
            dry_run: false,
        })
        .unwrap();
    assert_eq!(report.xorbs_removed, 1);
    let after = stored_xorbs(&g, "upkeep", "");
    assert!(!after.iter().any(|(h, _)| *h == orphan));
    assert_eq!(after.len(), before.len() - 1);

    // Scrub reads everything whole: clean now; a xorb damaged in the bucket (same length,
    // one byte changed, as bit rot would) is found, quarantined and named with its file.
    let clean = store.scrub(&mut |_| {}).unwrap();
    assert!(!clean.found_damage(), "{clean:?}");
    let (b, _spool) = backend(&g, "upkeep", "");
    let (victim, len) = after[0];
    let key = ObjectKey::Xorb(victim);
    let mut bytes = b.read_all(key).unwrap().unwrap();
    bytes[len as usize / 2] ^= 0xff;
    let tmp = b.temp_path("rot");
    std::fs::write(&tmp, &bytes).unwrap();
    b.replace_file(key, &tmp).unwrap();
    let report = store.scrub(&mut |_| {}).unwrap();
    assert_eq!(
        report.damaged_xorbs.iter().map(|d| d.0).collect::<Vec<_>>(),
        vec![victim]
    );
    assert_eq!(report.affected_files, vec![kept.file_hash]);
    assert_eq!(b.len(key).unwrap(), None, "moved to quarantine");
}

/// Waits until a node has registered what the bucket holds (`/ready`): until then it answers
/// what it lacks "come back shortly" instead of "not found".
fn wait_ready(s: &TestServer) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = reqwest::blocking::get(format!("{}/ready", s.url()))
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        if status == 200 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} never ready ({status})",
            s.url()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// git-xet's client of node `s`, with the test's write token.
fn client(s: &TestServer) -> xet_client::RemoteCas {
    xet_client::RemoteCas::new(xet_client::RemoteConfig::new(
        s.url().to_string(),
        xet_client::TokenSource::fixed(Some(WRITE_TOKEN.into())),
    ))
    .unwrap()
}

/// The whole of `file`, downloaded through `cas`.
pub(crate) fn download_whole<E>(cas: &E, file: &xet_format::FileHash) -> Vec<u8>
where
    E: xet_protocol::target::Endpoint + xet_protocol::XorbSource,
{
    let plan = cas
        .reconstruction(file, None)
        .unwrap()
        .expect("the file is known");
    let mut got = Vec::new();
    xet_client::pipeline::download::write_plan(cas, &plan, &mut |piece: &[u8]| {
        got.extend_from_slice(piece);
        Ok(())
    })
    .unwrap();
    got
}

fn sent_xorb_bytes(s: &TestServer) -> u64 {
    s.health("sent_xorb_bytes")
}

#[needs(garage, hf_xet)]
#[test]
fn with_storage_urls_downloads_go_straight_to_the_bucket() {
    let g = Garage::start();
    g.create_bucket("direct");
    let storage = g.s3_config("direct", "");
    let direct = start_with(move |c| {
        c.storage = Some(storage);
        c.storage_urls = true;
    });
    let proxied = node(&g, "direct", "");
    let peer = common::hfxet::Peer {
        python: common::reference_python(),
        env: Vec::new(),
    };
    let work = tempfile::tempdir().unwrap();
    let data = content(71, 5 << 20);
    let input = work.path().join("model.bin");
    std::fs::write(&input, &data).unwrap();
    let (hash, size) = peer.upload(&direct, &work.path().join("up"), &[input])[0].clone();

    // The reference client, and git-xet's own client, each download through both nodes.
    for (server, name) in [(&direct, "direct"), (&proxied, "proxied")] {
        let dest = work.path().join(format!("{name}.bin"));
        peer.download(
            server,
            &work.path().join(format!("down-{name}")),
            &[(dest.clone(), hash.clone(), size)],
        );
        assert!(std::fs::read(&dest).unwrap() == data, "{name}");
        let got = download_whole(&client(server), &hash.parse().unwrap());
        assert!(got == data, "{name}: git-xet's client");
    }
    // Each storage URL is signed for its one range (the signature covers the Range header):
    // the bucket serves that range and refuses anything else, a request without Range too.
    let recon: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{}/v2/reconstructions/{hash}", direct.url()))
        .bearer_auth(WRITE_TOKEN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let mut checked = 0;
    for entries in recon["xorbs"].as_object().unwrap().values() {
        for e in entries.as_array().unwrap() {
            let url = e["url"].as_str().unwrap();
            assert!(url.starts_with(&g.endpoint), "{url}");
            assert!(xet_client::url::signs_range(url), "{url}");
            let ranges = e["ranges"].as_array().unwrap();
            assert_eq!(ranges.len(), 1, "one range per storage URL");
            let (start, end) = (
                ranges[0]["bytes"]["start"].as_u64().unwrap(),
                ranges[0]["bytes"]["end"].as_u64().unwrap(),
            );
            let get = |range: Option<String>| {
                let mut r = reqwest::blocking::Client::new().get(url);
                if let Some(range) = range {
                    r = r.header("Range", range);
                }
                r.send().unwrap()
            };
            let exact = get(Some(format!("bytes={start}-{end}")));
            assert_eq!(exact.status(), 206);
            assert_eq!(exact.bytes().unwrap().len() as u64, end - start + 1);
            for other in [
                None,
                Some("bytes=0-".to_string()),
                Some(format!("bytes={start}-{}", end + 1)),
                Some(format!("bytes={}-{end}", start + 1)),
            ] {
                let status = get(other.clone()).status();
                assert!(
                    status.is_client_error(),
                    "{other:?} on a URL signed for {start}-{end}: {status}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 0);
    // The node handing out storage URLs sent no xorb byte itself; the other sent them all.
    assert_eq!(sent_xorb_bytes(&direct), 0);
    assert!(sent_xorb_bytes(&proxied) >= 2 * (4 << 20));
}

#[needs(garage)]
#[test]
fn locks_taken_through_one_node_hold_at_every_node() {
    use base64::Engine as _;
    let g = Garage::start();
    g.create_bucket("locking");
    let owner = node(&g, "locking", "");
    let owner_url = owner.url().to_string();
    let storage = g.s3_config("locking", "");
    let other = start_with(move |c| {
        c.storage = Some(storage);
        c.lock_owner = Some(owner_url);
    });
    let client = reqwest::blocking::Client::new();
    let auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("alice:{WRITE_TOKEN}"))
    );
    let lock = |node: &TestServer, path: &str| -> u16 {
        client
            .post(format!("{}/team/repo/info/lfs/locks", node.url()))
            .header("Authorization", &auth)
            .header("Content-Type", "application/vnd.git-lfs+json")
            .body(serde_json::json!({ "path": path }).to_string())
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    let list = |node: &TestServer| -> Vec<String> {
        let v: serde_json::Value = client
            .get(format!("{}/team/repo/info/lfs/locks", node.url()))
            .header("Authorization", &auth)
            .send()
            .unwrap()
            .json()
            .unwrap();
        v["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["path"].as_str().unwrap().to_string())
            .collect()
    };
    // A lock taken through the other node is the owner's, seen and enforced by both.
    assert_eq!(lock(&other, "model.bin"), 201);
    assert_eq!(list(&owner), ["model.bin"]);
    assert_eq!(list(&other), ["model.bin"]);
    assert_eq!(lock(&owner, "model.bin"), 409);
    assert_eq!(lock(&other, "model.bin"), 409);

    // Two users racing for one path through two nodes: exactly one lock.
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let node = if i % 2 == 0 { &owner } else { &other };
                let lock = &lock;
                scope.spawn(move || lock(node, "race.bin"))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        statuses.iter().filter(|&&s| s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&s| s == 409).count(),
        7,
        "{statuses:?}"
    );

    // The owner gone: locking through the other node fails clearly, uploads go on.
    drop(owner);
    let r = client
        .post(format!("{}/team/repo/info/lfs/locks", other.url()))
        .header("Authorization", &auth)
        .header("Content-Type", "application/vnd.git-lfs+json")
        .body(r#"{"path":"other.bin"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(body["error"], "lock_owner_unreachable");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("pushes and clones"),
        "{body}"
    );
    let data = content(91, 300_000);
    let oid = common::sha256_hex(&data);
    let put = client
        .put(format!("{}/team/repo/info/lfs/objects/{oid}", other.url()))
        .header("Authorization", &auth)
        .body(data)
        .send()
        .unwrap();
    assert_eq!(put.status(), 200);
}

/// Plain git-lfs's basic transfer through a node on object storage: the node rebuilds the file
/// from the bucket in large pieces read ahead, reusing footers and repeated ranges; the bytes
/// are the file's, also for content that repeats (zeros, a recurring block) and across xorbs.
#[needs(garage)]
#[test]
fn basic_downloads_through_a_node_rebuild_the_file_from_the_bucket() {
    let g = Garage::start();
    g.create_bucket("basic");
    let a = node(&g, "basic", "");
    // 118 MiB: random stretches (72 MiB, two xorbs), zeros, a 64 KiB block repeated.
    let block = content(91, 64 << 10);
    let mut bytes = Vec::new();
    for i in 0..35 {
        match i % 3 {
            0 => bytes.extend_from_slice(&content(100 + i, 6 << 20)),
            1 => bytes.resize(bytes.len() + (2 << 20), 0),
            _ => (0..32).for_each(|_| bytes.extend_from_slice(&block)),
        }
    }
    let (client, auth, url) = basic_put(&a, "team/basic", &bytes);
    assert!(stored_xorbs(&g, "basic", "").len() > 1, "several xorbs");
    let got = client
        .get(&url)
        .header("Authorization", &auth)
        .send()
        .unwrap();
    assert_eq!(got.status(), 200);
    let got = got.bytes().unwrap();
    assert_eq!(got.len(), bytes.len());
    assert!(got[..] == bytes[..], "the rebuilt file differs");
}

/// Puts `bytes` through `node` as plain git-lfs's basic transfer does, as an object of
/// repository `repo`; the client, the `Authorization` it sent (the write token) and the
/// object's URL.
fn basic_put(
    node: &TestServer,
    repo: &str,
    bytes: &[u8],
) -> (reqwest::blocking::Client, String, String) {
    use sha2::{Digest, Sha256};
    let oid = format!("{:x}", Sha256::digest(bytes));
    let url = format!("{}/{repo}.git/info/lfs/objects/{oid}", node.url());
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let auth = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("git:{WRITE_TOKEN}")
        )
    );
    let put = client
        .put(&url)
        .header("Authorization", &auth)
        .body(bytes.to_vec())
        .send()
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    (client, auth, url)
}

/// `git xet gc` and `git xet scrub` with `--storage`, as an operator runs them on a bucket
/// while a node keeps serving it: the command builds an index of its own from the bucket's
/// shards, gc removes only the orphan past the grace period, scrub finds a xorb damaged in the
/// bucket, and the node's file still downloads.
#[needs(garage)]
#[test]
fn gc_and_scrub_run_on_a_bucket_while_a_node_serves_it() {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    use xet_format::xorb::ParsedXorb;

    let g = Garage::start();
    g.create_bucket("operator");
    let live = node(&g, "operator", "team");
    let cas = client(&live);
    let data = content(81, 3 << 20);
    let kept = upload(&cas, &data[..], &UploadOptions::default()).unwrap();
    // The node's /metrics tells how many requests it sent the bucket, and how long they took.
    let metrics = reqwest::blocking::get(format!("{}/metrics", live.url()))
        .unwrap()
        .text()
        .unwrap();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
    };
    assert!(
        value("gitxet_storage_requests_total{op=\"put\"}") >= 2.0,
        "{metrics}"
    );
    assert!(
        value("gitxet_storage_request_seconds_total{op=\"put\"}") > 0.0,
        "{metrics}"
    );
    // An orphan: a xorb no shard names (an interrupted push), put straight into the bucket.
    let (b, _spool) = backend(&g, "operator", "team");
    let m = common::manifest();
    let orphan_bytes = common::read(&m.sessions[0].xorbs[0]);
    let orphan = ParsedXorb::parse(&orphan_bytes).unwrap().hash();
    b.put_if_absent(ObjectKey::Xorb(orphan), &orphan_bytes)
        .unwrap();
    let before = stored_xorbs(&g, "operator", "team");

    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_git-xet"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(g.settings())
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let json = |stdout: &str| serde_json::from_str::<serde_json::Value>(stdout).unwrap();

    // A dry run with the default grace keeps everything.
    let (code, out, err) = run(&[
        "gc",
        "--storage",
        "s3://operator/team",
        "--json",
        "--dry-run",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v = json(&out);
    assert_eq!(v["store"], "s3://operator/team", "{v}");
    assert_eq!(
        (v["xorbs_removed"].as_u64(), v["xorbs_young"].as_u64()),
        (Some(0), Some(1)),
        "{v}"
    );
    assert_eq!(v["xorbs_stored"].as_u64(), Some(before.len() as u64), "{v}");
    assert!(
        err.contains("registering the shards in s3://operator/team"),
        "{err}"
    );

    // With the shortest grace period the command accepts, the orphan (seconds old) stays;
    // less is refused.
    let (code, out, err) = run(&[
        "gc",
        "--storage",
        "s3://operator/team",
        "--grace",
        "10m",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(json(&out)["xorbs_removed"].as_u64(), Some(0), "{out}");
    let (code, _, err) = run(&["gc", "--storage", "s3://operator/team", "--grace", "1m"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("shortest grace period, 10m"), "{err}");

    // Past the grace period (none, for another process on the bucket: the bucket's clock
    // cannot be set back) the orphan goes, and only it.
    let operator = tempfile::tempdir().unwrap();
    let collector = xet_store::Store::open_s3(
        operator.path(),
        Default::default(),
        &g.s3_config("operator", "team"),
        Garage::runtime(),
    )
    .unwrap();
    let report = collector
        .gc(xet_store::GcOptions {
            grace: Duration::ZERO,
            dry_run: false,
        })
        .unwrap();
    assert_eq!(report.xorbs_removed, 1, "{report:?}");
    drop(collector);
    let after = stored_xorbs(&g, "operator", "team");
    assert!(!after.iter().any(|(h, _)| *h == orphan));
    assert_eq!(after.len(), before.len() - 1);
    // The node kept serving, and its file is whole.
    assert!(
        download_whole(&cas, &kept.file_hash) == data,
        "the file downloads whole after gc"
    );

    // Scrub: clean, then a xorb damaged in the bucket is found and quarantined there.
    let (code, out, err) = run(&["scrub", "--storage", "s3://operator/team"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("no damage found"), "{out}");
    let (victim, len) = after[0];
    let key = ObjectKey::Xorb(victim);
    let mut bytes = b.read_all(key).unwrap().unwrap();
    bytes[len as usize / 2] ^= 0xff;
    let tmp = b.temp_path("rot");
    std::fs::write(&tmp, &bytes).unwrap();
    b.replace_file(key, &tmp).unwrap();
    let index = tempfile::tempdir().unwrap();
    let index_dir = index.path().join("index");
    let index_arg = index_dir.to_str().unwrap();
    let (code, out, err) = run(&[
        "scrub",
        "--storage",
        "s3://operator/team",
        "--data",
        index_arg,
    ]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(out.contains(&format!("damaged xorb {victim}")), "{out}");
    assert!(out.contains("s3://operator/team/quarantine"), "{out}");
    assert_eq!(b.len(key).unwrap(), None, "moved to quarantine");
    // A directory and a bucket at once is refused by the parser; a node's own directory is
    // not a store, and the message says what to run.
    let (code, _, err) = run(&["gc", "/tmp", "--storage", "s3://operator/team"]);
    assert_eq!(code, Some(2), "{err}");
    let node_dir = live.store_dir();
    let (code, _, err) = run(&["gc", node_dir.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("run this with --storage s3://operator/team"),
        "{err}"
    );
}

/// A node started on a bucket that other nodes filled serves at once, while it registers their
/// shards: `/health` answers, `/ready` says not yet, and what it does not know yet is answered
/// 429 `catching_up` with `Retry-After` (git-lfs and the agent retry it) instead of 404, after a
/// look at the shard log, which finds what was stored recently. Its first full catch-up is held
/// back here so that the test sees the node before it.
#[needs(garage)]
#[test]
fn a_node_serves_while_it_catches_up_and_asks_to_come_back_for_what_it_lacks() {
    use xet_client::pipeline::upload::{upload, UploadOptions};

    let g = Garage::start();
    g.create_bucket("late");
    let a = node(&g, "late", "");
    let data = content(93, 2 << 20);
    let oid = xet_format::LfsOid::of(&data);
    let options = UploadOptions {
        expected_sha256: Some(oid),
        ..UploadOptions::default()
    };
    let stored = upload(&client(&a), &data[..], &options).unwrap();

    let storage = g.s3_config("late", "");
    let started = std::time::Instant::now();
    let b = start_with(move |c| {
        c.storage = Some(storage);
        c.maintenance.first_catch_up_after = Duration::from_secs(5);
    });
    let http = reqwest::blocking::Client::new();
    let get = |path: &str| {
        http.get(format!("{}{path}", b.url()))
            .bearer_auth(WRITE_TOKEN)
            .send()
            .unwrap()
    };
    assert_eq!(get("/health").status(), 200);
    let ready = get("/ready");
    assert_eq!(ready.status(), 503);
    assert!(ready.text().unwrap().contains("still registering"));
    // A file nobody stored: the node cannot tell yet, and says to come back.
    let nowhere = xet_format::FileHash::from_bytes([7; 32]);
    let miss = get(&format!("/v2/reconstructions/{nowhere}"));
    assert_eq!(miss.status(), 429);
    assert_eq!(miss.headers()["retry-after"], "2");
    let body: serde_json::Value = miss.json().unwrap();
    assert_eq!(body["error"], "catching_up", "{body}");
    // A's file, stored a moment ago: a miss reads the shard log (not the whole bucket) and
    // finds it at once.
    let known = get(&format!("/v2/reconstructions/{}", stored.file_hash));
    assert_eq!(known.status(), 200);
    let batch_of = |operation: &str, oid: &str, size: usize| {
        http.post(format!("{}/team/late.git/info/lfs/objects/batch", b.url()))
            .bearer_auth(WRITE_TOKEN)
            .header("Accept", "application/vnd.git-lfs+json")
            .header("Content-Type", "application/vnd.git-lfs+json")
            .body(
                serde_json::json!({
                    "operation": operation,
                    "objects": [{"oid": oid, "size": size}],
                })
                .to_string(),
            )
            .send()
            .unwrap()
    };
    // A download of an object nobody stored: come back; an upload of it goes ahead.
    let unknown = "ab".repeat(32);
    assert_eq!(batch_of("download", &unknown, 10).status(), 429);
    let upload_answer: serde_json::Value = batch_of("upload", &unknown, 10).json().unwrap();
    assert!(
        upload_answer["objects"][0]["actions"]["upload"].is_object(),
        "{upload_answer}"
    );
    // The batch API finds A's object, stored a moment ago, in the log too.
    let batch = batch_of("download", &oid.to_hex(), data.len());
    assert_eq!(batch.status(), 200, "{:?}", batch.text());
    let answer: serde_json::Value = batch.json().unwrap();
    assert!(
        answer["objects"][0]["actions"]["download"].is_object(),
        "{answer}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the checks above ran before the first catch-up began"
    );

    // A client gets the file (registered from the log by now), and the node is ready once its
    // first full catch-up has run.
    assert!(download_whole(&client(&b), &stored.file_hash) == data);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while get("/ready").status() != 200 {
        assert!(std::time::Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "ready only after the catch-up"
    );
    assert_eq!(get(&format!("/v2/reconstructions/{nowhere}")).status(), 404);
}

/// A node's count of requests of one kind to the bucket, from its /metrics.
fn storage_requests(s: &TestServer, op: &str) -> f64 {
    let metrics = reqwest::blocking::get(format!("{}/metrics", s.url()))
        .unwrap()
        .text()
        .unwrap();
    let name = format!("gitxet_storage_requests_total{{op=\"{op}\"}}");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name.as_str())?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// How many requests of kind `op` ("get", "head", …) a store opened in the test made to the
/// bucket so far.
pub(crate) fn store_requests(s: &xet_store::Store, op: &str) -> u64 {
    s.storage_timings()
        .unwrap()
        .iter()
        .filter(|t| t.op.name() == op)
        .map(|t| t.requests)
        .sum()
}

/// Many small files pushed through node A go up in packs (a few xorbs in the bucket, not one
/// per file); a clone fetching them through node B reads each pack's xorb whole once and
/// answers the files' ranges from memory, instead of two bucket requests per file.
#[needs(git_lfs, garage)]
#[test]
fn small_files_go_up_in_packs_and_come_down_in_few_bucket_reads() {
    let g = Garage::start();
    g.create_bucket("packs");
    let a = node(&g, "packs", "xet");
    let b = node(&g, "packs", "xet");
    let env = common::git::GitEnv::new();
    let lfs_path = "/team/data.git/info/lfs";
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], &format!("{}{lfs_path}", a.url()));
    let files: Vec<(String, Vec<u8>)> = (0..48u64)
        .map(|i| {
            (
                format!("f{i:02}.bin"),
                content(300 + i, 2000 + (i as usize * 977) % 30000),
            )
        })
        .collect();
    for (name, data) in &files {
        std::fs::write(work.join(name), data).unwrap();
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "small files"]);
    let gets_a = storage_requests(&a, "get");
    env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    let xorbs = stored_xorbs(&g, "packs", "xet").len();
    assert!(xorbs <= 8, "{xorbs} xorbs in the bucket for 48 small files");
    // Node A checked the files' SHA-256 claims from the packs it had just stored, kept in
    // memory, not by reading each file back from the bucket.
    let start = std::time::Instant::now();
    while a.health("unchecked_sha256_claims") > 0 {
        assert!(
            start.elapsed().as_secs() < 60,
            "node A did not check the claims"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let gets_a = storage_requests(&a, "get") - gets_a;
    eprintln!("node A: {gets_a} GETs for the push");
    assert!(gets_a < 16.0, "node A read the bucket {gets_a} times");

    env.clone_skip_smudge("remote.git", "through-b");
    let clone = env.path().join("through-b");
    env.git(&clone, &["checkout", "-q", "main"]);
    env.git(
        &clone,
        &["config", "lfs.url", &format!("{}{lfs_path}", b.url())],
    );
    // Once B has caught up with A's shards and settled their claims (one record read per
    // file, whatever the packing), only the download reads the bucket.
    let start = std::time::Instant::now();
    while b.health("files") < 48 || b.health("unchecked_sha256_claims") > 0 {
        assert!(
            start.elapsed().as_secs() < 60,
            "node B did not catch up with A"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (gets, heads) = (storage_requests(&b, "get"), storage_requests(&b, "head"));
    env.git(&clone, &["lfs", "pull"]);
    for (name, data) in &files {
        assert!(std::fs::read(clone.join(name)).unwrap() == *data, "{name}");
    }
    let gets = storage_requests(&b, "get") - gets;
    let heads = storage_requests(&b, "head") - heads;
    eprintln!("{xorbs} xorbs; node B: {gets} GETs, {heads} HEADs for 48 files");
    // Per xorb: a look, its footer and the whole object; reading each file's range on its
    // own would be two requests per file (96).
    assert!(
        gets + heads <= 3.0 * xorbs as f64 + 2.0,
        "{gets} GETs and {heads} HEADs"
    );
}

/// The lease that lets one node of a cluster collect garbage: granted to the first, refused to
/// another while it runs (naming the holder), renewed by its holder, and taken over once it
/// lapses.
#[needs(garage)]
#[test]
fn one_node_at_a_time_holds_the_garbage_collection_lease() {
    use std::time::Duration;
    let g = Garage::start();
    g.create_bucket("lease");
    let (a, _sa) = backend(&g, "lease", "xet");
    let (b, _sb) = backend(&g, "lease", "xet");
    let minute = Duration::from_secs(60);
    assert_eq!(a.take_lease("gc", "node-a", minute).unwrap(), None);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (holder, end) = b
        .take_lease("gc", "node-b", minute)
        .unwrap()
        .expect("held by a");
    assert_eq!(holder, "node-a");
    assert!(
        end > now_ms + 50_000,
        "ends in about a minute: {end} vs {now_ms}"
    );
    // Its holder renews it, here for a moment only; once that lapses, another takes it.
    assert_eq!(
        a.take_lease("gc", "node-a", Duration::from_millis(200))
            .unwrap(),
        None
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(b.take_lease("gc", "node-b", minute).unwrap(), None);
    let (holder, _) = a
        .take_lease("gc", "node-a", minute)
        .unwrap()
        .expect("held by b");
    assert_eq!(holder, "node-b");
    // Another lease name is another lease.
    assert_eq!(a.take_lease("other", "node-a", minute).unwrap(), None);
}

/// A new file uploaded through a node costs no look at the bucket (no HEAD: a xorb the node
/// has no record of is put without asking whether it is there, and a new shard too), and is
/// served at once. The same file uploaded again through a node that has not caught up with
/// it (so takes its xorb as new) is stored and served as well: the same bytes under the
/// same key.
#[needs(garage)]
#[test]
fn a_new_upload_puts_without_looking_and_a_repeated_one_stays_whole() {
    use xet_client::pipeline::upload::{upload, UploadOptions};

    let g = Garage::start();
    g.create_bucket("looks");
    let a = node(&g, "looks", "");
    let data = content(121, 3 << 20);
    let options = UploadOptions {
        expected_sha256: Some(xet_format::LfsOid::of(&data)),
        ..UploadOptions::default()
    };
    let (heads, puts) = (storage_requests(&a, "head"), storage_requests(&a, "put"));
    let stored = upload(&client(&a), &data[..], &options).unwrap();
    assert!(stored.new_xorbs >= 1, "{stored:?}");
    assert_eq!(
        storage_requests(&a, "head") - heads,
        0.0,
        "no look at the bucket"
    );
    let puts = storage_requests(&a, "put") - puts;
    // Each xorb, the shard, its log entry, and at most the file's SHA-256 claim record.
    let xorbs = stored.new_xorbs as f64;
    assert!(
        puts >= xorbs + 2.0 && puts <= xorbs + 3.0,
        "{puts} puts: {stored:?}"
    );
    assert!(download_whole(&client(&a), &stored.file_hash) == data);

    // A node started after the upload, on a store whose catch-up waits: it knows nothing of
    // the xorbs, takes them as new, and puts them again (the client names no SHA-256, which
    // such a node cannot look up yet).
    let storage = g.s3_config("looks", "");
    let b = start_with(move |c| {
        c.storage = Some(storage);
        c.maintenance.first_catch_up_after = Duration::from_secs(600);
    });
    let again = upload(&client(&b), &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(again.file_hash, stored.file_hash);
    assert!(download_whole(&client(&b), &stored.file_hash) == data);
    assert!(download_whole(&client(&a), &stored.file_hash) == data);
    let xorbs = stored_xorbs(&g, "looks", "");
    assert_eq!(
        xorbs.len() as u64,
        stored.new_xorbs,
        "one object per xorb: {xorbs:?}"
    );
}

/// A node that catches up with another's shard of a small file reads the file's small xorb
/// whole, in one request (not its length word, then its footer), and then serves the file
/// from it without another read of the bucket.
#[needs(garage)]
#[test]
fn a_xorb_is_read_once_for_its_footer_and_a_small_one_for_its_file() {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    use xet_store::Store;

    let g = Garage::start();
    g.create_bucket("whole");
    let open = |dir: &std::path::Path| g.open_store("whole", dir);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = open(dir_a.path());
    let data = content(131, 40_000);
    let up = upload(&a, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(up.new_xorbs, 1);

    let b = open(dir_b.path());
    let count = store_requests;
    let gets = |s: &Store| count(s, "get");
    let (before, heads) = (gets(&b), count(&b, "head"));
    b.catch_up_all().unwrap();
    // The shard, then the xorb whole, with no look first.
    assert_eq!(
        (gets(&b) - before, count(&b, "head") - heads),
        (2, 0),
        "{:?}",
        b.storage_timings()
    );
    let before = gets(&b);
    let plan = b
        .reconstruction(&up.file_hash, None)
        .unwrap()
        .expect("registered");
    let mut got = Vec::new();
    xet_client::pipeline::download::write_plan(&b, &plan, &mut |piece: &[u8]| {
        got.extend_from_slice(piece);
        Ok(())
    })
    .unwrap();
    assert!(got == data);
    assert_eq!(
        gets(&b) - before,
        0,
        "served from the xorb read at catch-up"
    );

    // A xorb too large to read whole: its footer comes with the request that finds its
    // length, from its end.
    let big = content(132, 3 << 20);
    upload(&a, &big[..], &UploadOptions::default()).unwrap();
    let (before, heads) = (gets(&b), count(&b, "head"));
    b.catch_up_all().unwrap();
    assert_eq!(
        (gets(&b) - before, count(&b, "head") - heads),
        (2, 0),
        "the shard, then the xorb's last bytes: {:?}",
        b.storage_timings()
    );
}

/// A node that knows a small xorb but holds nothing of it in memory (a restart) reads it whole
/// once, with no look first, for every request that wants it at once: its checks and its
/// reads are then answered from that read.
#[needs(garage)]
#[test]
fn a_known_small_xorb_is_read_once_for_requests_at_once_without_a_look() {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    use xet_store::cas::{XorbBytes, XorbHealth};

    let g = Garage::start();
    g.create_bucket("once");
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = g.open_store("once", dir_a.path());
    let data = content(171, 60_000);
    let up = upload(&a, &data[..], &UploadOptions::default()).unwrap();
    let b = g.open_store("once", dir_b.path());
    b.catch_up_all().unwrap();
    let plan = b
        .reconstruction(&up.file_hash, None)
        .unwrap()
        .expect("registered");
    let xorb = plan.fetch[0].0;
    drop(b);

    // B again, with its index and nothing in memory.
    let b = g.open_store("once", dir_b.path());
    let count = store_requests;
    let (gets, heads) = (count(&b, "get"), count(&b, "head"));
    let b = &b;
    std::thread::scope(|scope| {
        for i in 0..8 {
            scope.spawn(move || {
                if i % 2 == 0 {
                    assert!(matches!(
                        b.check_xorb(&xorb).unwrap(),
                        XorbHealth::Intact(_)
                    ));
                }
                match b.xorb_for_reading(&xorb, true).unwrap() {
                    Some(XorbBytes::Whole(bytes)) => assert!(!bytes.is_empty()),
                    other => panic!("not read whole: {other:?}"),
                }
            });
        }
    });
    assert_eq!(
        (count(b, "get") - gets, count(b, "head") - heads),
        (1, 0),
        "{:?}",
        b.storage_timings()
    );
    let mut got = Vec::new();
    xet_client::pipeline::download::write_plan(b, &plan, &mut |piece: &[u8]| {
        got.extend_from_slice(piece);
        Ok(())
    })
    .unwrap();
    assert!(got == data);
    assert_eq!(count(b, "get") - gets, 1, "the file read from memory");
}

/// A node lists the shard log for a batch only when an object of it is not found: a download
/// of objects it knows costs no request to the bucket's listing, and one stored through
/// another node a moment ago is still found (after one listing).
#[needs(garage)]
#[test]
fn a_batch_of_known_objects_lists_nothing_and_a_new_one_is_still_found() {
    use xet_client::pipeline::upload::{upload, UploadOptions};

    let g = Garage::start();
    g.create_bucket("batch");
    let a = node(&g, "batch", "");
    let b = node(&g, "batch", "");
    let put = |seed: u64| {
        let data = content(seed, 50_000);
        let oid = xet_format::LfsOid::of(&data);
        let options = UploadOptions {
            expected_sha256: Some(oid),
            ..UploadOptions::default()
        };
        upload(&client(&a), &data[..], &options).unwrap();
        (oid, data.len())
    };
    let known = put(141);
    wait_ready(&b);
    let http = reqwest::blocking::Client::new();
    let download = |(oid, size): (xet_format::LfsOid, usize)| -> serde_json::Value {
        http.post(format!("{}/team/batch.git/info/lfs/objects/batch", b.url()))
            .bearer_auth(WRITE_TOKEN)
            .header("Content-Type", "application/vnd.git-lfs+json")
            .body(
                serde_json::json!({
                    "operation": "download",
                    "objects": [{"oid": oid.to_hex(), "size": size}],
                })
                .to_string(),
            )
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    // Let B's scheduled catch-ups pass, then count only the batch's own listings.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let lists = loop {
        let before = storage_requests(&b, "list");
        let answer = download(known);
        let after = storage_requests(&b, "list");
        assert!(
            answer["objects"][0]["actions"]["download"].is_object(),
            "{answer}"
        );
        if after == before {
            break after - before;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "every batch listed the log"
        );
    };
    assert_eq!(lists, 0.0);
    let fresh = put(142);
    let answer = download(fresh);
    assert!(
        answer["objects"][0]["actions"]["download"].is_object(),
        "{answer}"
    );
}

/// A node with a cache of xorbs serves the xorbs it stored from its own disk (no bucket read),
/// and copies in a xorb it read from the bucket whole and is reading again, so that later
/// downloads of it cost the bucket nothing.
#[needs(garage)]
#[test]
fn a_node_serves_what_it_stored_and_what_it_reads_again_from_its_own_disk() {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    use xet_store::{Store, StoreOptions};

    let g = Garage::start();
    g.create_bucket("copies");
    let options = StoreOptions {
        xorb_cache_bytes: 64 << 20,
        ..Default::default()
    };
    let open = |dir: &std::path::Path| g.open_store_with("copies", dir, options);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = open(dir_a.path());
    // 6 MiB of random bytes: one xorb, larger than those read whole for small files.
    let data = content(151, 6 << 20);
    let up = upload(&a, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(up.new_xorbs, 1);
    let copies = |dir: &std::path::Path| {
        std::fs::read_dir(dir.join("xorb-cache"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count()
    };
    assert_eq!(copies(dir_a.path()), 1, "a copy of the stored xorb");
    let gets = |s: &Store| store_requests(s, "get");
    let download = |s: &Store| {
        assert!(
            download_whole(s, &up.file_hash) == data,
            "the downloaded file differs"
        );
    };
    let before = gets(&a);
    download(&a);
    assert_eq!(gets(&a) - before, 0, "served from the node's copy");
    assert!(a.xorb_cache_stats().unwrap().hits > 0);

    // Node B read nothing of it: its first download reads the bucket, the second one too and
    // copies the xorb in meanwhile, the next ones read nothing from the bucket.
    let b = open(dir_b.path());
    b.catch_up_all().unwrap();
    let before = gets(&b);
    download(&b);
    assert!(gets(&b) > before, "a first download reads the bucket");
    assert_eq!(copies(dir_b.path()), 0, "read once: not copied");
    download(&b);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while b.xorb_cache_stats().unwrap().xorbs == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the xorb read twice was not copied in"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(copies(dir_b.path()), 1);
    let before = gets(&b);
    download(&b);
    assert_eq!(gets(&b) - before, 0, "served from B's copy");
}

/// A node's copy of a xorb damaged on its disk never takes the bucket's good object out of
/// service: the basic download that finds the damage fails (the client sees a short body and
/// retries), the copy is dropped, and the next download is whole, from the bucket.
#[needs(garage)]
#[test]
fn a_damaged_copy_on_a_nodes_disk_is_dropped_and_the_bucket_serves_again() {
    let g = Garage::start();
    g.create_bucket("badcopy");
    let storage = g.s3_config("badcopy", "");
    let a = start_with(move |c| {
        c.storage = Some(storage);
        c.store.xorb_cache_bytes = 256 << 20;
    });
    let bytes = content(161, 10 << 20);
    let (client, auth, url) = basic_put(&a, "team/copy", &bytes);
    let get = || {
        client
            .get(&url)
            .header("Authorization", &auth)
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.bytes())
    };
    let gets_before = storage_requests(&a, "get");
    assert!(get().unwrap()[..] == bytes[..]);
    assert_eq!(
        storage_requests(&a, "get"),
        gets_before,
        "served from the node's copies"
    );
    let metrics = reqwest::blocking::get(format!("{}/metrics", a.url()))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("gitxet_xorb_cache_reads_total{result=\"hit\"}"),
        "{metrics}"
    );

    // Bit rot in the largest copy: one byte in its middle.
    let cache = a.dir.path().join("store").join("xorb-cache");
    let (victim, len) = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.path(), e.metadata().unwrap().len()))
        .max_by_key(|(_, len)| *len)
        .expect("copies on the node's disk");
    let mut copy = std::fs::read(&victim).unwrap();
    copy[(len / 2) as usize] ^= 0xff;
    std::fs::write(&victim, &copy).unwrap();
    let damaged = get();
    assert!(
        damaged.as_ref().map_or(true, |b| b[..] != bytes[..]),
        "damaged bytes never reach the client whole"
    );
    assert!(!victim.exists(), "the damaged copy is dropped");
    let xorb = XorbHash::from_hex(&victim.file_name().unwrap().to_string_lossy()).unwrap();
    let (b, _spool) = backend(&g, "badcopy", "");
    assert_eq!(
        b.len(ObjectKey::Xorb(xorb)).unwrap(),
        Some(len),
        "the bucket's object stays in service"
    );
    assert!(
        get().unwrap()[..] == bytes[..],
        "whole again, from the bucket"
    );
}

/// A node that catches up with another node's small files reads each of their xorbs whole
/// from the bucket once (for its footer) and keeps it on its disk: their downloads through it
/// then cost the bucket nothing, their lookups and plans included.
#[needs(garage)]
#[test]
fn a_node_that_caught_up_serves_small_files_from_its_own_disk() {
    use xet_client::pipeline::upload::{upload, UploadOptions};

    let g = Garage::start();
    g.create_bucket("nearby");
    let with_copies = || {
        let storage = g.s3_config("nearby", "");
        start_with(move |c| {
            c.storage = Some(storage);
            c.store.xorb_cache_bytes = 64 << 20;
        })
    };
    let a = with_copies();
    let files: Vec<(Vec<u8>, xet_format::FileHash, xet_format::LfsOid)> = (0..6u64)
        .map(|i| {
            let data = content(170 + i, 20_000 + 30_000 * i as usize);
            let oid = xet_format::LfsOid::of(&data);
            let options = UploadOptions {
                expected_sha256: Some(oid),
                ..UploadOptions::default()
            };
            let up = upload(&client(&a), &data[..], &options).unwrap();
            (data, up.file_hash, oid)
        })
        .collect();
    let b = with_copies();
    wait_ready(&b);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while b.health("files") < files.len() as u64 {
        assert!(std::time::Instant::now() < deadline, "B did not catch up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let copies = std::fs::read_dir(b.dir.path().join("store").join("xorb-cache"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .count();
    assert!(copies >= 1, "B kept no copy of what it read whole");

    let gets = storage_requests(&b, "get") + storage_requests(&b, "head");
    let http = reqwest::blocking::Client::new();
    for (data, file, oid) in &files {
        // A download's lookup (with the plan) finds the file intact...
        let found: serde_json::Value = http
            .get(format!("{}/v1/lfs-files/{oid}?reconstruction=v2", b.url()))
            .bearer_auth(WRITE_TOKEN)
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(found["intact"], true, "{found}");
        // ...and the file comes down whole.
        assert!(download_whole(&client(&b), file) == *data);
    }
    assert_eq!(
        storage_requests(&b, "get") + storage_requests(&b, "head"),
        gets,
        "B read the bucket for files it keeps on its disk"
    );
}

/// A small file uploaded through store A, and the directory of a store B (keeping copies) that
/// caught up with it, kept its one xorb on its disk and was closed: what it held in memory is
/// gone when it opens again, its copies and index stay.
struct CaughtUp {
    a: xet_store::Store,
    _a_dir: tempfile::TempDir,
    b_dir: tempfile::TempDir,
    options: xet_store::StoreOptions,
    up: xet_client::pipeline::upload::UploadSummary,
    data: Vec<u8>,
}

fn small_file_caught_up_by_a_closed_node(
    g: &Garage,
    bucket: &str,
    seed: u64,
    size: usize,
) -> CaughtUp {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    g.create_bucket(bucket);
    let options = xet_store::StoreOptions {
        xorb_cache_bytes: 64 << 20,
        ..Default::default()
    };
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = g.open_store_with(bucket, a_dir.path(), options);
    let data = content(seed, size);
    let up = upload(&a, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(up.new_xorbs, 1);
    let b = g.open_store_with(bucket, b_dir.path(), options);
    b.catch_up_all().unwrap();
    assert_eq!(
        b.xorb_cache_stats().unwrap().xorbs,
        1,
        "B kept the small xorb"
    );
    CaughtUp {
        a,
        _a_dir: a_dir,
        b_dir,
        options,
        up,
        data,
    }
}

/// Copies serve downloads, never an upload's question: with a small xorb gone from the bucket
/// behind its back, a node that keeps a copy still plans and serves its file's download, while
/// an upload's look finds it missing (the client then uploads it again).
#[needs(garage)]
#[test]
fn a_copy_serves_a_download_but_never_answers_an_uploads_question() {
    use xet_store::cas::Purpose;

    let g = Garage::start();
    let CaughtUp {
        a,
        b_dir,
        options,
        up,
        ..
    } = small_file_caught_up_by_a_closed_node(&g, "purpose", 181, 90_000);
    let b = g.open_store_with("purpose", b_dir.path(), options);
    let xorb = a
        .reconstruction(&up.file_hash, None)
        .unwrap()
        .unwrap()
        .terms[0]
        .xorb;
    let (bucket, _spool) = backend(&g, "purpose", "");
    assert!(bucket.remove(ObjectKey::Xorb(xorb)).unwrap());

    let requests = |s: &xet_store::Store| store_requests(s, "get") + store_requests(s, "head");
    let before = requests(&b);
    let mut memo = Default::default();
    assert_eq!(
        b.file_damage_memo(&up.file_hash, Purpose::Download, &mut memo)
            .unwrap(),
        None
    );
    let plan = b.reconstruction(&up.file_hash, None).unwrap().unwrap();
    assert_eq!(plan.terms[0].xorb, xorb);
    assert_eq!(requests(&b), before, "a download's look read the copy");

    let damage = b.file_damage(&up.file_hash).unwrap();
    assert_eq!(
        damage.map(|(x, _)| x),
        Some(xorb),
        "an upload's look asks the bucket"
    );
    assert!(requests(&b) > before);
}

/// A copy a node found on its disk at start is read whole and verified before it first serves a
/// download without the bucket: one damaged meanwhile is dropped, the file comes whole from
/// the bucket (whose small xorb, read whole and verified, becomes the new copy).
#[needs(garage)]
#[test]
fn a_copy_damaged_while_its_node_was_down_is_dropped_at_its_first_use() {
    let g = Garage::start();
    let CaughtUp {
        b_dir,
        options,
        up,
        data,
        ..
    } = small_file_caught_up_by_a_closed_node(&g, "rot", 191, 120_000);
    let copy = std::fs::read_dir(b_dir.path().join("xorb-cache"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .expect("B's copy");
    let mut bytes = std::fs::read(&copy).unwrap();
    let middle = bytes.len() / 3;
    bytes[middle] ^= 0x55;
    std::fs::write(&copy, &bytes).unwrap();

    let b = g.open_store_with("rot", b_dir.path(), options);
    let gets = store_requests(&b, "get");
    b.reconstruction(&up.file_hash, None).unwrap().unwrap();
    assert!(store_requests(&b, "get") > gets, "the bucket was read");
    assert!(
        std::fs::read(&copy).map_or(true, |now| now != bytes),
        "the damaged copy is dropped"
    );
    assert!(download_whole(&b, &up.file_hash) == data, "whole");
}

/// The xorbs (as stored, with their footers) and the shards of a file uploaded to a scratch
/// directory store with xorbs of at most `xorb_bytes`: what a push sends, to replay against a
/// node one step at a time.
#[allow(clippy::type_complexity)]
fn push_parts(
    data: &[u8],
    xorb_bytes: u64,
) -> (xet_format::FileHash, Vec<(XorbHash, Vec<u8>)>, Vec<Vec<u8>>) {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    let scratch = tempfile::tempdir().unwrap();
    let store = xet_store::Store::open(scratch.path()).unwrap();
    let options = UploadOptions {
        limits: xet_format::xorb::XorbLimits {
            max_uncompressed_bytes: xorb_bytes,
            ..xet_format::xorb::XorbLimits::CLIENT
        },
        ..UploadOptions::default()
    };
    let summary = upload(&store, data, &options).unwrap();
    drop(store);
    let b = xet_store::backend::FsBackend::open(scratch.path()).unwrap();
    let xorbs = b
        .list_xorbs()
        .unwrap()
        .into_iter()
        .map(|x| {
            let bytes = b.read_all(ObjectKey::Xorb(x.hash)).unwrap().unwrap();
            (x.hash, bytes)
        })
        .collect();
    let shards = b
        .list_shards()
        .unwrap()
        .into_iter()
        .map(|s| b.read_all(ObjectKey::Shard(s)).unwrap().unwrap())
        .collect();
    (summary.file_hash, xorbs, shards)
}

/// A store on `bucket` that keeps no copies of xorbs on its disk: a xorb a collector deleted
/// cannot be put back from a copy unseen.
fn store_without_copies(g: &Garage, bucket: &str, dir: &std::path::Path) -> xet_store::Store {
    g.open_store_with(
        bucket,
        dir,
        xet_store::StoreOptions {
            xorb_cache_bytes: 0,
            ..xet_store::StoreOptions::default()
        },
    )
}

/// Garbage collection with no grace at all, as another process on the bucket would run it.
fn collect_now(collector: &xet_store::Store) -> xet_store::GcReport {
    collector
        .gc(xet_store::GcOptions {
            grace: Duration::ZERO,
            dry_run: false,
        })
        .unwrap()
}

/// A node's registration of a shard whose xorbs another process's garbage collection deleted
/// after the node stored them (the node still remembers them as stored): refused, naming a
/// xorb, and whole once the client sends them again; a node that keeps copies of the xorbs it
/// stored puts them back into the bucket itself. Collections after that keep them.
#[needs(garage)]
#[test]
fn a_shard_naming_xorbs_gc_removed_meanwhile_is_refused_or_they_are_put_back() {
    use xet_store::{ShardRejection, StoreError, StoreOptions};
    let g = Garage::start();
    g.create_bucket("sweep");
    let dirs: Vec<tempfile::TempDir> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let collector = g.open_store("sweep", dirs[0].path());

    // A node without copies of xorbs.
    let data = content(91, 3 << 20);
    let (file, xorbs, shards) = push_parts(&data, 1 << 20);
    assert!(xorbs.len() >= 3 && shards.len() == 1, "{}", xorbs.len());
    let a = store_without_copies(&g, "sweep", dirs[1].path());
    for (h, body) in &xorbs {
        a.put_xorb(*h, body).unwrap();
    }
    assert_eq!(collect_now(&collector).xorbs_removed, xorbs.len() as u64);
    let e = a.register_shard(&shards[0], &mut |_| {}).unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::ShardRejected(ShardRejection::UnknownXorb { .. })
        ),
        "{e}"
    );
    // The client sends the xorbs again, and registers the shard again.
    for (h, body) in &xorbs {
        assert!(a.put_xorb(*h, body).unwrap(), "xorb {h} stored again");
    }
    a.register_shard(&shards[0], &mut |_| {}).unwrap();

    // A node that keeps copies of the xorbs it stores.
    let data2 = content(92, 3 << 20);
    let (file2, xorbs2, shards2) = push_parts(&data2, 1 << 20);
    let a2 = g.open_store_with(
        "sweep",
        dirs[2].path(),
        StoreOptions {
            xorb_cache_bytes: 64 << 20,
            ..StoreOptions::default()
        },
    );
    for (h, body) in &xorbs2 {
        a2.put_xorb(*h, body).unwrap();
    }
    let report = collect_now(&collector);
    assert_eq!(report.xorbs_removed, xorbs2.len() as u64, "{report:?}");
    a2.register_shard(&shards2[0], &mut |_| {}).unwrap();
    let (b, _spool) = backend(&g, "sweep", "");
    for (h, _) in &xorbs2 {
        assert!(
            b.stamp(ObjectKey::Xorb(*h)).unwrap().is_some(),
            "{h} put back"
        );
    }

    // Both files are whole through a node on an empty disk, after another collection.
    assert_eq!(collect_now(&collector).xorbs_removed, 0);
    let fresh = g.open_store("sweep", dirs[3].path());
    assert!(
        download_whole(&fresh, &file) == data,
        "the first file is whole"
    );
    assert!(
        download_whole(&fresh, &file2) == data2,
        "the second file is whole"
    );
}

/// A shard refused at validation because one of its xorbs is missing, while another process's
/// collection deletes the others the node stored a moment ago: when the client sends them
/// again, each is stored again (not answered "already stored" from the node's look before the
/// refusal), and the shard registered then is whole.
#[needs(garage)]
#[test]
fn after_a_refusal_for_a_lost_xorb_the_others_are_looked_at_again_when_sent_again() {
    use xet_store::{ShardRejection, StoreError};
    let g = Garage::start();
    g.create_bucket("again");
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let collector = g.open_store("again", dirs[0].path());
    let data = content(93, 4 << 20);
    let (file, xorbs, shards) = push_parts(&data, 1 << 20);
    assert!(xorbs.len() >= 3 && shards.len() == 1, "{}", xorbs.len());
    let a = store_without_copies(&g, "again", dirs[1].path());
    // Every xorb but one is stored (and just seen intact by the node).
    let (held_back, sent) = xorbs.split_first().unwrap();
    for (h, body) in sent {
        assert!(a.put_xorb(*h, body).unwrap());
    }
    let e = a.register_shard(&shards[0], &mut |_| {}).unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::ShardRejected(ShardRejection::UnknownXorb { xorb, .. }) if xorb == held_back.0
        ),
        "{e}"
    );
    // Meanwhile a collection deletes the stored ones, used by nothing.
    assert_eq!(collect_now(&collector).xorbs_removed, sent.len() as u64);
    // The client sends all of them again.
    for (h, body) in &xorbs {
        assert!(a.put_xorb(*h, body).unwrap(), "xorb {h} stored again");
    }
    a.register_shard(&shards[0], &mut |_| {}).unwrap();
    let fresh = g.open_store("again", dirs[2].path());
    assert!(download_whole(&fresh, &file) == data, "the file is whole");
}

/// Registrations close together rely on one listing of the sweep records (a push of many small
/// files costs the bucket a LIST a second, not one per shard). A shard logged after a collector
/// announced a sweep naming its xorbs, by a node relying on a listing from before that
/// announcement, keeps its xorbs: the collector reads the shard log again only
/// `SWEEP_NOTICE` after its record is written, which is after the shard's log entry.
#[needs(garage)]
#[test]
fn registrations_share_a_listing_of_sweep_records_and_a_sweep_they_missed_spares_them() {
    let g = Garage::start();
    g.create_bucket("notice");
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // No copies of xorbs: a xorb the collector deleted could not be put back unseen.
    let a = store_without_copies(&g, "notice", dirs[0].path());
    let collector = g.open_store("notice", dirs[1].path());
    assert_eq!(collect_now(&collector).xorbs_removed, 0);

    let files: Vec<_> = (0..13)
        .map(|i| {
            let data = content(300 + i, 64 << 10);
            let (file, xorbs, shards) = push_parts(&data, 1 << 20);
            (data, file, xorbs, shards)
        })
        .collect();
    let lists = store_requests(&a, "list");
    let started = std::time::Instant::now();
    for (_, _, xorbs, shards) in &files[..12] {
        for (h, body) in xorbs {
            a.put_xorb(*h, body).unwrap();
        }
        a.register_shard(&shards[0], &mut |_| {}).unwrap();
    }
    let lists = store_requests(&a, "list") - lists;
    // One listing per second of registrations, and one more where a second's boundary fell.
    let most = started.elapsed().as_secs() + 2;
    assert!(
        lists <= most,
        "{lists} listings for 12 registrations in {:?}",
        started.elapsed()
    );

    // The last file's xorbs stored, not registered yet: unused, so a collection with no grace
    // announces them. The node registers the file right after the announcement, relying on a
    // listing of the records from before it.
    let (data, file, xorbs, shards) = &files[12];
    for (h, body) in xorbs {
        a.put_xorb(*h, body).unwrap();
    }
    a.register_shard(&files[0].3[0], &mut |_| {}).unwrap();
    let (b, _spool) = backend(&g, "notice", "");
    let before = b.list_sweeps().unwrap().len();
    let gc = std::thread::spawn(move || {
        let report = collect_now(&collector);
        (collector, report)
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while b.list_sweeps().unwrap().len() == before {
        assert!(std::time::Instant::now() < deadline, "no sweep announced");
        std::thread::sleep(Duration::from_millis(5));
    }
    let lists = store_requests(&a, "list");
    a.register_shard(&shards[0], &mut |_| {}).unwrap();
    eprintln!(
        "the registration after the announcement listed the records {} time(s)",
        store_requests(&a, "list") - lists
    );
    let (_collector, report) = gc.join().unwrap();
    assert_eq!(report.xorbs_removed, 0, "{report:?}");
    for (h, _) in xorbs {
        assert!(b.stamp(ObjectKey::Xorb(*h)).unwrap().is_some(), "{h} kept");
    }
    let fresh = g.open_store("notice", dirs[2].path());
    assert!(download_whole(&fresh, file) == *data, "the file is whole");
}

/// A node stores a shard and writes its log entry at once, so another node may list the entry
/// before the shard is in the bucket: that node registers the shard at a later catch-up of the
/// log, without reading the whole bucket again (one LIST per catch-up), and with the entry's
/// repository.
#[needs(garage)]
#[test]
fn a_log_entry_listed_before_its_shard_is_registered_at_a_later_catch_up() {
    let g = Garage::start();
    g.create_bucket("early");
    let dir = tempfile::tempdir().unwrap();
    let c = g.open_store("early", dir.path());
    c.catch_up_all().unwrap();
    let data = content(401, 200 << 10);
    let (file, xorbs, shards) = push_parts(&data, 1 << 20);
    let shard = xet_format::ShardHash::of(&shards[0]);
    let (b, _spool) = backend(&g, "early", "");
    b.log_shard(&shard, Some(&repo_name("team/early"))).unwrap();
    let lists = store_requests(&c, "list");
    assert_eq!(
        c.catch_up().unwrap().registered,
        0,
        "the shard is not there yet"
    );
    for (h, body) in &xorbs {
        b.put_new(ObjectKey::Xorb(*h), body).unwrap();
    }
    b.put_new(ObjectKey::Shard(shard), &shards[0]).unwrap();
    let caught = c.catch_up().unwrap();
    assert_eq!(caught.registered, 1, "{caught:?}");
    assert_eq!(
        store_requests(&c, "list") - lists,
        2,
        "one listing of the log per catch-up, no full one"
    );
    assert!(
        c.visible_to(&file, Some(&repo_name("team/early"))).unwrap(),
        "with its repository"
    );
    assert!(!c.visible_to(&file, Some(&repo_name("team/other"))).unwrap());
    assert!(download_whole(&c, &file) == data, "the file is whole");
}

/// Garbage collection in a loop with `grace`, from a process of its own (a store on `bucket`
/// with a directory of its own), as `git xet gc --storage` run again and again would.
struct CollectorLoop {
    stop: Arc<std::sync::atomic::AtomicBool>,
    removed: Arc<std::sync::atomic::AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl CollectorLoop {
    /// Starts collecting, and returns once the first collection is done (the collector has
    /// registered the bucket's shards and collects from then on within moments).
    fn start(g: &Garage, bucket: &str, grace: Duration) -> Self {
        use std::sync::atomic::Ordering;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let removed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (warm, warmed) = std::sync::mpsc::channel();
        let config = g.s3_config(bucket, "");
        let thread = {
            let (stop, removed) = (Arc::clone(&stop), Arc::clone(&removed));
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let c = xet_store::Store::open_s3(
                    dir.path(),
                    Default::default(),
                    &config,
                    Garage::runtime(),
                )
                .unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let r = c
                        .gc(xet_store::GcOptions {
                            grace,
                            dry_run: false,
                        })
                        .unwrap();
                    removed.fetch_add(r.xorbs_removed, Ordering::Relaxed);
                    let _ = warm.send(());
                }
            })
        };
        warmed
            .recv_timeout(Duration::from_secs(120))
            .expect("the first collection ends");
        Self {
            stop,
            removed,
            thread,
        }
    }

    /// Stops collecting; how many xorbs the collections removed in all.
    fn finish(self) -> u64 {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.removed.load(Ordering::Relaxed)
    }
}

/// Garbage collection in a loop with a grace period far shorter than a push, from another
/// process, while files are pushed through a node over a slow link: every push the node
/// acknowledged is whole; a push refused for a collected xorb succeeds when sent again. A node
/// that keeps copies of what it stored acknowledges every push.
#[needs(garage)]
#[test]
fn gc_in_a_loop_during_slow_pushes_through_another_node_never_acknowledges_a_hole() {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    let g = Garage::start();
    g.create_bucket("race");
    let storage = g.s3_config("race", "");
    let plain = node(&g, "race", "");
    let keeper = start_with(move |c| {
        c.storage = Some(storage);
        c.store.xorb_cache_bytes = 256 << 20;
    });
    let options = UploadOptions {
        // Small xorbs, one at a time: a push stores many before it registers its shard.
        limits: xet_format::xorb::XorbLimits {
            max_uncompressed_bytes: 1 << 20,
            ..xet_format::xorb::XorbLimits::CLIENT
        },
        parallel_puts: 1,
        ..UploadOptions::default()
    };
    let mut pushed = Vec::new();
    // A push of 6 MiB at 1 MiB/s lasts about 6 s; collections keep nothing unused older than
    // 1 s, and delete a sweep's xorbs a little over `SWEEP_NOTICE` after they announced them.
    for (name, server, seeds) in [
        ("plain", &plain, [101u64, 102]),
        ("keeper", &keeper, [103, 104]),
    ] {
        let mut removed = 0;
        for seed in seeds {
            let data = content(seed, 6 << 20);
            let collector = CollectorLoop::start(&g, "race", Duration::from_secs(1));
            let slow = common::throttle::Throttle::start(server.server.addr, 1 << 20);
            let cas = xet_client::RemoteCas::new(xet_client::RemoteConfig::new(
                slow.url(),
                xet_client::TokenSource::fixed(Some(WRITE_TOKEN.into())),
            ))
            .unwrap();
            let first = upload(&cas, &data[..], &options);
            removed += collector.finish();
            let summary = match first {
                Ok(s) => s,
                Err(e) if std::ptr::eq(server, &plain) && e.is_lost_xorb() => {
                    eprintln!("{name} push {seed} refused ({e}); sent again");
                    upload(&client(server), &data[..], &options).unwrap()
                }
                Err(e) => panic!("{name} push {seed}: {e}"),
            };
            pushed.push((summary.file_hash, data));
        }
        assert!(
            removed > 0,
            "{name}: the collections removed xorbs of pushes in flight"
        );
    }
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = g.open_store("race", fresh_dir.path());
    for (i, (file, data)) in pushed.iter().enumerate() {
        assert!(download_whole(&fresh, file) == *data, "push {i} is whole");
    }
}

/// `git-xet serve` as node of `bucket` on `g`, in a process whose data directory is a 64 MiB
/// disk of its own (a tmpfs in a private mount namespace), allowed to lag 2 s behind the other
/// nodes before `/ready` says so. Its disk is reached through `/proc/PID/root`.
fn node_on_a_small_disk(g: &Garage, bucket: &str) -> (common::server::ServeProcess, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "-rm",
        "sh",
        "-c",
        "mount -t tmpfs -o size=64m tmpfs \"$1\" && shift && exec \"$@\"",
        "sh",
    ])
    .arg(&mnt)
    .arg(env!("CARGO_BIN_EXE_git-xet"))
    .args(common::server::serve_args(&mnt.join("node")))
    .args([
        "--storage",
        &format!("s3://{bucket}"),
        "--ready-max-lag",
        "2",
    ])
    .envs(g.settings());
    let node = common::server::ServeProcess::from_command(cmd, dir);
    let disk =
        PathBuf::from(format!("/proc/{}/root", node.pid())).join(mnt.strip_prefix("/").unwrap());
    assert!(
        disk.join("node").is_dir(),
        "the node's data directory is on its own disk ({})",
        disk.display()
    );
    (node, disk)
}

/// `GET path` of `url`: status and body.
fn get_text(url: &str, path: &str) -> (u16, String) {
    let r = reqwest::blocking::get(format!("{url}{path}")).unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

/// The value of the metric line `name` (with its labels) of `url`'s `/metrics`.
fn metric(url: &str, name: &str) -> f64 {
    let (_, text) = get_text(url, "/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Waits (up to `limit`) until `check` holds; panics with `what` and `detail()` if it never does.
fn eventually(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> bool,
    detail: impl Fn() -> String,
) {
    let deadline = std::time::Instant::now() + limit;
    while !check() {
        assert!(std::time::Instant::now() < deadline, "{what}: {}", detail());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Catch-up never gives up: node B keeps catching up with node A through an outage of the
/// object store (Garage killed, then started again) and through its own data disk filling up
/// and being freed. While it lags it says so on `/ready` (503, why in the body) and counts the
/// failures; once storage is back it serves what was pushed through A meanwhile, its
/// knowledge of the other nodes seconds old, without a restart.
#[needs(garage)]
#[test]
fn catch_up_survives_a_storage_outage_and_a_full_disk_without_a_restart() {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    let mut g = Garage::start();
    g.create_bucket("outage");
    let a = node(&g, "outage", "");
    let (b, disk) = node_on_a_small_disk(&g, "outage");
    let b_client = xet_client::RemoteCas::new(xet_client::RemoteConfig::new(
        b.url.clone(),
        xet_client::TokenSource::fixed(Some(WRITE_TOKEN.into())),
    ))
    .unwrap();
    let log = || std::fs::read_to_string(&b.log).unwrap_or_default();
    let push = |seed: u64| {
        let data = content(seed, 1 << 20);
        let file = upload(&client(&a), &data[..], &UploadOptions::default())
            .unwrap()
            .file_hash;
        (file, data)
    };
    // B serves `file` (known to it, and whole).
    let serves = |file: &xet_format::FileHash, data: &[u8]| {
        matches!(
            xet_protocol::Endpoint::reconstruction(&b_client, file, None),
            Ok(Some(_))
        ) && download_whole(&b_client, file) == data
    };
    let caught_up = |what: &str| {
        eventually(
            Duration::from_secs(60),
            what,
            || {
                get_text(&b.url, "/ready").0 == 200
                    && metric(&b.url, "gitxet_catch_up_age_seconds") < 5.0
            },
            || format!("{:?}\n{}", get_text(&b.url, "/ready"), log()),
        )
    };
    caught_up("B ready at the start");
    let (f1, d1) = push(201);
    eventually(
        Duration::from_secs(30),
        "B serves the first push",
        || serves(&f1, &d1),
        log,
    );

    // The object store goes away: B says it lags, and why, and counts the failures.
    g.kill();
    eventually(
        Duration::from_secs(60),
        "B unready during the outage",
        || {
            let (status, body) = get_text(&b.url, "/ready");
            status == 503 && body.contains("catch-ups have failed")
        },
        || format!("{:?}\n{}", get_text(&b.url, "/ready"), log()),
    );
    assert!(
        metric(
            &b.url,
            "gitxet_storage_errors_total{operation=\"catch_up\"}"
        ) >= 1.0
    );
    std::thread::sleep(Duration::from_secs(8));
    g.restart();
    let (f2, d2) = push(202);
    eventually(
        Duration::from_secs(60),
        "B serves a push after the outage",
        || serves(&f2, &d2),
        log,
    );
    caught_up("B caught up after the outage");

    // B's own disk fills up: pushes through A go on; B catches up once it has room again.
    let filler = disk.join("filler");
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 1 << 20];
        while f.write_all(&block).and_then(|()| f.sync_all()).is_ok() {}
    }
    let errors_before = metric(
        &b.url,
        "gitxet_storage_errors_total{operation=\"catch_up\"}",
    );
    let (f3, d3) = push(203);
    let (f4, d4) = push(204);
    eventually(
        Duration::from_secs(60),
        "B fails to catch up with a full disk",
        || {
            metric(
                &b.url,
                "gitxet_storage_errors_total{operation=\"catch_up\"}",
            ) > errors_before
        },
        log,
    );
    std::fs::remove_file(&filler).unwrap();
    let (f5, d5) = push(205);
    for (file, data) in [(&f3, &d3), (&f4, &d4), (&f5, &d5)] {
        eventually(
            Duration::from_secs(60),
            "B serves the pushes after its disk had room again",
            || serves(file, data),
            log,
        );
    }
    caught_up("B caught up after the full disk");
    assert!(serves(&f1, &d1) && serves(&f2, &d2));
    assert!(
        log().contains("opened again"),
        "the index was opened again: {}",
        log()
    );
}

/// Garbage collection in a loop, from another process, with a grace period shorter than the
/// push, while `git push` of a file of several xorbs goes through a node (without copies of
/// xorbs) over a slow link: a push that exits 0 clones whole; a push that fails (its xorbs
/// collected before its shard was registered, twice) succeeds when run again. (The put-back
/// from copies is tested with the CAS client above.)
#[needs(garage)]
#[test]
fn git_push_during_gc_in_a_loop_exits_0_only_when_the_clone_is_whole() {
    let g = Garage::start();
    g.create_bucket("gitrace");
    // The node's CAS URL is the slow link's, so that git-lfs's agent uploads through it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let slow = common::throttle::Throttle::start(port, 16 << 20);
    let storage = g.s3_config("gitrace", "");
    let public = slow.url();
    let server = start_with(move |c| {
        c.storage = Some(storage);
        c.listen = port;
        c.public_url = Some(public);
        c.store.xorb_cache_bytes = 0;
    });
    let env = common::git::GitEnv::new();
    let lfs_url = format!("{}/team/models.git/info/lfs", slow.url());
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    // Four xorbs (64 MiB at most each), two sent at a time: the first two are stored
    // seconds before the shard.
    let data = content(300, 200 << 20);
    std::fs::write(work.join("model.bin"), &data).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "model"]);

    let collector = CollectorLoop::start(&g, "gitrace", Duration::from_secs(2));
    let first = env.run_in(&work, "git", &["push", "-q", "origin", "HEAD:main"]);
    let removed = collector.finish();
    eprintln!(
        "push exited {:?}, the collector removed {removed} xorb(s)\n{}",
        first.status,
        first.all()
    );
    assert!(
        removed > 0,
        "the collector removed xorbs of the push in flight"
    );
    if first.status != Some(0) {
        eprintln!("the push failed during collections; pushing again");
        env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
    }
    env.clone_skip_smudge("remote.git", "clone");
    let clone = env.path().join("clone");
    env.git(&clone, &["checkout", "-q", "main"]);
    let pulled = env.run_in(&clone, "git", &["lfs", "pull"]);
    assert_eq!(pulled.status, Some(0), "{}", pulled.all());
    assert!(
        std::fs::read(clone.join("model.bin")).unwrap() == data,
        "the pushed file clones whole"
    );
    drop(server);
}

/// A shard this node registered before, pushed again after a collection in another process
/// removed one of its xorbs (the node's own look at it is seconds old): not acknowledged as
/// stored; refused naming the xorb, and whole once the client sends it again.
#[needs(garage)]
#[test]
fn a_shard_registered_before_is_not_acknowledged_again_once_a_xorb_was_collected() {
    use xet_store::{ShardRejection, StoreError};
    let g = Garage::start();
    g.create_bucket("again");
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let data = content(93, 3 << 20);
    let (file, xorbs, shards) = push_parts(&data, 1 << 20);
    let a = store_without_copies(&g, "again", dirs[0].path());
    for (h, body) in &xorbs {
        a.put_xorb(*h, body).unwrap();
    }
    a.register_shard(&shards[0], &mut |_| {}).unwrap();
    // What a collector that had not seen the shard yet does: it announces the xorb and
    // deletes it (here by hand, as its sweep record says).
    let (b, _spool) = backend(&g, "again", "");
    let (victim, _) = xorbs[1];
    let record = format!(
        "git-xet sweep 1\nholder elsewhere\ndeadline {}\nstate done\n{victim}\n",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 60_000
    );
    b.put_sweep("0000000000000001-0123456789abcdef", record.as_bytes())
        .unwrap();
    // A collector waits this long after its record is written before it reads the log again
    // and deletes.
    std::thread::sleep(xet_store::SWEEP_NOTICE);
    assert!(b.remove(ObjectKey::Xorb(victim)).unwrap());
    let e = a.register_shard(&shards[0], &mut |_| {}).unwrap_err();
    // Refused naming the xorb (as damaged: a registered file needs it), which the client
    // answers by sending it again.
    assert!(
        matches!(
            e,
            StoreError::ShardRejected(
                ShardRejection::UnknownXorb { xorb, .. } | ShardRejection::DamagedXorb { xorb, .. }
            ) if xorb == victim
        ),
        "{e}"
    );
    for (h, body) in &xorbs {
        a.put_xorb(*h, body).unwrap();
    }
    a.register_shard(&shards[0], &mut |_| {}).unwrap();
    let fresh = g.open_store("again", dirs[1].path());
    assert!(download_whole(&fresh, &file) == data, "the file is whole");
}

/// A repository name for the store's tenancy API.
fn repo_name(name: &str) -> xet_store::RepoName {
    xet_store::RepoName::new(name).unwrap()
}
