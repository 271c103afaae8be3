//! Damage to stored objects, found and repaired: a flipped, a truncated and a deleted xorb are
//! taken out of service (no shard, dedup answer, reconstruction or read relies on them) and an
//! upload of the same xorb repairs them; `scrub` finds damage the store has not run into yet;
//! garbage collection removes only xorbs nothing uses, after the grace period; a store whose
//! disk is full refuses writes with a storage-full error; spooled upload bodies are validated
//! and stored in place.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use xet_format::shard::Shard;
use xet_format::xorb::ParsedXorb;
use xet_format::{FileHash, XorbHash};
use xet_store::{GcOptions, ShardRejection, Store, StoreError, StoreOptions, XorbHealth};

/// A fixture session's xorbs as upload bodies, its shard in upload form and its files.
struct Session {
    xorbs: Vec<(XorbHash, Vec<u8>)>,
    shard: Shard,
    files: Vec<(FileHash, Vec<u8>)>,
}

fn session(name: &str) -> Session {
    let m = common::manifest();
    let s = m.sessions.iter().find(|s| s.name == name).unwrap();
    let xorbs = s
        .xorbs
        .iter()
        .map(|rel| {
            let stored = common::read(rel);
            let parsed = ParsedXorb::parse(&stored).unwrap();
            (parsed.hash(), parsed.chunk_region().to_vec())
        })
        .collect();
    let shard = Shard::from_bytes(&common::read(&s.shards[0])).unwrap();
    let files = s
        .files
        .iter()
        .map(|f| (FileHash::from_hex(&f.xet_hash).unwrap(), f.content()))
        .collect();
    Session {
        xorbs,
        shard,
        files,
    }
}

fn load(store: &Store, s: &Session) {
    for (hash, body) in &s.xorbs {
        store.put_xorb(*hash, body).unwrap();
    }
    store
        .register_shard(&s.shard.to_upload_bytes().unwrap(), &mut |_| {})
        .unwrap();
}

fn xorb_path(dir: &Path, xorb: &XorbHash) -> PathBuf {
    let hex = xorb.to_hex();
    dir.join("xorbs").join(&hex[..2]).join(hex)
}

/// The file rebuilt through the store's reconstruction plan.
fn rebuild(store: &Store, file: &FileHash) -> Result<Vec<u8>, StoreError> {
    let plan = store.reconstruction(file, None)?.expect("registered");
    let mut out = Vec::new();
    for term in &plan.terms {
        let (_, ranges) = plan.fetch.iter().find(|(x, _)| *x == term.xorb).unwrap();
        let r = ranges
            .iter()
            .find(|r| r.chunks.start <= term.chunks.start && term.chunks.end <= r.chunks.end)
            .unwrap();
        let bytes = store.read_xorb(&term.xorb, r.bytes.clone())?.unwrap();
        let parsed = ParsedXorb::parse(&bytes).unwrap();
        let first = r.chunks.start;
        out.extend(
            parsed
                .extract((term.chunks.start - first) as usize..(term.chunks.end - first) as usize)
                .unwrap(),
        );
    }
    Ok(out)
}

