//! Damage on the server, through real git and git-lfs: after a stored xorb is flipped, truncated
//! or deleted, a push of an edited copy does not rely on it (it sends the chunks again), a
//! download of a file that needs it fails naming the damage, re-pushing the original repairs the
//! store, and `git xet scrub` / `git xet gc` report and clean up.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};

use common::git::{dir_bytes, GitEnv};
use common::server::WRITE_TOKEN;

#[derive(Debug, Clone, Copy)]
enum Damage {
    Flip,
    Truncate,
    Delete,
}

fn xorb_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(subs) = std::fs::read_dir(dir.join("xorbs")) {
        for sub in subs.flatten() {
            for f in std::fs::read_dir(sub.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push(f.path());
            }
        }
    }
    out
}

fn damage(path: &Path, how: Damage) {
    std::thread::sleep(std::time::Duration::from_millis(15));
    match how {
        Damage::Flip => {
            let mut bytes = std::fs::read(path).unwrap();
            let at = bytes.len() / 2;
            bytes[at] ^= 0x20;
            std::fs::write(path, bytes).unwrap();
        }
        Damage::Truncate => {
            let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            let len = f.metadata().unwrap().len();
            f.set_len(len * 2 / 3).unwrap();
        }
        Damage::Delete => std::fs::remove_file(path).unwrap(),
    }
}

