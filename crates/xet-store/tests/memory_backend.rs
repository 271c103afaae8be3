//! The storage engine on [`MemoryBackend`], the in-memory backend that implements only the
//! core [`ObjectBackend`] trait: the engine needs nothing else of one process's storage, and
//! what storage does wrong (a failed put, a failed read, damage on the medium, a lost object)
//! is met as the engine promises: an error that loses nothing, or damage found and quarantined.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use xet_client::pipeline::download::write_plan;
use xet_client::pipeline::upload::{upload, UploadOptions};
use xet_format::{LfsOid, XorbHash};
use xet_store::backend::{ObjectBackend, ObjectKey};
use xet_store::memory::{MemoryBackend, Op};
use xet_store::{Store, StoreOptions, XorbHealth};

#[path = "../../xet-format/tests/format/fixtures.rs"]
mod fixtures;

fn store() -> (tempfile::TempDir, Arc<MemoryBackend>, Store) {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(MemoryBackend::new(&dir.path().join("spool")).unwrap());
    let as_backend: Arc<dyn ObjectBackend> = backend.clone();
    let store = Store::open_on(
        &dir.path().join("index"),
        as_backend,
        StoreOptions::default(),
    )
    .unwrap();
    (dir, backend, store)
}

/// The file registered under `oid`, rebuilt from the store, or the error that stopped it.
fn download(store: &Store, oid: &LfsOid) -> Result<Vec<u8>, String> {
    let (file, size) = store.file_by_oid(oid).unwrap().expect("registered");
    let plan = store
        .reconstruction(&file, None)
        .map_err(|e| e.to_string())?
        .expect("a plan for a registered file");
    let mut out = Vec::new();
    let n = write_plan(store, &plan, &mut |piece| {
        out.extend_from_slice(piece);
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    assert_eq!((n, out.len() as u64), (size, size));
    Ok(out)
}

fn only_xorb(backend: &MemoryBackend) -> XorbHash {
    let listed = backend.list_xorbs().unwrap();
    assert_eq!(listed.len(), 1, "one xorb stored");
    listed[0].hash
}

#[test]
fn a_store_on_memory_keeps_what_an_upload_registers() {
    let (_d, backend, store) = store();
    let data = fixtures::splitmix64(1, 3 << 20);
    let s = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(download(&store, &s.sha256).unwrap(), data);
    let xorb = only_xorb(&backend);
    assert_eq!(backend.list_shards().unwrap().len(), 1, "one shard stored");
    assert!(backend.object(ObjectKey::Xorb(xorb)).unwrap().len() > 3 << 20);
    assert!(
        backend.calls(Op::Put) >= 2,
        "the xorb and the shard were put"
    );
}

#[test]
fn a_failed_put_registers_nothing_and_the_next_upload_stores_the_file() {
    let (_d, backend, store) = store();
    let data = fixtures::splitmix64(2, 2 << 20);
    backend.fail_next(Op::Put, 1_000);
    let err = upload(&store, &data[..], &UploadOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("injected storage failure"),
        "the storage's own failure is reported: {err}"
    );
    assert!(store.file_by_oid(&LfsOid::of(&data)).unwrap().is_none());
    assert!(backend.list_shards().unwrap().is_empty());
    assert_eq!(store.counts().unwrap().files, 0);
    backend.heal();
    let s = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(download(&store, &s.sha256).unwrap(), data);
}

#[test]
fn a_failed_read_is_an_error_of_that_read_not_damage() {
    let (_d, backend, store) = store();
    let data = fixtures::splitmix64(3, 2 << 20);
    let s = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    let xorb = only_xorb(&backend);
    backend.fail_next(Op::Read, 1);
    let err = download(&store, &s.sha256).unwrap_err();
    assert!(err.contains("injected storage failure"), "{err}");
    assert!(
        backend.quarantined().is_empty(),
        "nothing was taken for damaged"
    );
    assert!(matches!(
        store.check_xorb(&xorb).unwrap(),
        XorbHealth::Intact(_)
    ));
    assert_eq!(download(&store, &s.sha256).unwrap(), data);
}

#[test]
fn damage_on_the_medium_is_found_by_scrub_and_the_xorb_quarantined() {
    let (_d, backend, store) = store();
    let data = fixtures::splitmix64(4, 2 << 20);
    let s = upload(&store, &data[..], &UploadOptions::default()).unwrap();
    let xorb = only_xorb(&backend);
    assert!(backend.damage_in_place(ObjectKey::Xorb(xorb), 1000, |b| b ^ 0x40));
    let report = store.scrub(&mut |_| {}).unwrap();
    assert_eq!(report.damaged_xorbs.len(), 1, "{report:?}");
    assert_eq!(report.damaged_xorbs[0].0, xorb);
    assert_eq!(backend.quarantined(), vec![ObjectKey::Xorb(xorb)]);
    assert!(matches!(
        store.check_xorb(&xorb).unwrap(),
        XorbHealth::Damaged(_)
    ));
    let err = download(&store, &s.sha256).unwrap_err();
    assert!(
        err.contains(&xorb.to_string()),
        "the error names the xorb: {err}"
    );
    // An upload of the same file repairs it.
    upload(&store, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(download(&store, &s.sha256).unwrap(), data);
}

#[test]
fn an_object_lost_behind_the_stores_back_is_reported_missing() {
    let (_d, backend, store) = store();
    let data = fixtures::splitmix64(5, 1 << 20);
    upload(&store, &data[..], &UploadOptions::default()).unwrap();
    let xorb = only_xorb(&backend);
    assert!(backend.lose(ObjectKey::Xorb(xorb)));
    match store.check_xorb(&xorb).unwrap() {
        XorbHealth::Damaged(why) => assert!(why.contains("missing"), "{why}"),
        other => panic!("a registered xorb whose object is gone is damaged: {other:?}"),
    }
}