fn rejection(store: &Store, shard: &Shard) -> ShardRejection {
    match store.register_shard(&shard.to_upload_bytes().unwrap(), &mut |_| {}) {
        Err(StoreError::ShardRejected(r)) => r,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Flip,
    Truncate,
    Delete,
}

fn damage(path: &Path, how: Damage) {
    // Let the inode change time move on, as it would between a store and a later accident.
    std::thread::sleep(Duration::from_millis(15));
    match how {
        Damage::Flip => {
            let mut bytes = std::fs::read(path).unwrap();
            let at = bytes.len() / 3;
            bytes[at] ^= 0x40;
            // In place, as a disk or a careless tool would: same inode, same length.
            let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            f.write_all(&bytes).unwrap();
        }
        Damage::Truncate => {
            let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            let len = f.metadata().unwrap().len();
            f.set_len(len / 2).unwrap();
        }
        Damage::Delete => std::fs::remove_file(path).unwrap(),
    }
}

#[test]
fn damaged_xorbs_are_taken_out_of_service_and_an_upload_repairs_them() {
    let s = session("hello-and-zeros");
    let (xorb, body) = s.xorbs[0].clone();
    // A second shard relying on the same xorb, as a client whose local shard cache still lists
    // it would build: the zeros file alone.
    let (zeros, zeros_bytes) = s.files[1].clone();
    let mut derived = s.shard.clone();
    derived.files.retain(|f| f.hash == zeros);
    assert_eq!(derived.files.len(), 1);

    for how in [Damage::Flip, Damage::Truncate, Damage::Delete] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        load(&store, &s);
        let first_chunk = store.footer(&xorb).unwrap().unwrap().chunk_hashes[0];
        assert!(store.dedup_shard(&first_chunk).unwrap().is_some());

        damage(&xorb_path(dir.path(), &xorb), how);
        let why = match store.check_xorb(&xorb).unwrap() {
            XorbHealth::Damaged(why) => why,
            other => panic!("{how:?}: {other:?}"),
        };
        assert!(!why.is_empty());
        assert!(
            !xorb_path(dir.path(), &xorb).exists(),
            "{how:?}: quarantined"
        );
        if !matches!(how, Damage::Delete) {
            let kept = std::fs::read_dir(dir.path().join("quarantine/xorbs")).unwrap();
            assert_eq!(kept.count(), 1, "{how:?}: the damaged copy is kept aside");
        }
        // Nothing relies on it: not a new shard, not dedup, not reads, not uploads.
        let r = rejection(&store, &derived);
        assert!(
            matches!(r, ShardRejection::DamagedXorb { .. }),
            "{how:?}: {r}"
        );
        assert!(r.to_string().contains(&xorb.to_hex()), "{r}");
        // Not even the very shard registered before: a client sending it again must upload
        // the xorb first.
        let r = rejection(&store, &s.shard);
        assert!(
            matches!(r, ShardRejection::DamagedXorb { .. }),
            "{how:?}: {r}"
        );
        assert!(
            store.dedup_shard(&first_chunk).unwrap().is_none(),
            "{how:?}"
        );
        assert!(!store.has_xorb(&xorb).unwrap(), "{how:?}");
        match store.reconstruction(&zeros, None) {
            Err(e @ StoreError::DamagedXorb { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains(&xorb.to_hex()) && text.contains(&zeros.to_hex()),
                    "{text}"
                );
            }
            other => panic!("{how:?}: {other:?}"),
        }
        assert!(matches!(
            store.read_xorb(&xorb, 0..=10),
            Err(StoreError::DamagedXorb { .. })
        ));
        assert!(matches!(
            store.xorb_len(&xorb),
            Err(StoreError::DamagedXorb { .. })
        ));

        // Uploading the xorb again repairs it, and everything that needed it works again.
        assert!(store.put_xorb(xorb, &body).unwrap(), "{how:?}: stored anew");
        assert!(matches!(
            store.check_xorb(&xorb).unwrap(),
            XorbHealth::Intact(_)
        ));
        assert_eq!(rebuild(&store, &zeros).unwrap(), zeros_bytes, "{how:?}");
        assert!(store.dedup_shard(&first_chunk).unwrap().is_some());
        let outcome = store
            .register_shard(&derived.to_upload_bytes().unwrap(), &mut |_| {})
            .unwrap();
        assert!(outcome.newly_registered);
        let outcome = store
            .register_shard(&s.shard.to_upload_bytes().unwrap(), &mut |_| {})
            .unwrap();
        assert!(!outcome.newly_registered, "{how:?}: registered before");
        // A second upload of an intact xorb changes nothing.
        assert!(!store.put_xorb(xorb, &body).unwrap());
        // The verification is remembered across restarts.
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert!(store.has_xorb(&xorb).unwrap());
        assert_eq!(rebuild(&store, &zeros).unwrap(), zeros_bytes);
    }
}