fn git_xet(args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_git-xet"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn journal_sent(repo: &Path, data: &[u8]) -> u64 {
    let oid = common::sha256_hex(data);
    std::fs::read_to_string(repo.join(".git/xet/transfers.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .rfind(|r| r["oid"] == oid.as_str() && r["direction"] == "upload")
        .map(|r| r["transferred_bytes"].as_u64().unwrap())
        .expect("the upload is in the journal")
}

/// A world with git-xet installed globally and a work repository tracking `*.bin`, its LFS
/// traffic going to `server` (negotiated mode), with a bare `origin`.
fn negotiated_repo(server: &common::server::TestServer) -> (GitEnv, PathBuf) {
    let env = GitEnv::new();
    let lfs_url = format!("{}/team/repo.git/info/lfs", server.url());
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    (env, work)
}

fn run(how: Damage) {
    let server = common::server::start();
    let (env, work) = negotiated_repo(&server);

    let original = common::splitmix64(77, 4 << 20);
    std::fs::write(work.join("model.bin"), &original).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "v1"]);
    env.git(&work, &["push", "-q", "origin", "main"]);

    let store = server.store_dir();
    let stored = xorb_files(&store);
    assert!(!stored.is_empty());
    for x in &stored {
        damage(x, how);
    }

    // An edited copy: pushed without relying on the damaged xorb, so the store holds it whole.
    let mut edited = original.clone();
    for b in &mut edited[2 << 20..(2 << 20) + 64] {
        *b ^= 0x11;
    }
    std::fs::write(work.join("model.bin"), &edited).unwrap();
    env.git(&work, &["commit", "-q", "-am", "v2"]);
    let push = env.run_in(&work, "git", &["push", "-q", "origin", "main"]);
    assert_eq!(
        push.status,
        Some(0),
        "{how:?}: {}\n{}",
        push.all(),
        env.agent_log()
    );
    let sent = journal_sent(&work, &edited);
    eprintln!(
        "{how:?}: the edit push after the damage sent {sent} bytes of {}",
        edited.len()
    );
    assert!(
        sent > edited.len() as u64 / 2,
        "{how:?}: the edit push sent {sent} bytes: it must not have deduplicated against the damaged xorb"
    );
    env.clone_skip_smudge("remote.git", "fresh");
    let fresh = env.path().join("fresh");
    env.git(&fresh, &["lfs", "pull"]);
    assert!(std::fs::read(fresh.join("model.bin")).unwrap() == edited);

    // The original needs the damaged xorb: fetching it fails and says so.
    let fetch = env.run_in(&fresh, "git", &["lfs", "fetch", "--all"]);
    assert_ne!(fetch.status, Some(0), "{how:?}: {}", fetch.all());
    assert!(
        fetch.all().contains("damaged"),
        "{how:?}: the error names the damage: {}",
        fetch.all()
    );

    // Re-pushing the original from a clone that has it repairs the store.
    let oid = common::sha256_hex(&original);
    env.git(&work, &["lfs", "push", "--object-id", "origin", &oid]);
    let fetch = env.run_in(&fresh, "git", &["lfs", "fetch", "--all"]);
    assert_eq!(fetch.status, Some(0), "{how:?}: {}", fetch.all());
    let restored = std::fs::read(
        fresh
            .join(".git/lfs/objects")
            .join(&oid[..2])
            .join(&oid[2..4])
            .join(&oid),
    )
    .unwrap();
    assert!(
        restored == original,
        "{how:?}: the original downloads again"
    );

    // Offline: scrub reports the damaged xorb no file needs any more, gc forgets it, scrub is
    // clean.
    let grown = dir_bytes(&store.join("xorbs"));
    assert!(grown > 0);
    let common::server::TestServer {
        server: running,
        dir,
    } = server;
    running.stop().unwrap();
    let store = dir.path().join("store");
    let s = store.to_str().unwrap();
    let (code, text) = git_xet(&["scrub", s]);
    assert_eq!(code, Some(2), "{how:?}: {text}");
    assert!(text.contains("damaged xorb"), "{text}");
    assert!(
        !text.contains("cannot be downloaded"),
        "no file needs it: {text}"
    );
    // The quarantined xorb's entry goes whatever the grace period (no file needs it).
    let (code, text) = git_xet(&["gc", s]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = git_xet(&["scrub", s]);
    assert_eq!(code, Some(0), "{how:?}: {text}");
}

#[needs(git_lfs)]
#[test]
fn a_flipped_xorb_is_not_reused_and_a_repush_repairs_it() {
    run(Damage::Flip);
}

#[needs(git_lfs)]
#[test]
fn a_truncated_xorb_is_not_reused_and_a_repush_repairs_it() {
    run(Damage::Truncate);
}

#[needs(git_lfs)]
#[test]
fn a_deleted_xorb_is_not_reused_and_a_repush_repairs_it() {
    run(Damage::Delete);
}

/// A full disk (a reserve larger than the disk): a push fails at once with 507, not after
/// re-sending each xorb for a minute, and says the server is out of storage.
#[needs(git_lfs)]
#[test]
fn a_full_disk_fails_a_push_at_once_with_507() {
    let server = common::server::start_with(|c| c.store.min_free_bytes = u64::MAX);
    let (env, work) = negotiated_repo(&server);
    std::fs::write(work.join("data.bin"), common::splitmix64(3, 1 << 20)).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "data"]);
    let started = std::time::Instant::now();
    let push = env.run_in(&work, "git", &["push", "-q", "origin", "main"]);
    let took = started.elapsed();
    assert_ne!(push.status, Some(0), "{}", push.all());
    eprintln!(
        "full disk: the push failed after {took:?}: {}",
        push.all().trim()
    );
    assert!(
        push.all().contains("507") && push.all().contains("out of storage"),
        "{}",
        push.all()
    );
    assert!(
        !env.agent_log().contains("retrying"),
        "507 is not retried:\n{}",
        env.agent_log()
    );
    assert!(
        took.as_secs() < 30,
        "failed at once, not after retries: {took:?}"
    );
    assert_eq!(xorb_files(&server.store_dir()).len(), 0);
}

/// The server collects unused xorbs by itself on its schedule.
#[test]
fn the_server_collects_unused_xorbs_on_its_schedule() {
    use xet_client::{RemoteCas, RemoteConfig, TokenSource};
    use xet_format::xorb::ParsedXorb;
    let server = common::server::start_with(|c| {
        c.maintenance.gc_interval = Some(std::time::Duration::from_millis(300));
        c.maintenance.gc_grace = std::time::Duration::ZERO;
    });
    let m = common::manifest();
    let stored = common::read(&m.sessions[1].xorbs[0]);
    let parsed = ParsedXorb::parse(&stored).unwrap();
    let cas = RemoteCas::new(RemoteConfig::new(
        server.url(),
        TokenSource::fixed(Some(WRITE_TOKEN.into())),
    ))
    .unwrap();
    use xet_protocol::CasTarget;
    assert!(cas.put_xorb(parsed.hash(), parsed.chunk_region()).unwrap());
    // An interrupted push: the xorb, never a shard. Gone within a few collections.
    let started = std::time::Instant::now();
    while !xorb_files(&server.store_dir()).is_empty() {
        assert!(
            started.elapsed().as_secs() < 20,
            "the scheduled collection did not remove the unused xorb"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
