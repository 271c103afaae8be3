//! Deduplication that holds on a cold machine, as a team works: one person pushes a model; a
//! colleague on another machine (a fresh clone, empty caches) edits it and pushes; the first
//! person pulls. Earlier versions of a file are found in the history and used where they are
//! on the machine: a push deduplicates against them wherever the edit is, a pull copies their
//! chunks instead of fetching them. A push from a clone without LFS files (CI, training
//! machines) learns them from the server's chunk lists instead. Byte counts are the server's
//! (`received_xorb_bytes`, `sent_xorb_bytes` in `/health`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};

use common::git::GitEnv;
use common::server::{TestServer, WRITE_TOKEN};

const MIB: usize = 1 << 20;
const SIZE: usize = 24 * MIB;
/// What each step may move (the goal: under 3 MB; the file is 24 MiB).
const LIMIT: u64 = 3_000_000;

fn received(s: &TestServer) -> u64 {
    s.health("received_xorb_bytes")
}

fn sent(s: &TestServer) -> u64 {
    s.health("sent_xorb_bytes")
}

/// A person's machine: its own HOME, caches and log, git-xet installed, the server's token.
fn machine(token: &str) -> GitEnv {
    GitEnv::machine(token)
}

/// A fresh clone of `remote` on `env`'s machine, checked out (LFS objects downloaded).
fn clone(env: &GitEnv, remote: &Path, name: &str) -> PathBuf {
    let out = env.run_in(
        env.path(),
        "git",
        &["clone", "-q", &remote.display().to_string(), name],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    env.path().join(name)
}

fn commit_push(env: &GitEnv, work: &Path, message: &str) {
    env.git(work, &["add", "-A"]);
    env.git(work, &["commit", "-q", "-m", message]);
    env.git(work, &["push", "-q", "origin", "main"]);
}

/// The journal's records of `direction` in the repository `work`.
fn journal(work: &Path, direction: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(work.join(".git/xet/transfers.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["direction"] == direction)
        .collect()
}

/// `data` with `len` bytes changed at `at`.
fn edited(data: &[u8], at: usize, len: usize) -> Vec<u8> {
    let mut e = data.to_vec();
    for b in &mut e[at..at + len] {
        *b = b.wrapping_add(0x3d);
    }
    e
}

/// Runs `step` and returns (what the server received, what it sent) meanwhile.
fn moved(s: &TestServer, step: impl FnOnce()) -> (u64, u64) {
    let (r, t) = (received(s), sent(s));
    step();
    (received(s) - r, sent(s) - t)
}

#[needs(git_lfs)]
#[test]
fn edits_from_a_cold_clone_and_the_pull_that_follows_move_only_what_changed() {
    let s = common::server::start();
    let lfs_url = format!("{}/team/model.git/info/lfs", s.url());

    // The first person pushes v0.
    let first = machine(WRITE_TOKEN);
    let work = first.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    let remote = first.path().join("remote.git");
    let v0 = common::splitmix64(11, SIZE);
    std::fs::write(work.join("model.bin"), &v0).unwrap();
    commit_push(&first, &work, "v0");
    assert!(received(&s) > SIZE as u64);

    // A colleague on a cold machine rewrites the first 100 bytes (a header edit) and pushes.
    let second = machine(WRITE_TOKEN);
    let theirs = clone(&second, &remote, "clone");
    let v1 = edited(&v0, 0, 100);
    let (up, _) = moved(&s, || {
        std::fs::write(theirs.join("model.bin"), &v1).unwrap();
        commit_push(&second, &theirs, "header edit");
    });
    eprintln!("cold clone, 100-byte header edit: the server received {up} bytes");
    assert!(up < LIMIT, "header edit: {up} bytes");
    let records = journal(&theirs, "upload");
    let last = records.last().unwrap();
    assert!(
        last["history_bytes"].as_u64().unwrap() > (SIZE / 2) as u64,
        "deduplicated through the earlier version: {last}"
    );

    // Then inserts 1 KiB before everything else, and pushes.
    let insert: Vec<u8> = common::splitmix64(12, 1024);
    let v2: Vec<u8> = insert.iter().chain(v1.iter()).copied().collect();
    let (up, _) = moved(&s, || {
        std::fs::write(theirs.join("model.bin"), &v2).unwrap();
        commit_push(&second, &theirs, "insertion");
    });
    eprintln!("cold clone, 1 KiB inserted at the start: the server received {up} bytes");
    assert!(up < LIMIT, "insertion: {up} bytes");
    // The pre-push line says where the savings came from.
    let summary = second.run_in(&theirs, "git", &["xet", "push-summary", "--json"]);
    let totals: serde_json::Value = serde_json::from_str(summary.stdout.trim()).unwrap();
    assert!(totals["history_deduplicated_bytes"].as_u64().unwrap() > SIZE as u64);

    // The first person, who has v0 (pushed it, never downloaded anything), pulls: the chunks
    // v2 shares with v0 are copied from v0, not fetched.
    let (_, down) = moved(&s, || {
        first.git(&work, &["pull", "-q", "origin", "main"]);
    });
    eprintln!("pull of the edits by the first person: the server sent {down} bytes");
    assert!(std::fs::read(work.join("model.bin")).unwrap() == v2);
    assert!(down < LIMIT, "pull: {down} bytes");
    let pulled = journal(&work, "download");
    assert!(
        pulled.last().unwrap()["history_bytes"].as_u64().unwrap() > (SIZE / 2) as u64,
        "{pulled:?}"
    );

    // Two more edits of 1 MiB by the first person: a history of four edits.
    let v3 = edited(&v2, 5 * MIB, MIB);
    std::fs::write(work.join("model.bin"), &v3).unwrap();
    commit_push(&first, &work, "v3");
    let v4 = edited(&v3, 15 * MIB, MIB);
    std::fs::write(work.join("model.bin"), &v4).unwrap();
    commit_push(&first, &work, "v4");

    // A third machine clones, edits 1 MiB, and renames the file in the same commit.
    let third = machine(WRITE_TOKEN);
    let fresh = clone(&third, &remote, "fresh");
    let v5 = edited(&v4, 10 * MIB, MIB);
    let (up, _) = moved(&s, || {
        std::fs::remove_file(fresh.join("model.bin")).unwrap();
        std::fs::write(fresh.join("weights.bin"), &v5).unwrap();
        commit_push(&third, &fresh, "1 MiB edit, renamed");
    });
    eprintln!("cold clone of a file with 4 edits, 1 MiB edit and a rename: {up} bytes");
    assert!(up < LIMIT, "edit after history: {up} bytes");
    let last = journal(&fresh, "upload").pop().unwrap();
    assert!(
        last["history_bytes"].as_u64().unwrap() > (SIZE / 2) as u64,
        "{last}"
    );

    // A clone of everything is byte for byte what was pushed.
    let check = machine(WRITE_TOKEN);
    let all = clone(&check, &remote, "check");
    assert!(std::fs::read(all.join("weights.bin")).unwrap() == v5);
}

#[needs(git_lfs)]
#[test]
fn a_local_earlier_version_that_was_modified_is_not_trusted() {
    let s = common::server::start();
    let lfs_url = format!("{}/team/model.git/info/lfs", s.url());
    let first = machine(WRITE_TOKEN);
    let work = first.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    let remote = first.path().join("remote.git");
    let v0 = common::splitmix64(21, 8 * MIB);
    std::fs::write(work.join("model.bin"), &v0).unwrap();
    commit_push(&first, &work, "v0");
    let second = machine(WRITE_TOKEN);
    let theirs = clone(&second, &remote, "clone");
    let v1 = edited(&v0, 0, 100);
    std::fs::write(theirs.join("model.bin"), &v1).unwrap();
    commit_push(&second, &theirs, "edit");

    // The first person's copies of v0 (in .git/lfs/objects and in the work tree) are damaged:
    // their chunks do not give v0's Xet hash, so nothing of them is used.
    let oid = common::sha256_hex(&v0);
    let object = |oid: &str| {
        work.join(".git/lfs/objects")
            .join(&oid[..2])
            .join(&oid[2..4])
            .join(oid)
    };
    let damaged = edited(&v0, 4 * MIB, 10);
    std::fs::write(object(&oid), &damaged).unwrap();
    std::fs::write(work.join("model.bin"), &damaged).unwrap();
    let (_, down) = moved(&s, || {
        first.git(&work, &["fetch", "-q", "origin"]);
        let out = first.run_in(&work, "git", &["lfs", "fetch", "origin", "origin/main"]);
        assert_eq!(out.status, Some(0), "{}\n{}", out.all(), first.agent_log());
    });
    assert!(std::fs::read(object(&common::sha256_hex(&v1))).unwrap() == v1);
    assert!(down > (7 * MIB) as u64, "fetched whole: {down} bytes");
    let pulled = journal(&work, "download");
    assert_eq!(pulled.last().unwrap()["history_bytes"], 0, "{pulled:?}");
    // Found out either when the copy is hashed, or (its chunk list being remembered from the
    // push) when a chunk read from it does not give the hash the list names.
    let log = first.agent_log();
    assert!(
        log.contains("differs from the stored one") || log.contains("no longer matches its hash"),
        "{log}"
    );
}

#[needs(git_lfs)]
#[test]
fn an_earlier_version_the_pusher_may_not_read_is_never_used() {
    pusher_may_not_read(true);
}

/// The same without a copy of v0 on B's machine: the server does not list v0's chunks to B.
#[needs(git_lfs)]
#[test]
fn an_earlier_version_the_pusher_may_not_read_is_never_used_without_a_local_copy() {
    pusher_may_not_read(false);
}

/// Team A pushes v0; team B, with the same git history but its own LFS repository (where v0 was
/// never stored), pushes an edit of it (`local_copy`: with A's v0 in its LFS objects). Nothing
/// of v0 may serve B's upload.
fn pusher_may_not_read(local_copy: bool) {
    use git_xet::server::auth::Scope;
    const TEAM_A: &str = "team-a-secret-0123456789";
    const TEAM_B: &str = "team-b-secret-0123456789";
    let s = common::server::start_with(|c| {
        c.secrets = common::server::team_secrets(&[
            (TEAM_A, Scope::Write, "a", Some("team-a/*")),
            (TEAM_B, Scope::Write, "b", Some("team-b/*")),
        ]);
    });
    // Team A pushes v0 to its repository.
    let a = machine(TEAM_A);
    let work = a.negotiated_work_tree(TEAM_A, &[], &format!("{}/team-a/m.git/info/lfs", s.url()));
    let v0 = common::splitmix64(31, 8 * MIB);
    std::fs::write(work.join("model.bin"), &v0).unwrap();
    commit_push(&a, &work, "v0");

    // Team B has the same git history (its remote is a copy of A's) and, with `local_copy`,
    // the v0 object (a copy from elsewhere), but its LFS server is its own repository, where
    // v0 was never stored.
    let b = machine(TEAM_B);
    let out = b.run_in(
        b.path(),
        "git",
        &[
            "clone",
            "-q",
            "--bare",
            &a.path().join("remote.git").display().to_string(),
            "fork.git",
        ],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    b.clone_skip_smudge("fork.git", "fork");
    let theirs = b.path().join("fork");
    b.git(
        &theirs,
        &[
            "config",
            "lfs.url",
            &format!("{}/team-b/m.git/info/lfs", s.url()),
        ],
    );
    let oid = common::sha256_hex(&v0);
    if local_copy {
        let objects = theirs
            .join(".git/lfs/objects")
            .join(&oid[..2])
            .join(&oid[2..4]);
        std::fs::create_dir_all(&objects).unwrap();
        std::fs::write(objects.join(&oid), &v0).unwrap();
    }
    let v1 = edited(&v0, 0, 100);
    std::fs::write(theirs.join("model.bin"), &v1).unwrap();
    commit_push(&b, &theirs, "edit");
    let uploads = journal(&theirs, "upload");
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert_eq!(uploads[0]["oid"], common::sha256_hex(&v1));
    assert_eq!(uploads[0]["history_bytes"], 0, "A's v0 is not B's to use");
    assert!(
        !b.agent_log().contains("using an earlier version"),
        "{}",
        b.agent_log()
    );
    // v0 is still not there for B, and its chunks are not listed to B.
    let token = cas_token(&s, TEAM_B, "team-b/m.git");
    let r: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{}/v1/lfs-files/{oid}", s.url()))
        .bearer_auth(&token)
        .send()
        .unwrap()
        .json()
        .unwrap_or_default();
    assert!(r.get("file_hash").is_none(), "{r}");
    let file = journal(&work, "upload")[0]["xet_hash"]
        .as_str()
        .unwrap()
        .to_string();
    let listed = reqwest::blocking::Client::new()
        .get(format!("{}/v1/file-chunks/{file}", s.url()))
        .bearer_auth(&token)
        .send()
        .unwrap();
    assert_eq!(listed.status().as_u16(), 404);
}

/// A read CAS token for `repo`.
fn cas_token(s: &TestServer, secret: &str, repo: &str) -> String {
    let v: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{}/{repo}/info/lfs/xet-token/read", s.url()))
        .basic_auth("git", Some(secret))
        .send()
        .unwrap()
        .json()
        .unwrap();
    v["accessToken"].as_str().unwrap().to_string()
}

/// A safetensors-like checkpoint: the header's length (u64, little-endian), the JSON header
/// (each tensor's dtype, shape and byte offsets, and `metadata`), then the tensors' bytes.
fn checkpoint(tensors: &[Vec<u8>], metadata: &str) -> Vec<u8> {
    let mut header = String::from("{");
    let mut at = 0usize;
    for (i, t) in tensors.iter().enumerate() {
        header.push_str(&format!(
            "\"layers.{i}.weight\":{{\"dtype\":\"F32\",\"shape\":[{},256],\"data_offsets\":[{at},{}]}},",
            t.len() / 1024,
            at + t.len()
        ));
        at += t.len();
    }
    header.push_str(&format!("\"__metadata__\":{{{metadata}}}}}"));
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for t in tensors {
        out.extend_from_slice(t);
    }
    out
}

/// Tensors of a checkpoint and their versions: `TENSORS` of `TENSOR` bytes.
const TENSORS: usize = 12;
const TENSOR: usize = 3 * MIB;

/// The first person pushes v0…v3 of a checkpoint, each version with one more tensor retrained
/// (v1: tensor 2, v2: tensor 5, v3: tensor 8) and the step in the header; returns the server,
/// the first person's machine and work tree, and v3's tensors.
fn four_versions() -> (TestServer, GitEnv, PathBuf, Vec<Vec<u8>>) {
    let s = common::server::start();
    let lfs_url = format!("{}/team/model.git/info/lfs", s.url());
    let first = machine(WRITE_TOKEN);
    let work = first.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    first.git(&work, &["lfs", "track", "*.safetensors"]);
    let mut tensors: Vec<Vec<u8>> = (0..TENSORS)
        .map(|i| common::splitmix64(100 + i as u64, TENSOR))
        .collect();
    for (version, retrained) in [(0u64, None), (1, Some(2)), (2, Some(5)), (3, Some(8))] {
        if let Some(i) = retrained {
            tensors[i] = common::splitmix64(200 + version, TENSOR);
        }
        let step = format!("\"step\":\"{:06}\"", version * 1000);
        std::fs::write(work.join("model.safetensors"), checkpoint(&tensors, &step)).unwrap();
        commit_push(&first, &work, &format!("v{version}"));
    }
    (s, first, work, tensors)
}

/// A CI runner or training machine clones without LFS files (`GIT_LFS_SKIP_SMUDGE=1`), writes
/// a checkpoint with one tensor retrained and a longer header, and pushes: the earlier versions
/// it never downloaded are learnt from the server's chunk lists, so only what changed is sent.
#[needs(git_lfs)]
#[test]
fn a_clone_without_lfs_files_deduplicates_against_the_versions_on_the_server() {
    let (s, first, work, mut tensors) = four_versions();

    let ci = machine(WRITE_TOKEN);
    let remote = first.path().join("remote.git");
    ci.clone_skip_smudge(&remote.display().to_string(), "ci");
    let theirs = ci.path().join("ci");
    let pointer = std::fs::read_to_string(theirs.join("model.safetensors")).unwrap();
    assert!(pointer.starts_with("version https://git-lfs"), "{pointer}");
    assert_eq!(walkdir_files(&theirs.join(".git/lfs/objects")), 0);

    tensors[11] = common::splitmix64(300, TENSOR);
    let v4 = checkpoint(&tensors, "\"step\":\"004000\",\"run\":\"ci-nightly\"");
    let header = u64::from_le_bytes(v4[..8].try_into().unwrap()) as usize + 8;
    let changed = (TENSOR + header) as u64;
    let (up, _) = moved(&s, || {
        std::fs::write(theirs.join("model.safetensors"), &v4).unwrap();
        commit_push(&ci, &theirs, "v4 from CI");
    });
    eprintln!(
        "clone without LFS files, one {TENSOR}-byte tensor and the header changed: the server \
         received {up} bytes for {changed} changed"
    );
    let uploads = journal(&theirs, "upload");
    let last = uploads.last().unwrap();
    assert!(
        last["history_bytes"].as_u64().unwrap() > (TENSORS * TENSOR / 2) as u64,
        "deduplicated through the versions on the server: {last}\n{}",
        ci.agent_log()
    );
    let summary = ci.run_in(&theirs, "git", &["xet", "push-summary", "--json"]);
    let totals: serde_json::Value = serde_json::from_str(summary.stdout.trim()).unwrap();
    assert!(
        totals["history_deduplicated_bytes"].as_u64().unwrap() > 0,
        "{totals}"
    );
    assert!(
        up <= changed + LIMIT,
        "sent {up} bytes for {changed} changed\n{}",
        ci.agent_log()
    );
    assert!(
        ci.agent_log()
            .contains("using an earlier version stored on the server"),
        "{}",
        ci.agent_log()
    );

    // What was pushed is v4, byte for byte.
    first.git(&work, &["pull", "-q", "origin", "main"]);
    assert!(std::fs::read(work.join("model.safetensors")).unwrap() == v4);
}

/// The server refuses a push's shard because a xorb the chunks of an earlier version are in is
/// lost there: the push plans its earlier versions again, leaves out those in that xorb, sends
/// their chunks, and succeeds. (A proxy in front of the server says the xorb is lost, once, and
/// answers no global-dedup query, so that only earlier versions place chunks in stored xorbs.)
#[needs(git_lfs)]
#[test]
fn a_lost_xorb_an_earlier_version_used_is_sent_again() {
    use xet_client::fake_server::{Fake, Reply, Seen};
    use xet_format::XorbHash;
    let (s, first, _work, mut tensors) = four_versions();
    // v3's own xorb (the newest of the store) is the one said to be lost.
    let mut stored: Vec<(std::time::SystemTime, String)> = Vec::new();
    for sub in std::fs::read_dir(s.store_dir().join("xorbs"))
        .unwrap()
        .flatten()
    {
        for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
            let name = f.file_name().to_str().unwrap().to_string();
            stored.push((f.metadata().unwrap().modified().unwrap(), name));
        }
    }
    stored.sort();
    let lost = XorbHash::from_hex(&stored.pop().unwrap().1).unwrap();

    let upstream = s.url().to_string();
    let http = reqwest::blocking::Client::new();
    let mut refused = false;
    let proxy = Fake::start(move |req: &Seen| {
        if req.path.starts_with("/v1/chunks/") {
            return xet_client::fake_server::reply(404, "");
        }
        if req.method == "POST" && req.path.starts_with("/v1/shards") && !refused {
            refused = true;
            let says = serde_json::json!({
                "error": "unknown_xorb",
                "message": format!(
                    "term 0 of file {} references unknown xorb {lost} (never uploaded, or lost): \
                     upload the xorb first",
                    "0".repeat(64)
                ),
            });
            return xet_client::fake_server::reply(400, &says.to_string());
        }
        let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap();
        let mut out = http.request(method, format!("{upstream}{}", req.path));
        for (k, v) in &req.headers {
            if !matches!(
                k.as_str(),
                "host" | "content-length" | "connection" | "transfer-encoding"
            ) {
                out = out.header(k.as_str(), v.as_str());
            }
        }
        let resp = out.body(req.body.clone()).send().unwrap();
        let status = resp.status().as_u16();
        let headers: Vec<(&'static str, String)> = resp
            .headers()
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "content-length" | "connection" | "transfer-encoding"
                )
            })
            .map(|(k, v)| {
                let name: &'static str = Box::leak(k.as_str().to_string().into_boxed_str());
                (name, v.to_str().unwrap_or_default().to_string())
            })
            .collect();
        Reply {
            status,
            headers,
            body: resp.bytes().unwrap().to_vec(),
        }
    });

    // The CI machine talks to the server's CAS through the proxy (standalone mode).
    let ci = GitEnv::new();
    ci.credential_helper(WRITE_TOKEN);
    let out = ci.run_in(
        ci.path(),
        "git",
        &["xet", "install", "--global", "--endpoint", &proxy.url],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    let remote = first.path().join("remote.git");
    ci.clone_skip_smudge(&remote.display().to_string(), "ci");
    let theirs = ci.path().join("ci");
    tensors[11] = common::splitmix64(300, TENSOR);
    let v4 = checkpoint(&tensors, "\"step\":\"004000\"");
    std::fs::write(theirs.join("model.safetensors"), &v4).unwrap();
    commit_push(&ci, &theirs, "v4 from CI");
    let log = ci.agent_log();
    assert!(log.contains("uploading the chunks it held again"), "{log}");
    assert!(log.contains("relies on a xorb the server lost"), "{log}");

    // The first shard relied on the xorb through v3's list; the second does not.
    let shards: Vec<Vec<XorbHash>> = proxy
        .seen()
        .iter()
        .filter(|r| r.method == "POST" && r.path.starts_with("/v1/shards"))
        .map(|r| {
            let parsed = xet_format::shard::ParsedShard::parse(&r.body).unwrap();
            parsed
                .shard
                .files
                .iter()
                .flat_map(|f| f.terms.iter().map(|t| t.xorb_hash))
                .collect()
        })
        .collect();
    assert_eq!(shards.len(), 2, "{shards:?}");
    assert!(shards[0].contains(&lost), "{shards:?}");
    assert!(!shards[1].contains(&lost), "{shards:?}");
    let last = journal(&theirs, "upload").pop().unwrap();
    assert!(
        last["history_bytes"].as_u64().unwrap() > (TENSORS * TENSOR / 2) as u64,
        "v1 and v2 still served: {last}"
    );

    // A machine with nothing reads v4 whole from the server.
    let check = machine(WRITE_TOKEN);
    let all = clone(&check, &remote, "check");
    assert!(std::fs::read(all.join("model.safetensors")).unwrap() == v4);
}

/// Files under `dir`, recursively.
fn walkdir_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            if e.path().is_dir() {
                walkdir_files(&e.path())
            } else {
                1
            }
        })
        .sum()
}