#[test]
fn damage_is_found_whatever_operation_meets_it_first() {
    let s = session("random");
    let (xorb, body) = s.xorbs[0].clone();
    let (file, bytes) = s.files[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    load(&store, &s);
    assert_eq!(rebuild(&store, &file).unwrap(), bytes);
    // A truncation makes the stored object shorter than its reconstruction says: a read of the
    // range finds it, not a client.
    damage(&xorb_path(dir.path(), &xorb), Damage::Truncate);
    let e = store.read_xorb(&xorb, 0..=100).unwrap_err();
    assert!(matches!(e, StoreError::DamagedXorb { .. }), "{e}");
    // The record survives a restart; the repair clears it.
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert!(matches!(
        store.check_xorb(&xorb).unwrap(),
        XorbHealth::Damaged(_)
    ));
    assert!(store.put_xorb(xorb, &body).unwrap());
    assert_eq!(rebuild(&store, &file).unwrap(), bytes);
}

#[test]
fn scrub_finds_damage_nothing_has_met_yet_and_is_clean_after_repair() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let sessions: Vec<Session> = ["hello-and-zeros", "random", "text", "floats"]
        .iter()
        .map(|n| session(n))
        .collect();
    for s in &sessions {
        load(&store, s);
    }
    let clean = store.scrub(&mut |_| {}).unwrap();
    assert!(!clean.found_damage(), "{clean:?}");
    assert!(
        clean.xorbs_checked >= 4 && clean.shards_checked >= 4,
        "{clean:?}"
    );

    let (flipped, flipped_body) = sessions[1].xorbs[0].clone();
    let (deleted, deleted_body) = sessions[2].xorbs[0].clone();
    damage(&xorb_path(dir.path(), &flipped), Damage::Flip);
    damage(&xorb_path(dir.path(), &deleted), Damage::Delete);
    let shard_bytes = sessions[3].shard.to_upload_bytes().unwrap();
    let shard_hash = xet_format::ShardHash::of(&shard_bytes);
    let shard_path = dir.path().join("shards").join(format!("{shard_hash}.mdb"));
    damage(&shard_path, Damage::Flip);

    let mut steps = 0;
    let report = store.scrub(&mut |_| steps += 1).unwrap();
    assert!(report.found_damage());
    assert!(steps >= 2, "progress is reported");
    let bad: Vec<XorbHash> = report.damaged_xorbs.iter().map(|(x, _)| *x).collect();
    assert!(
        bad.contains(&flipped) && bad.contains(&deleted),
        "{report:?}"
    );
    assert_eq!(bad.len(), 2, "{report:?}");
    assert_eq!(report.damaged_shards.len(), 1, "{report:?}");
    assert_eq!(report.damaged_shards[0].0, shard_hash);
    assert!(report.affected_file_count >= 2, "{report:?}");
    // Still damaged on a second run (nothing repaired yet).
    assert!(store.scrub(&mut |_| {}).unwrap().found_damage());

    // Repair: the xorbs uploaded again, the shard registered again.
    assert!(store.put_xorb(flipped, &flipped_body).unwrap());
    assert!(store.put_xorb(deleted, &deleted_body).unwrap());
    store.register_shard(&shard_bytes, &mut |_| {}).unwrap();
    let after = store.scrub(&mut |_| {}).unwrap();
    assert!(!after.found_damage(), "{after:?}");
    for s in &sessions {
        for (file, bytes) in &s.files {
            if !file.is_zero() {
                assert_eq!(&rebuild(&store, file).unwrap(), bytes);
            }
        }
    }
}

