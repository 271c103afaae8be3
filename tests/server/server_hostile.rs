//! The server against hundreds of hostile clients at once: `git-xet serve` (the built binary)
//! with 300 stalled connections (basic GETs and presigned xorb-data GETs of a large object that
//! never read their socket, basic PUTs and xorb POSTs that send a big `Content-Length` and
//! part of the body, then nothing). While they are open, its memory stays bounded and another
//! client pushes and clones through real git, git-lfs and the xet agent; then SIGTERM stops it
//! within its shutdown deadline although the stalled uploads never finish.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::time::{Duration, Instant};
use xet_test_tools::needs;

use crate::common;

use common::git::GitEnv;
use common::server::{stalled_get, stalled_upload, ServeProcess, READ_TOKEN, WRITE_TOKEN};
use serde_json::Value;

/// Stalled connections of each of the four kinds.
const STALLED_EACH: usize = 75;
/// The bound on the server's resident memory (VmHWM) for the whole test.
const RSS_LIMIT_KIB: u64 = 300 * 1024;
/// The size of the stored object the stalled readers ask for.
const BIG: usize = 32 << 20;
/// Shutdown deadline given to the server.
const SHUTDOWN_SECS: u64 = 3;

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

fn hex_of(seed: u64) -> String {
    common::sha256_hex(&seed.to_le_bytes())
}

fn xet(env: &GitEnv, args: &[&str]) {
    let mut all = vec!["xet"];
    all.extend_from_slice(args);
    let out = env.run_in(env.path(), "git", &all);
    assert_eq!(out.status, Some(0), "git {all:?}: {}", out.all());
}

#[needs(git_lfs)]
#[test]
fn hundreds_of_stalled_clients_hold_bounded_memory_while_others_push_and_clone() {
    let test_started = Instant::now();
    let mut server = ServeProcess::start(&["--shutdown-timeout", &SHUTDOWN_SECS.to_string()]);
    let url = server.url.clone();
    let addr = server.addr;

    // A large stored object (pseudo-random, so it does not compress), and its presigned xorb URL.
    let big = common::splitmix64(7, BIG);
    let oid = common::sha256_hex(&big);
    let object = format!("/team/big.git/info/lfs/objects/{oid}");
    let r = http()
        .put(format!("{url}{object}"))
        .bearer_auth(WRITE_TOKEN)
        .body(big)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap_or_default());
    let file: Value = http()
        .get(format!("{url}/v1/lfs-files/{oid}"))
        .bearer_auth(READ_TOKEN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let file_hash = file["file_hash"].as_str().unwrap();
    let rec: Value = http()
        .get(format!("{url}/v1/reconstructions/{file_hash}"))
        .bearer_auth(READ_TOKEN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let fetch = rec["fetch_info"].as_object().unwrap();
    let presigned = fetch.values().next().unwrap()[0]["url"].as_str().unwrap();
    let presigned = presigned.strip_prefix(&url).unwrap().to_string();
    let before = server.status_kib("VmRSS");

    // 300 stalled clients.
    let opened = Instant::now();
    let mut stalled = Vec::with_capacity(4 * STALLED_EACH);
    for i in 0..STALLED_EACH as u64 {
        stalled.push(stalled_get(addr, &object, Some(READ_TOKEN)));
        stalled.push(stalled_get(addr, &presigned, None));
        let put = format!("/team/big.git/info/lfs/objects/{}", hex_of(i));
        stalled.push(stalled_upload(addr, "PUT", &put, 100 << 20, 1 << 20));
        let post = format!("/v1/xorbs/default/{}", hex_of(1_000_000 + i));
        stalled.push(stalled_upload(addr, "POST", &post, 60 << 20, 1 << 20));
    }
    // Every stalled client holds its socket, and every upload a spool file, in the server.
    let held = |server: &ServeProcess| {
        server.open_sockets() > 4 * STALLED_EACH && server.spool_files() == 2 * STALLED_EACH
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !held(&server) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        held(&server),
        "the server holds {} sockets and {} spool files",
        server.open_sockets(),
        server.spool_files()
    );
    // Let the stalled readers fill the socket buffers and the server's pieces.
    std::thread::sleep(Duration::from_secs(1));
    let stalled_rss = server.status_kib("VmRSS");
    eprintln!(
        "{} stalled clients open after {:?}: RSS {} MiB (was {} MiB), {} descriptors",
        stalled.len(),
        opened.elapsed(),
        stalled_rss / 1024,
        before / 1024,
        server.open_fds()
    );

    // Meanwhile another client pushes and clones through git, git-lfs and the xet agent.
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    xet(&env, &["install", "--global"]);
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    std::fs::write(
        work.join(".lfsconfig"),
        format!("[lfs]\n\turl = {url}/team/repo.git/info/lfs\n"),
    )
    .unwrap();
    let data = common::splitmix64(8, 12 << 20);
    std::fs::write(work.join("data.bin"), &data).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "data"]);
    let pushed = Instant::now();
    env.git(&work, &["push", "-q", "origin", "main"]);
    let push_time = pushed.elapsed();
    let cloned = Instant::now();
    env.git(env.path(), &["clone", "-q", "remote.git", "clone"]);
    let clone_time = cloned.elapsed();
    assert!(
        std::fs::read(env.path().join("clone/data.bin")).unwrap() == data,
        "the clone has the pushed content"
    );
    let log = env.agent_log();
    assert!(
        log.contains(": uploaded oid"),
        "pushed through the agent:\n{log}"
    );
    assert!(
        log.contains(": downloaded oid"),
        "cloned through the agent:\n{log}"
    );
    // And a plain basic download of the very object the stalled readers hold.
    let fetched = Instant::now();
    let r = http()
        .get(format!("{url}{object}"))
        .bearer_auth(READ_TOKEN)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let got = r.bytes().unwrap();
    assert!(
        got[..] == common::splitmix64(7, BIG)[..],
        "the basic download is whole"
    );
    let fetch_time = fetched.elapsed();

    // The stalled clients were held the whole time.
    assert!(
        held(&server),
        "stalled connections were dropped early: {} sockets, {} spool files",
        server.open_sockets(),
        server.spool_files()
    );
    let rss = server.status_kib("VmRSS");
    let hwm = server.status_kib("VmHWM");
    let threads = std::fs::read_to_string(format!("/proc/{}/status", server.pid()))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Threads:"))
        .unwrap_or("")
        .to_string();
    eprintln!(
        "push {push_time:?}, clone {clone_time:?}, basic GET of {} MiB {fetch_time:?}; \
         server RSS {} MiB, peak {} MiB, {threads}",
        BIG >> 20,
        rss / 1024,
        hwm / 1024
    );
    assert!(
        hwm < RSS_LIMIT_KIB,
        "peak RSS {} MiB is over {} MiB",
        hwm / 1024,
        RSS_LIMIT_KIB / 1024
    );

    // SIGTERM with every stalled client still open: the server is gone within its deadline.
    let took = server.terminate(Duration::from_secs(SHUTDOWN_SECS + 20));
    let took = took.unwrap_or_else(|| panic!("no exit after SIGTERM; log:\n{}", server.log()));
    eprintln!(
        "SIGTERM to exit: {took:?}; whole test {:?}",
        test_started.elapsed()
    );
    assert!(
        took < Duration::from_secs(SHUTDOWN_SECS + 5),
        "SIGTERM took {took:?} with a {SHUTDOWN_SECS} s deadline"
    );
    assert!(
        server.log().contains("shutdown deadline passed"),
        "the stalled requests were cut at the deadline"
    );
    drop(stalled);
}
