//! A shard's SHA-256 is a claim until the server has hashed the file itself:
//!
//! - a wrong claim (a client naming the oid of content it did not upload) never keeps the
//!   right content out: the upload of the real content is not skipped, it becomes the oid's
//!   mapping, and the checking job drops the wrong claim;
//! - a right claim becomes the oid's mapping once checked, and only then lets an upload skip;
//! - the agent does not hash again what git-lfs hashed when the server checks claims
//!   (`X-Xet-Checks-Sha256`), and does when told to (`GIT_XET_HASH_UPLOADS=1`);
//! - a push of a damaged local object (bytes that are not its oid's) never reaches a clone as
//!   that oid: the server drops the claim and the clone is told the object is missing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::time::{Duration, Instant};
use xet_test_tools::needs;

use git_xet::server::claims::{check_pending, Checker, Pass};
use xet_client::pipeline::upload::{upload, UploadOptions};
use xet_format::shard::Shard;
use xet_format::{ChunkHash, FileHash, LfsOid, XorbHash};
use xet_protocol::{CasTarget, TargetError};
use xet_store::Store;

use crate::common;

use common::git::GitEnv;
use common::server::{TestServer, WRITE_TOKEN};

/// A store that says it checks claims, as a server does: uploads through it with
/// `sha256_declared_by_namer` send the declared SHA-256 unhashed.
struct Checking<'a>(&'a Store);

impl CasTarget for Checking<'_> {
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
        CasTarget::dedup_query(self.0, chunk)
    }
    fn file_by_sha256(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        CasTarget::file_by_sha256(self.0, oid)
    }
    fn checks_sha256_claims(&self) -> bool {
        true
    }
}

/// [`Checking`] that registers shards through repository `.1`, as a scoped token's upload
/// does: its claims are made in that repository's name.
struct AsRepo<'a>(&'a Store, &'a str);

impl CasTarget for AsRepo<'_> {
    fn has_xorb(&self, xorb: &XorbHash) -> Result<bool, TargetError> {
        CasTarget::has_xorb(self.0, xorb)
    }
    fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, TargetError> {
        CasTarget::put_xorb(self.0, xorb, body)
    }
    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        self.0
            .register_shard_staged(shard, &mut |_| {}, &mut || {}, Some(&repo_name(self.1)))?;
        Ok(())
    }
    fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        CasTarget::dedup_query(self.0, chunk)
    }
    fn file_by_sha256(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        Ok(self.0.intact_file_by_oid(oid, Some(&repo_name(self.1)))?)
    }
    fn checks_sha256_claims(&self) -> bool {
        true
    }
}

fn oid_of(data: &[u8]) -> LfsOid {
    LfsOid::from_hex(&common::sha256_hex(data)).unwrap()
}

fn declared(oid: LfsOid, size: usize) -> UploadOptions {
    UploadOptions {
        expected_sha256: Some(oid),
        expected_size: Some(size as u64),
        sha256_declared_by_namer: true,
        ..UploadOptions::default()
    }
}

#[test]
fn a_wrong_claim_never_keeps_the_right_content_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let real = common::splitmix64(1, 300_000);
    let garbage = common::splitmix64(2, 300_000);
    let oid = oid_of(&real);

    // Someone uploads garbage under the real content's oid, unhashed.
    let lie = upload(
        &Checking(&store),
        &garbage[..],
        &declared(oid, garbage.len()),
    )
    .unwrap();
    assert!(!lie.sha256_computed);
    assert_eq!(
        store.file_by_oid(&oid).unwrap().map(|(f, _)| f),
        Some(lie.file_hash),
        "a claim is usable for downloads (git-lfs checks what it downloads)"
    );
    assert!(!store.oid_checked(&oid).unwrap());
    assert_eq!(
        store.intact_file_by_oid(&oid, None).unwrap(),
        None,
        "nothing that lets an upload be skipped trusts a claim"
    );

    // The real content's upload is not skipped (the target does not offer the claim as
    // stored), and because this upload hashed the bytes, its mapping is checked at once.
    let honest = upload(&store, &real[..], &declared(oid, real.len())).unwrap();
    assert!(!honest.already_stored, "the upload was not skipped");
    assert!(honest.sha256_computed);
    assert_eq!(
        store.file_by_oid(&oid).unwrap().map(|(f, _)| f),
        Some(honest.file_hash)
    );
    assert!(store.oid_checked(&oid).unwrap());

    // The checking job drops the wrong claim; the right mapping stands.
    let pass = check_pending(&store, &mut Checker::default()).unwrap();
    assert_eq!((pass.held, pass.wrong, pass.deferred), (0, 1, 0));
    assert!(store.claim_uploaders().unwrap().is_empty());
    assert_eq!(
        store
            .intact_file_by_oid(&oid, None)
            .unwrap()
            .map(|(f, _)| f),
        Some(honest.file_hash)
    );
}

