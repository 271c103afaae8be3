//! The agent against a real `git xet serve` on 127.0.0.1:0, driven by real git and git-lfs:
//! negotiated mode (the LFS server chooses `xet`) and standalone mode with an http endpoint;
//! the server killed in the middle of a push, or restarted on the same port (the push goes
//! on); and interoperability with the reference client
//! (a file it uploaded is fetched by git by oid, a file git pushed is downloaded by it by Xet
//! hash).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::path::Path;
use xet_test_tools::needs;

use crate::common;

use common::git::{dir_bytes, GitEnv};
use common::server::{TestServer, WRITE_TOKEN};

fn registered_files(server: &TestServer) -> u64 {
    server.health("files")
}

fn xet(env: &GitEnv, args: &[&str]) {
    let mut all = vec!["xet"];
    all.extend_from_slice(args);
    let out = env.run_in(env.path(), "git", &all);
    assert_eq!(out.status, Some(0), "git {all:?}: {}", out.all());
}

/// A work repository tracking `*.bin` with a bare `origin`; `lfs_url` set (and committed in
/// `.lfsconfig`, which clones read) when given.
fn work_repo(env: &GitEnv, lfs_url: Option<&str>) -> std::path::PathBuf {
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    if let Some(url) = lfs_url {
        std::fs::write(work.join(".lfsconfig"), format!("[lfs]\n\turl = {url}\n")).unwrap();
    }
    work
}

/// Commits three random files of `size` bytes named `<prefix>0.bin`… in `work`.
fn commit_three(
    env: &GitEnv,
    work: &Path,
    prefix: &str,
    seed: u64,
    size: usize,
) -> Vec<(String, Vec<u8>)> {
    let files: Vec<(String, Vec<u8>)> = (0..3u64)
        .map(|i| {
            (
                format!("{prefix}{i}.bin"),
                common::splitmix64(seed + i, size),
            )
        })
        .collect();
    for (name, data) in &files {
        std::fs::write(work.join(name), data).unwrap();
    }
    env.git(work, &["add", "."]);
    env.git(work, &["commit", "-q", "-m", "three"]);
    files
}

