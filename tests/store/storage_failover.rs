//! Several endpoints of one object store (`GIT_XET_S3_ENDPOINTS`): three Garage processes with
//! three copies of every object; the one every node names first is killed, and pushes,
//! catch-up and downloads go on through the others.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::time::Instant;
use xet_test_tools::needs;

use crate::common::garage::GarageCluster;
use crate::s3_storage::download_whole;
use xet_client::pipeline::upload::{upload, UploadOptions};
use xet_store::Store;

fn open(cluster: &GarageCluster, dir: &std::path::Path) -> Store {
    Store::open_s3(
        dir,
        Default::default(),
        &cluster.s3_config("failover", ""),
        crate::common::garage::Garage::runtime(),
    )
    .unwrap()
}

#[needs(garage)]
#[test]
fn the_first_storage_endpoint_killed_pushes_and_catch_up_go_on_through_the_others() {
    let mut cluster = GarageCluster::start();
    cluster.create_bucket("failover");
    let (dir_a, dir_b, dir_c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let a = open(&cluster, dir_a.path());
    let b = open(&cluster, dir_b.path());
    let before = xet_format::test_util::pseudo_random(3 << 20, 71);
    let first = upload(&a, &before[..], &UploadOptions::default()).unwrap();
    b.catch_up_all().unwrap();
    assert!(download_whole(&b, &first.file_hash) == before);
    assert_eq!(a.storage_failovers(), Some(0));

    // The endpoint both nodes name first dies.
    cluster.nodes[0].kill();
    let after = xet_format::test_util::pseudo_random(3 << 20, 72);
    let started = Instant::now();
    let second = upload(&a, &after[..], &UploadOptions::default()).unwrap();
    eprintln!("push with the first endpoint down: {:?}", started.elapsed());
    assert!(second.new_xorbs >= 1);
    assert!(
        a.storage_failovers().unwrap() >= 1,
        "the push went to another endpoint"
    );
    // Catch-up at B (its log listing, the new shard, the xorb's footer) and downloads of
    // both files.
    let caught = b.catch_up().unwrap();
    assert_eq!(caught.registered, 1, "{caught:?}");
    assert!(download_whole(&b, &second.file_hash) == after);
    assert!(download_whole(&b, &first.file_hash) == before);
    // A node started now, on an empty disk, lists and reads everything through the others.
    let c = open(&cluster, dir_c.path());
    c.catch_up_all().unwrap();
    assert!(download_whole(&c, &second.file_hash) == after);

    // The failed endpoint is passed over for a while: the next requests go straight to the
    // others (no new failover for each).
    let failovers = a.storage_failovers().unwrap();
    let third = upload(
        &a,
        &xet_format::test_util::pseudo_random(1 << 20, 73)[..],
        &UploadOptions::default(),
    )
    .unwrap();
    assert!(a.reconstruction(&third.file_hash, None).unwrap().is_some());
    assert_eq!(a.storage_failovers().unwrap(), failovers);

    // Back again, it serves its share once it is tried again.
    cluster.nodes[0].restart();
    let d = open(&cluster, tempfile::tempdir().unwrap().path());
    d.catch_up_all().unwrap();
    assert!(download_whole(&d, &third.file_hash).len() == 1 << 20);
}