#[test]
fn a_right_claim_is_checked_then_trusted_and_a_lone_wrong_one_disappears() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let data = common::splitmix64(3, 200_000);
    let oid = oid_of(&data);
    let first = upload(&Checking(&store), &data[..], &declared(oid, data.len())).unwrap();
    assert!(!first.sha256_computed);
    // Until it is checked, a second upload of the same content is not skipped.
    let again = upload(&Checking(&store), &data[..], &declared(oid, data.len())).unwrap();
    assert!(!again.already_stored);
    assert_eq!(
        again.new_xorbs, 0,
        "its chunks were deduplicated all the same"
    );

    let pass = check_pending(&store, &mut Checker::default()).unwrap();
    assert_eq!((pass.held, pass.wrong), (1, 0));
    assert!(store.oid_checked(&oid).unwrap());
    let third = upload(&Checking(&store), &data[..], &declared(oid, data.len())).unwrap();
    assert!(
        third.already_stored,
        "a checked mapping lets the upload be skipped"
    );

    // A claim with no right content anywhere: usable for downloads until checked, then gone.
    let other = common::splitmix64(4, 100_000);
    let made_up = oid_of(b"content nobody uploaded");
    upload(
        &Checking(&store),
        &other[..],
        &declared(made_up, other.len()),
    )
    .unwrap();
    assert!(store.file_by_oid(&made_up).unwrap().is_some());
    let pass = check_pending(&store, &mut Checker::default()).unwrap();
    assert_eq!((pass.held, pass.wrong), (0, 1));
    assert_eq!(store.file_by_oid(&made_up).unwrap(), None);
}