/// Waits (at most two minutes) until a xorb is stored under `xorbs`.
fn wait_for_a_xorb(xorbs: &Path) {
    let start = std::time::Instant::now();
    while common::git::count_files(xorbs) == 0 {
        assert!(start.elapsed().as_secs() < 120, "no xorb arrived");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn journal(repo: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(repo.join(".git/xet/transfers.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[needs(git_lfs)]
#[test]
fn negotiated_push_clone_edit_and_pull() {
    let server = common::server::start();
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    xet(&env, &["install", "--global"]);
    let lfs_url = format!("{}/team/repo.git/info/lfs", server.url());
    let work = work_repo(&env, Some(&lfs_url));

    let big = common::splitmix64(41, 6 << 20);
    let small = common::splitmix64(42, 3000);
    std::fs::write(work.join("big.bin"), &big).unwrap();
    std::fs::write(work.join("small.bin"), &small).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "first"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    assert_eq!(registered_files(&server), 2);
    let log = env.agent_log();
    assert_eq!(
        log.matches(": uploaded oid").count(),
        2,
        "the xet agent did both uploads (not basic):\n{log}"
    );
    let first = dir_bytes(&server.store_dir().join("xorbs"));

    env.git(env.path(), &["clone", "-q", "remote.git", "clone"]);
    let clone = env.path().join("clone");
    assert!(std::fs::read(clone.join("big.bin")).unwrap() == big);
    assert_eq!(std::fs::read(clone.join("small.bin")).unwrap(), small);
    assert!(
        env.agent_log().matches(": downloaded oid").count() >= 2,
        "the clone downloaded through the agent"
    );

    let mut edited = big.clone();
    for b in &mut edited[2 << 20..(2 << 20) + 100] {
        *b = b.wrapping_add(1);
    }
    std::fs::write(work.join("big.bin"), &edited).unwrap();
    env.git(&work, &["commit", "-q", "-am", "edit"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    let grown = dir_bytes(&server.store_dir().join("xorbs")) - first;
    let record = journal(&work)
        .into_iter()
        .rfind(|r| r["oid"] == common::sha256_hex(&edited).as_str())
        .expect("the edited file is in the journal");
    let sent = record["transferred_bytes"].as_u64().unwrap();
    eprintln!("edited push: sent {sent} bytes, store grew {grown} bytes");
    assert!(grown * 16 < edited.len() as u64, "store grew {grown} bytes");
    assert!(sent * 16 < edited.len() as u64, "sent {sent} bytes");
    env.git(&clone, &["pull", "-q", "--ff-only"]);
    assert!(std::fs::read(clone.join("big.bin")).unwrap() == edited);

    // fetch --all into a clone that skipped smudging: every version, through the agent.
    env.clone_skip_smudge("remote.git", "lazy");
    let lazy = env.path().join("lazy");
    env.git(&lazy, &["lfs", "fetch", "--all"]);
    assert_eq!(
        common::git::count_files(&lazy.join(".git/lfs/objects")),
        3,
        "both versions of big.bin and small.bin"
    );
    let fsck = env.git(&lazy, &["lfs", "fsck"]);
    assert!(fsck.stdout.contains("OK"), "{}", fsck.stdout);
}

#[needs(git_lfs)]
#[test]
fn standalone_http_endpoint_with_the_token_from_a_credential_helper() {
    let server = common::server::start();
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    xet(&env, &["install", "--global", "--endpoint", server.url()]);
    let work = work_repo(&env, None);
    let data = common::splitmix64(51, 2 << 20);
    std::fs::write(work.join("data.bin"), &data).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "data"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    assert_eq!(registered_files(&server), 1);
    env.git(env.path(), &["clone", "-q", "remote.git", "clone"]);
    assert!(std::fs::read(env.path().join("clone/data.bin")).unwrap() == data);

    // A wrong token: the push fails and says what to do.
    let env2 = GitEnv::new();
    env2.credential_helper("not-the-token");
    xet(&env2, &["install", "--global", "--endpoint", server.url()]);
    let work2 = work_repo(&env2, None);
    std::fs::write(work2.join("other.bin"), b"other content").unwrap();
    env2.git(&work2, &["add", "."]);
    env2.git(&work2, &["commit", "-q", "-m", "other"]);
    let push = env2.run_in(&work2, "git", &["push", "-q", "origin", "main"]);
    assert_ne!(push.status, Some(0));
    assert!(
        push.all().contains("401") && push.all().contains("GIT_XET_TOKEN"),
        "{}",
        push.all()
    );
}

#[needs(git_lfs)]
#[test]
fn a_standalone_repositorys_hook_sends_small_files_ahead_to_a_server_with_the_helpers_token() {
    let server = common::server::start();
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    let work = work_repo(&env, None);
    // The repository's own install (as the guide sets standalone repositories up) writes
    // git-xet's pre-push hook.
    env.install_local(&work, server.url());
    let files = small_files(700);
    for (name, data) in &files {
        std::fs::write(work.join(name), data).unwrap();
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "small"]);
    let push = env.run_in(&work, "git", &["push", "origin", "main"]);
    assert_eq!(push.status, Some(0), "{}", push.all());
    // The 40 files went up ahead of git-lfs in one pack (the token from the credential
    // helper), and the agents found each registered: one shard for the push.
    assert!(
        push.all()
            .contains("git-xet: 40 small LFS files sent in packs ahead of git-lfs"),
        "{}",
        push.all()
    );
    assert_eq!(registered_files(&server), files.len() as u64);
    assert_eq!(
        common::git::count_files(&server.store_dir().join("shards")),
        1,
        "{}",
        env.agent_log()
    );
    // A clone set up for the same endpoint gets every file.
    let out = env.run_in(
        env.path(),
        "git",
        &[
            "xet",
            "clone",
            "--endpoint",
            server.url(),
            "remote.git",
            "clone",
        ],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    for (name, data) in &files {
        assert!(
            std::fs::read(env.path().join("clone").join(name)).unwrap() == *data,
            "{name}"
        );
    }
}

#[needs(git_lfs)]
#[test]
fn a_server_killed_mid_push_gives_a_clear_error_and_the_next_push_succeeds() {
    let server = common::server::start();
    let mut env = GitEnv::new();
    // A server that stays away fails the push after 3 s of retries (60 s by default).
    env.vars.push(("GIT_XET_RETRY_SECS".into(), "3".into()));
    env.credential_helper(WRITE_TOKEN);
    xet(&env, &["install", "--global", "--endpoint", server.url()]);
    let work = work_repo(&env, None);
    let files = commit_three(&env, &work, "f", 60, 24 << 20);

    // Stop the server as soon as its first xorb is stored.
    let xorbs = server.store_dir().join("xorbs");
    let TestServer {
        server: running,
        dir,
    } = server;
    let killer = std::thread::spawn(move || {
        wait_for_a_xorb(&xorbs);
        running.stop().unwrap();
    });
    let push = env.run_in(&work, "git", &["push", "-q", "origin", "main"]);
    killer.join().unwrap();
    assert_ne!(push.status, Some(0), "the push must fail: {}", push.all());
    assert!(
        push.all().contains("cannot reach CAS server"),
        "a clear error: {}",
        push.all()
    );
    let log = env.agent_log();
    assert!(log.contains("attempt"), "the agent retried:\n{log}");

    // The server comes back (same store, new port): the next push succeeds.
    let server = common::server::start_on(dir);
    env.git(
        env.path(),
        &["config", "--global", "xet.endpoint", server.url()],
    );
    env.git(&work, &["push", "-q", "origin", "main"]);
    assert_eq!(registered_files(&server), 3);
    env.git(env.path(), &["clone", "-q", "remote.git", "clone"]);
    for (name, data) in &files {
        assert!(std::fs::read(env.path().join("clone").join(name)).unwrap() == *data);
    }
}

#[needs(git_lfs)]
#[test]
fn a_server_restarted_on_the_same_port_mid_push_does_not_fail_the_push() {
    use git_xet::server::auth::{Scope, ServerToken};
    use git_xet::server::{ServeConfig, Server};
    let server = common::server::start();
    let addr = server.server.addr;
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    xet(&env, &["install", "--global", "--endpoint", server.url()]);
    let work = work_repo(&env, None);
    let files = commit_three(&env, &work, "r", 80, 16 << 20);

    // Once the first xorb is stored, the server goes away for three seconds and comes back
    // on the same address with the same store, as a restart does.
    let xorbs = server.store_dir().join("xorbs");
    let TestServer {
        server: running,
        dir,
    } = server;
    let restarter = std::thread::spawn(move || {
        wait_for_a_xorb(&xorbs);
        running.stop().unwrap();
        std::thread::sleep(std::time::Duration::from_secs(3));
        let mut config = ServeConfig::new(
            dir.path().join("store"),
            vec![ServerToken::new(WRITE_TOKEN, Scope::Write, "test").unwrap()],
        );
        config.listen = addr;
        config.max_lifetime = Some(std::time::Duration::from_secs(600));
        TestServer {
            server: Server::spawn(config).expect("the server restarts on the same port"),
            dir,
        }
    });
    let push = env.run_in(&work, "git", &["push", "-q", "origin", "main"]);
    let server = restarter.join().unwrap();
    assert_eq!(
        push.status,
        Some(0),
        "the push survives the restart: {}",
        push.all()
    );
    assert!(
        env.agent_log().contains("retrying"),
        "the agent retried:\n{}",
        env.agent_log()
    );
    assert_eq!(registered_files(&server), 3);
    env.git(env.path(), &["clone", "-q", "remote.git", "clone"]);
    for (name, data) in &files {
        assert!(std::fs::read(env.path().join("clone").join(name)).unwrap() == *data);
    }
}

#[needs(git_lfs, hf_xet)]
#[test]
fn files_cross_between_git_and_the_reference_client() {
    let python = common::reference_python();
    let peer = common::hfxet::Peer {
        python,
        env: Vec::new(),
    };
    let server = common::server::start();
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    xet(&env, &["install", "--global"]);
    let lfs_url = format!("{}/team/repo.git/info/lfs", server.url());
    let work = work_repo(&env, Some(&lfs_url));

    // hf_xet uploads a file; git fetches it by its LFS oid (the server finds the Xet file
    // from the SHA-256 in hf_xet's shard).
    let from_hf = common::splitmix64(71, (3 << 20) + 12345);
    let hf_path = env.path().join("from-hf.bin");
    std::fs::write(&hf_path, &from_hf).unwrap();
    let uploaded = peer.upload(&server, &env.path().join("hf-cache-up"), &[hf_path]);
    assert_eq!(uploaded[0].1, from_hf.len() as u64);
    let pointer = format!(
        "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize {}\n",
        common::sha256_hex(&from_hf),
        from_hf.len()
    );
    std::fs::write(work.join("from-hf.bin"), &pointer).unwrap();

    // git pushes a file; hf_xet downloads it by the Xet hash the agent recorded.
    let from_git = common::splitmix64(72, 2 << 20);
    std::fs::write(work.join("from-git.bin"), &from_git).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "both"]);
    // The pre-push hook would look for from-hf.bin's object locally; it lives on the server.
    env.git(&work, &["lfs", "push", "origin", "main"]);
    env.git(&work, &["push", "-q", "--no-verify", "origin", "main"]);

    env.git(env.path(), &["clone", "-q", "remote.git", "clone"]);
    let clone = env.path().join("clone");
    assert!(
        std::fs::read(clone.join("from-hf.bin")).unwrap() == from_hf,
        "git fetched hf_xet's upload by oid"
    );

    let record = journal(&work)
        .into_iter()
        .find(|r| r["oid"] == common::sha256_hex(&from_git).as_str())
        .expect("the pushed file is in the journal");
    let hash = record["xet_hash"].as_str().unwrap().to_string();
    let dest = env.path().join("downloaded-by-hf.bin");
    peer.download(
        &server,
        &env.path().join("hf-cache-down"),
        &[(dest.clone(), hash, from_git.len() as u64)],
    );
    assert!(
        std::fs::read(&dest).unwrap() == from_git,
        "hf_xet downloaded git's push by Xet hash"
    );
}

/// The server's count of answered requests on `route` (any method and status).
fn requests_on(server: &TestServer, route: &str) -> u64 {
    let text = reqwest::blocking::get(format!("{}/metrics", server.url()))
        .unwrap()
        .text()
        .unwrap();
    let label = format!("gitxet_http_requests_total{{route=\"{route}\",");
    text.lines()
        .filter_map(|l| l.strip_prefix(&label))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A server and a work repository whose LFS server it is, with git-xet installed.
fn negotiated_repo() -> (TestServer, GitEnv, std::path::PathBuf) {
    let server = common::server::start();
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    xet(&env, &["install", "--global"]);
    let lfs_url = format!("{}/team/repo.git/info/lfs", server.url());
    let work = work_repo(&env, Some(&lfs_url));
    (server, env, work)
}

/// 40 small files (1-20 KiB) `s00.bin`…`s39.bin`, from `seed`.
fn small_files(seed: u64) -> Vec<(String, Vec<u8>)> {
    (0..40u64)
        .map(|i| {
            let len = 1024 + (i as usize * 7919) % (19 << 10);
            (format!("s{i:02}.bin"), common::splitmix64(seed + i, len))
        })
        .collect()
}

#[needs(git_lfs)]
#[test]
fn the_small_files_of_a_fetch_come_down_in_packs() {
    let (server, env, work) = negotiated_repo();
    let files = small_files(900);
    for (name, data) in &files {
        std::fs::write(work.join(name), data).unwrap();
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "many"]);
    env.git(&work, &["push", "-q", "origin", "main"]);

    let clone = env.path().join("clone");
    let skip = env.run_with(
        env.path(),
        "git",
        &["clone", "-q", "remote.git", "clone"],
        &[("GIT_LFS_SKIP_SMUDGE", "1")],
    );
    assert_eq!(skip.status, Some(0), "{}", skip.all());
    let before = env.agent_log().matches("downloaded a pack").count();
    let ranges_before = requests_on(&server, "/v1/xorb-data/{xorb_hash}");
    let batch_before = requests_on(&server, "/v1/reconstructions");
    let sent_before = server.health("sent_xorb_bytes");
    env.git(&clone, &["lfs", "fetch"]);
    let sent = server.health("sent_xorb_bytes") - sent_before;
    let log = env.agent_log();
    let packs = log.matches("downloaded a pack").count() - before;
    let ranges = requests_on(&server, "/v1/xorb-data/{xorb_hash}") - ranges_before;
    let batches = requests_on(&server, "/v1/reconstructions") - batch_before;
    eprintln!("{packs} packs, {batches} batch plans, {ranges} range requests");
    // 40 objects in one batch: 8 packs, each planned in one request and fetched in a few
    // (one per run of neighbouring bytes), instead of a request per object.
    assert_eq!(packs, 8, "{log}");
    assert_eq!(batches, 8);
    assert!(ranges <= 16, "{ranges} range requests for 40 objects");
    // Every object arrived whole and is in the journal once.
    env.git(&clone, &["lfs", "checkout"]);
    for (name, data) in &files {
        assert!(std::fs::read(clone.join(name)).unwrap() == *data, "{name}");
    }
    let fsck = env.git(&clone, &["lfs", "fsck"]);
    assert!(fsck.stdout.contains("OK"), "{}", fsck.stdout);
    let records = journal(&clone);
    assert_eq!(records.len(), files.len());
    assert!(records.iter().all(|r| r["direction"] == "download"));
    // The members' records share out the bytes each pack fetched: they add up to what the
    // server sent.
    let wire: u64 = records
        .iter()
        .map(|r| r["transferred_bytes"].as_u64().unwrap())
        .sum();
    crate::journal_split::assert_wire("fetch in packs", wire, sent);
    // Nothing is left behind but the packs' small lock and outcome files.
    let left: Vec<String> = std::fs::read_dir(clone.join(".git/lfs/tmp/xet-packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock") && !n.ends_with(".done"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[needs(git_lfs)]
#[test]
fn the_small_files_of_a_push_are_packed_into_a_few_xorbs() {
    let (server, env, work) = negotiated_repo();
    // 40 small files and one of 6 MiB, which is not packed.
    let mut files = small_files(500);
    files.push(("big.bin".to_string(), common::splitmix64(600, 6 << 20)));
    for (name, data) in &files {
        std::fs::write(work.join(name), data).unwrap();
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "many"]);
    env.git(&work, &["push", "-q", "origin", "main"]);

    assert_eq!(registered_files(&server), files.len() as u64);
    let xorbs = common::git::count_files(&server.store_dir().join("xorbs"));
    let log = env.agent_log();
    let packs = log.matches("uploaded a pack").count();
    eprintln!("{xorbs} xorbs, {packs} packs");
    // The batch's 40 small objects are dealt into 2 packs (one xorb each), the big file alone.
    assert!((2..=8).contains(&packs), "packs: {packs}\n{log}");
    assert!(xorbs <= 10, "{xorbs} xorbs for 41 files");
    // Every object is in the journal once, with the bytes sent shared out.
    let records = journal(&work);
    let mut oids: Vec<String> = records
        .iter()
        .map(|r| r["oid"].as_str().unwrap().to_string())
        .collect();
    oids.sort();
    oids.dedup();
    assert_eq!((records.len(), oids.len()), (files.len(), files.len()));
    let sent: u64 = records
        .iter()
        .map(|r| r["transferred_bytes"].as_u64().unwrap())
        .sum();
    let total: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    assert!(
        sent >= total && sent < total + total / 20,
        "sent {sent} of {total}"
    );
    // The push's summary counts every object once.
    let summary = env.run_in(&work, "git", &["xet", "push-summary"]);
    assert!(
        summary.all().contains("pushed 41 objects"),
        "{}",
        summary.all()
    );

    env.git(env.path(), &["clone", "-q", "remote.git", "clone"]);
    let clone = env.path().join("clone");
    for (name, data) in &files {
        assert!(std::fs::read(clone.join(name)).unwrap() == *data, "{name}");
    }
    let fsck = env.git(&clone, &["lfs", "fsck"]);
    assert!(fsck.stdout.contains("OK"), "{}", fsck.stdout);

    // `xet.packUploads false`: each small object goes up on its own.
    env.git(&work, &["config", "xet.packUploads", "false"]);
    for i in 0..6u64 {
        let data = common::splitmix64(700 + i, 2000 + i as usize * 100);
        std::fs::write(work.join(format!("t{i}.bin")), data).unwrap();
    }
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "six more"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    assert_eq!(registered_files(&server), files.len() as u64 + 6);
    assert_eq!(
        common::git::count_files(&server.store_dir().join("xorbs")),
        xorbs + 6,
        "one xorb per object"
    );
    assert_eq!(env.agent_log().matches("uploaded a pack").count(), packs);
}