#[test]
fn gc_removes_only_unused_xorbs_older_than_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let used = session("hello-and-zeros");
    let orphan = session("random");
    load(&store, &used);
    // An interrupted push: its xorb stored, its shard never registered.
    let (orphan_xorb, orphan_body) = orphan.xorbs[0].clone();
    store.put_xorb(orphan_xorb, &orphan_body).unwrap();
    let orphan_len = std::fs::metadata(xorb_path(dir.path(), &orphan_xorb))
        .unwrap()
        .len();

    let young = store.gc(GcOptions::default()).unwrap();
    assert_eq!(young.xorbs_removed, 0);
    assert_eq!(young.xorbs_young, 1);
    assert_eq!(young.bytes_young, orphan_len);
    assert!(store.has_xorb(&orphan_xorb).unwrap());

    let dry = store
        .gc(GcOptions {
            grace: Duration::ZERO,
            dry_run: true,
        })
        .unwrap();
    assert_eq!((dry.xorbs_removed, dry.bytes_freed), (1, orphan_len));
    assert!(
        store.has_xorb(&orphan_xorb).unwrap(),
        "a dry run removes nothing"
    );

    let done = store
        .gc(GcOptions {
            grace: Duration::ZERO,
            dry_run: false,
        })
        .unwrap();
    assert_eq!((done.xorbs_removed, done.bytes_freed), (1, orphan_len));
    assert_eq!(done.xorbs_used, 1);
    assert!(!xorb_path(dir.path(), &orphan_xorb).exists());
    assert!(matches!(
        store.check_xorb(&orphan_xorb).unwrap(),
        XorbHealth::Missing
    ));
    // What is used is untouched.
    for (file, bytes) in &used.files {
        if !file.is_zero() {
            assert_eq!(&rebuild(&store, file).unwrap(), bytes);
        }
    }
    // Nothing left to collect; a collected xorb can be uploaded again.
    let again = store
        .gc(GcOptions {
            grace: Duration::ZERO,
            dry_run: false,
        })
        .unwrap();
    assert_eq!(again.xorbs_removed, 0);
    assert!(store.put_xorb(orphan_xorb, &orphan_body).unwrap());
}

#[test]
fn a_full_disk_refuses_writes_as_storage_full() {
    let dir = tempfile::tempdir().unwrap();
    let s = session("random");
    let (xorb, body) = s.xorbs[0].clone();
    let store = Store::open_with(
        dir.path(),
        StoreOptions {
            min_free_bytes: u64::MAX,
            ..Default::default()
        },
    )
    .unwrap();
    let e = store.put_xorb(xorb, &body).unwrap_err();
    assert!(e.is_storage_full(), "{e}");
    assert!(!e.is_client_error());
    assert!(!store.has_xorb(&xorb).unwrap());
    let spool = store.spool_path("xorb");
    std::fs::write(&spool, &body).unwrap();
    let e = store.put_xorb_file(xorb, &spool).unwrap_err();
    assert!(e.is_storage_full(), "{e}");
    assert!(!spool.exists(), "the spool file is consumed");
    assert!(!store.has_xorb(&xorb).unwrap());
}

#[test]
fn spooled_bodies_are_validated_and_stored_in_place() {
    let s = session("text");
    let (xorb, body) = s.xorbs[0].clone();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let direct = Store::open(a.path()).unwrap();
    let spooled = Store::open(b.path()).unwrap();
    assert!(direct.put_xorb(xorb, &body).unwrap());

    // A damaged body is refused and leaves nothing.
    let spool = spooled.spool_path("xorb");
    let mut bad = body.clone();
    bad[body.len() / 2] ^= 1;
    std::fs::write(&spool, &bad).unwrap();
    let e = spooled.put_xorb_file(xorb, &spool).unwrap_err();
    assert!(e.is_client_error(), "{e}");
    assert!(!spool.exists());
    assert!(!spooled.has_xorb(&xorb).unwrap());

    let spool = spooled.spool_path("xorb");
    std::fs::write(&spool, &body).unwrap();
    assert!(spooled.put_xorb_file(xorb, &spool).unwrap());
    assert!(!spool.exists());
    assert_eq!(
        std::fs::read(xorb_path(b.path(), &xorb)).unwrap(),
        std::fs::read(xorb_path(a.path(), &xorb)).unwrap(),
        "the same stored object as an in-memory upload"
    );
    let spool = spooled.spool_path("xorb");
    std::fs::write(&spool, &body).unwrap();
    assert!(
        !spooled.put_xorb_file(xorb, &spool).unwrap(),
        "already stored"
    );
    assert!(!spool.exists());
    assert_eq!(
        std::fs::read_dir(b.path().join("tmp")).unwrap().count(),
        0,
        "nothing left in tmp"
    );
}