#[test]
fn the_batch_api_asks_for_an_upload_while_the_oid_is_only_claimed() {
    // A wrong claim registered before the server starts, and a server that does not check
    // claims in the background: the claim stays a claim for the whole test.
    let dir = tempfile::tempdir().unwrap();
    let real = common::splitmix64(9, 300_000);
    let garbage = common::splitmix64(10, 300_000);
    let oid = oid_of(&real);
    {
        let store = Store::open(&dir.path().join("store")).unwrap();
        upload(
            &Checking(&store),
            &garbage[..],
            &declared(oid, garbage.len()),
        )
        .unwrap();
    }
    let server = common::server::start_on_with(dir, |c| c.maintenance.claims_interval = None);
    let batch = |operation: &str| -> serde_json::Value {
        reqwest::blocking::Client::new()
            .post(format!(
                "{}/team/repo.git/info/lfs/objects/batch",
                server.url()
            ))
            .header("Accept", "application/vnd.git-lfs+json")
            .header("Content-Type", "application/vnd.git-lfs+json")
            .bearer_auth(WRITE_TOKEN)
            .body(
                serde_json::json!({
                    "operation": operation,
                    "transfers": ["xet-download", "xet", "basic"],
                    "objects": [{"oid": oid.to_hex(), "size": real.len()}],
                })
                .to_string(),
            )
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let up = batch("upload");
    assert!(
        up["objects"][0]["actions"]["upload"].is_object(),
        "an upload is asked for, although a shard claimed the oid: {up}"
    );
    // Downloads may use the claim (git-lfs would find the bytes wrong and refuse them).
    let down = batch("download");
    assert!(
        down["objects"][0]["actions"]["download"].is_object(),
        "{down}"
    );
}

/// Polls `GET /v1/lfs-files/{oid}` until `sha256_checked` is true (at most 30 s); returns the
/// last answer's status and body.
fn wait_until_checked(server: &TestServer, oid: &str) -> (u16, serde_json::Value) {
    let client = reqwest::blocking::Client::new();
    let start = Instant::now();
    loop {
        let resp = client
            .get(format!("{}/v1/lfs-files/{oid}", server.url()))
            .header("Authorization", format!("Bearer {WRITE_TOKEN}"))
            .send()
            .unwrap();
        assert_eq!(
            resp.headers()
                .get("x-xet-checks-sha256")
                .map(|v| v.as_bytes()),
            Some(&b"1"[..]),
            "the server says it checks claims"
        );
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().unwrap_or_default();
        if status != 200 || body["sha256_checked"] == true || start.elapsed().as_secs() > 30 {
            return (status, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn negotiated_repo(env: &GitEnv, server: &TestServer) -> std::path::PathBuf {
    let url = format!("{}/team/repo.git/info/lfs", server.url());
    env.negotiated_work_tree(WRITE_TOKEN, &[], &url)
}

/// Writes `data` to `name` in `work` and commits it; returns its oid.
fn commit_file(env: &GitEnv, work: &std::path::Path, name: &str, data: &[u8]) -> String {
    std::fs::write(work.join(name), data).unwrap();
    env.git(work, &["add", "."]);
    env.git(work, &["commit", "-q", "-m", name]);
    common::sha256_hex(data)
}

#[needs(git_lfs)]
#[test]
fn the_agent_leaves_the_oid_to_a_server_that_checks_it() {
    let server = common::server::start();
    let env = GitEnv::new();
    let work = negotiated_repo(&env, &server);
    // Larger than what is checked before the shard upload is answered: the job checks it.
    let data = common::splitmix64(5, 9 << 20);
    let oid = commit_file(&env, &work, "model.bin", &data);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let log = env.agent_log();
    assert!(
        log.contains("sha256_computed=false"),
        "the agent did not hash the object again:\n{log}"
    );
    let (status, body) = wait_until_checked(&server, &oid);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["sha256_checked"], true,
        "the server checked the claim: {body}"
    );

    // Told to, the agent hashes (a second object, so that the upload is not skipped).
    let more = common::splitmix64(6, 1 << 20);
    let more_oid = commit_file(&env, &work, "more.bin", &more);
    let out = env.run_with(
        &work,
        "git",
        &["push", "-q", "origin", "main"],
        &[("GIT_XET_HASH_UPLOADS", "1")],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(
        env.agent_log().contains("sha256_computed=true"),
        "{}",
        env.agent_log()
    );
    // The server checks it all the same: a client's hashing is not proof to the server.
    let (status, body) = wait_until_checked(&server, &more_oid);
    assert_eq!(
        (status, body["sha256_checked"].clone()),
        (200, true.into()),
        "{body}"
    );
}

#[needs(git_lfs)]
#[test]
fn a_damaged_local_object_never_reaches_a_clone_under_its_oid() {
    let server = common::server::start();
    let env = GitEnv::new();
    let work = negotiated_repo(&env, &server);
    let data = common::splitmix64(7, 2 << 20);
    let oid = commit_file(&env, &work, "model.bin", &data);
    // Bit rot in git-lfs's copy, after git-lfs named it.
    let object = work
        .join(".git/lfs/objects")
        .join(&oid[0..2])
        .join(&oid[2..4])
        .join(&oid);
    let mut damaged = std::fs::read(&object).unwrap();
    damaged[1_000_000] ^= 0x40;
    std::fs::write(&object, &damaged).unwrap();
    let out = env.run_in(&work, "git", &["push", "-q", "origin", "main"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let (status, body) = wait_until_checked(&server, &oid);
    assert_eq!(
        status, 404,
        "the server dropped the wrong claim instead of serving it: {body}"
    );

    // A clone is told the object is missing; it never gets the damaged bytes as that oid.
    env.clone_skip_smudge("remote.git", "clone");
    let clone = env.path().join("clone");
    let out = env.run_in(&clone, "git", &["lfs", "fetch"]);
    assert_ne!(out.status, Some(0), "the fetch fails: {}", out.all());
    assert!(!clone
        .join(".git/lfs/objects")
        .join(&oid[0..2])
        .join(&oid[2..4])
        .join(&oid)
        .exists());

    // Repaired locally and pushed again, it is uploaded (not skipped) and then served.
    std::fs::write(&object, &data).unwrap();
    let out = env.run_with(
        &work,
        "git",
        &["lfs", "push", "--object-id", "origin", &oid],
        &[],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    let (status, body) = wait_until_checked(&server, &oid);
    assert_eq!(
        (status, body["sha256_checked"].clone()),
        (200, true.into()),
        "{body}"
    );
    let out = env.run_in(&clone, "git", &["lfs", "fetch"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
}

#[test]
fn claim_checks_take_turns_among_uploaders() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    // Pieces stored (and hashed) first, so that files made of them have several terms, as a
    // file assembled from deduplicated data has: the flood costs its uploader nothing.
    let pieces: Vec<Vec<u8>> = (0..3)
        .map(|i| common::splitmix64(90 + i, 1 << 20))
        .collect();
    for p in &pieces {
        upload(&store, &p[..], &UploadOptions::default()).unwrap();
    }
    // One uploader floods the queue with claims on such files (wrong ones, as an attacker's
    // are)...
    let mut flood = Vec::new();
    for i in 0..4 {
        let data: Vec<u8> = (0..3).flat_map(|k| pieces[(i + k) % 3].clone()).collect();
        let oid = oid_of(&common::splitmix64(200 + i as u64, 10));
        let up = upload(
            &AsRepo(&store, "flood"),
            &data[..],
            &declared(oid, data.len()),
        )
        .unwrap();
        assert!(
            up.new_xorbs <= 1,
            "made of stored pieces (new chunks only at the joins)"
        );
        flood.push(oid);
    }
    // ...then another makes one honest claim.
    let honest = common::splitmix64(300, 1 << 20);
    let honest_oid = oid_of(&honest);
    upload(
        &AsRepo(&store, "team"),
        &honest[..],
        &declared(honest_oid, honest.len()),
    )
    .unwrap();
    assert_eq!(
        store.claim_uploaders().unwrap(),
        vec!["flood".to_string(), "team".to_string()]
    );

    // One term per turn: each flood file takes several turns, and the honest claim is checked
    // on the second turn, before any of the flood is done.
    let mut checker = Checker::with_slice(1);
    let mut order = Vec::new();
    let mut total = Pass::default();
    while !store.oid_checked(&honest_oid).unwrap() {
        let pass = checker.turn(&store).unwrap().expect("claims are left");
        order.push(checker.last_uploader().unwrap().to_string());
        total.wrong += pass.wrong;
        assert!(order.len() <= 2, "the honest claim waited: {order:?}");
    }
    assert_eq!(order, ["flood", "team"]);
    assert_eq!(
        total.wrong, 0,
        "the first flood file was only partly hashed"
    );
    assert_eq!(store.claim_load_of("flood").unwrap().0, 4);
    // The flood is checked (and dropped: wrong) in later turns.
    let pass = check_pending(&store, &mut checker).unwrap();
    assert_eq!((pass.held, pass.wrong), (0, 4));
    assert!(store.claim_uploaders().unwrap().is_empty());
    for oid in flood {
        assert_eq!(store.file_by_oid(&oid).unwrap(), None);
    }
}

#[test]
fn another_repositorys_claim_never_shadows_this_repositorys_upload() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let real = common::splitmix64(400, 400_000);
    let garbage = common::splitmix64(401, 400_000);
    let oid = oid_of(&real);
    // Team A claims B's oid for garbage before B pushes.
    let lie = upload(
        &AsRepo(&store, "team-a"),
        &garbage[..],
        &declared(oid, garbage.len()),
    )
    .unwrap();
    // Team B pushes the real content, declared unhashed (as the agent does with a checking
    // server): a claim of B's own.
    let real_up = upload(
        &AsRepo(&store, "team-b"),
        &real[..],
        &declared(oid, real.len()),
    )
    .unwrap();
    assert!(!real_up.sha256_computed);
    let fresh = xet_store::cas::Freshness::IndexOnly;
    let for_b = store
        .oid_file(&oid, Some(&repo_name("team-b")), fresh)
        .unwrap()
        .unwrap();
    assert_eq!(
        for_b.file, real_up.file_hash,
        "B's lookups resolve to B's upload"
    );
    assert!(!for_b.checked);
    let for_a = store
        .oid_file(&oid, Some(&repo_name("team-a")), fresh)
        .unwrap()
        .unwrap();
    assert_eq!(for_a.file, lie.file_hash);
    assert_eq!(
        store
            .oid_file(&oid, Some(&repo_name("team-c")), fresh)
            .unwrap(),
        None,
        "a third repository sees neither"
    );
    // Once checked, B's mapping is checked and A's claim is gone.
    let pass = check_pending(&store, &mut Checker::default()).unwrap();
    assert_eq!((pass.held, pass.wrong), (1, 1));
    let for_b = store
        .oid_file(&oid, Some(&repo_name("team-b")), fresh)
        .unwrap()
        .unwrap();
    assert!(for_b.checked && for_b.file == real_up.file_hash);
    assert_eq!(
        store
            .oid_file(&oid, Some(&repo_name("team-a")), fresh)
            .unwrap(),
        None
    );
}

#[test]
fn an_uploader_with_too_many_pending_claims_is_told_to_wait() {
    let dir = tempfile::tempdir().unwrap();
    let options = xet_store::StoreOptions {
        max_pending_claims: 2,
        ..Default::default()
    };
    let store = Store::open_with(&dir.path().join("store"), options).unwrap();
    let claim = |repo: &str, seed: u64| {
        let data = common::splitmix64(seed, 1000);
        let oid = oid_of(&common::splitmix64(seed + 1000, 8));
        upload(&AsRepo(&store, repo), &data[..], &declared(oid, data.len()))
    };
    claim("busy", 500).unwrap();
    claim("busy", 501).unwrap();
    let refused = claim("busy", 502).unwrap_err().to_string();
    assert!(
        refused.contains("2 SHA-256 claims") && refused.contains("repository busy"),
        "{refused}"
    );
    // Another uploader is not held back by it.
    claim("calm", 503).unwrap();
    // Once checked, the busy one may claim again.
    check_pending(&store, &mut Checker::default()).unwrap();
    claim("busy", 502).unwrap();
    // On the wire it is a 429 with Retry-After.
    let api = git_xet::server::error::ApiError::from(xet_store::StoreError::ClaimBacklog {
        uploader: "repository busy".into(),
        count: 2,
        bytes: 2000,
    });
    assert_eq!((api.status().as_u16(), api.retry_after), (429, Some(60)));
}

/// On shared storage a claim is checked once in the cluster: the node that checks it records
/// the result in the bucket, and a node that catches up with the shard settles the claim from
/// that record. Shown by taking the file's xorbs away after the second node caught up: it could
/// not rebuild the file, yet the claim holds there.
#[needs(garage)]
#[test]
fn a_claim_checked_on_one_node_is_settled_on_another_from_the_bucket() {
    use common::garage::Garage;
    use xet_store::backend::{ObjectBackend, ObjectKey, SharedBucket};

    let g = Garage::start();
    g.create_bucket("claims");
    let open = |dir: &std::path::Path| g.open_store("claims", dir);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = open(dir_a.path());
    let data = common::splitmix64(91, 3 << 20);
    let oid = oid_of(&data);
    let up = upload(&Checking(&a), &data[..], &declared(oid, data.len())).unwrap();
    assert!(!up.sha256_computed);
    assert!(
        !a.oid_checked(&oid).unwrap(),
        "a claim until node A checks it"
    );
    let pass = check_pending(&a, &mut Checker::default()).unwrap();
    assert_eq!((pass.held, pass.wrong, pass.deferred), (1, 0, 0));

    let b = open(dir_b.path());
    b.catch_up_all().unwrap();
    assert!(
        !b.oid_checked(&oid).unwrap(),
        "node B registered the claim unchecked"
    );
    // The file's bytes leave the bucket: node B can no longer rebuild it.
    let spool = tempfile::tempdir().unwrap();
    let bucket = xet_store::s3::S3Backend::open(
        &g.s3_config("claims", ""),
        spool.path(),
        0,
        Garage::runtime(),
    )
    .unwrap();
    for x in bucket.list_xorbs().unwrap() {
        assert!(bucket.remove(ObjectKey::Xorb(x.hash)).unwrap());
    }
    let pass = check_pending(&b, &mut Checker::default()).unwrap();
    assert_eq!(
        (pass.held, pass.wrong, pass.deferred),
        (1, 0, 0),
        "settled from node A's record, without the file's bytes"
    );
    assert!(b.oid_checked(&oid).unwrap());

    // A claim nobody checked is still checked by the node itself (here it cannot be: the
    // bytes are gone, so it waits).
    let other = common::splitmix64(92, 1 << 20);
    let dir_c = tempfile::tempdir().unwrap();
    let c = open(dir_c.path());
    let other_oid = oid_of(&other);
    let other_up = upload(&Checking(&c), &other[..], &declared(other_oid, other.len())).unwrap();
    for x in bucket.list_xorbs().unwrap() {
        bucket.remove(ObjectKey::Xorb(x.hash)).unwrap();
    }
    let pass = check_pending(&c, &mut Checker::default()).unwrap();
    assert_eq!(
        (pass.held, pass.deferred),
        (0, 1),
        "no record: node C must hash it itself"
    );

    // Node A recorded its check in a batch (one object for all the claims of a pass), not in
    // an object of the claim's own; a record of its own, as earlier versions wrote, is still
    // honoured.
    assert_eq!(bucket.checked_claim(&oid).unwrap(), None);
    let batches = bucket
        .checked_claims_since(&mut xet_store::backend::ClaimCursor::default())
        .unwrap();
    assert_eq!(batches, vec![(oid, up.file_hash)]);
    bucket
        .record_checked_claim(&other_oid, &other_up.file_hash)
        .unwrap();
    // A new checker: the one above put the claim off for RETRY_AFTER.
    let pass = check_pending(&c, &mut Checker::default()).unwrap();
    assert_eq!(
        (pass.held, pass.deferred),
        (1, 0),
        "settled from the legacy record"
    );
}

/// A repository name for the store's tenancy API.
fn repo_name(name: &str) -> xet_store::RepoName {
    xet_store::RepoName::new(name).unwrap()
}
