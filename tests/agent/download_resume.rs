//! Interrupted downloads resume: a fetch stopped half way (Ctrl-C to the whole command, or
//! SIGINT to git-lfs alone, whose agent then finds git-lfs gone) leaves its partial file, and
//! the next fetch, in other processes, takes it over and fetches only the rest. Bytes are
//! counted where they cross the link: a proxy in front of the server ([`Valve`]) that also
//! holds the download half way, so that the interruption comes at a known point.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::git::{tail, GitEnv};
use common::server::{TestServer, WRITE_TOKEN};
use common::throttle::Valve;

const SIZE: usize = 64 << 20;

/// A server behind a valve, a pushed 64 MiB object, and a fresh clone without it.
struct World {
    valve: Valve,
    _server: TestServer,
    _pusher: GitEnv,
    other: GitEnv,
    clone: PathBuf,
    data: Vec<u8>,
}

fn world(seed: u64) -> World {
    let valve = Valve::start();
    let server = common::server::start_with(|c| c.public_url = Some(valve.url()));
    valve.forward_to(server.server.addr);
    let pusher = GitEnv::new();
    let lfs_url = format!("{}/team/model.git/info/lfs", valve.url());
    let work = pusher.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    let data = common::splitmix64(seed, SIZE);
    std::fs::write(work.join("model.bin"), &data).unwrap();
    pusher.git(&work, &["add", "."]);
    pusher.git(&work, &["commit", "-q", "-m", "model"]);
    pusher.git(&work, &["push", "-q", "origin", "main"]);

    let other = GitEnv::new();
    other.credential_helper(WRITE_TOKEN);
    let out = other.run_in(other.path(), "git", &["xet", "install", "--global"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let remote = pusher.path().join("remote.git");
    other.clone_skip_smudge(remote.to_str().unwrap(), "clone");
    let clone = other.path().join("clone");
    World {
        valve,
        _server: server,
        _pusher: pusher,
        other,
        clone,
        data,
    }
}

/// The partial downloads in the clone's git-lfs temp directory.
fn parts(clone: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(clone.join(".git/lfs/tmp")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with("xet-") && name.ends_with(".part")
        })
        .collect()
}

/// The (size, modification time) of every partial download: what changes while an agent
/// writes.
fn parts_state(clone: &Path) -> Vec<(u64, std::time::SystemTime)> {
    parts(clone)
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| (m.len(), m.modified().unwrap()))
        .collect()
}

/// Waits until `done`, or panics with `what` and the agent's log after `limit`.
fn wait_for(w: &World, limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "{what} did not happen within {limit:?}; agent log (tail):\n{}",
            tail(&w.other.agent_log(), 40)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `git lfs fetch` in the clone (git-lfs itself, in a process group of its own, its
/// agents with it), lets half the object through, and interrupts it: SIGINT to the whole
/// group as Ctrl-C in a terminal sends it (`whole_group`), or to git-lfs alone. Returns once
/// no agent holds a partial download any more.
fn interrupt_half_way(w: &World, whole_group: bool) {
    interrupt_half_way_of(w, whole_group, "git-lfs", &["fetch", "origin"]);
}

/// [`interrupt_half_way`] of the command `program args`.
fn interrupt_half_way_of(w: &World, whole_group: bool, program: &str, args: &[&str]) {
    w.valve.hold_at(w.valve.delivered() + SIZE as u64 / 2);
    let log = w.other.path().join("interrupted.log");
    let mut child = w
        .other
        .command(&w.clone, program, args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(w.other.path().join("interrupted.err")).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for(w, Duration::from_secs(240), "holding half way", || {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{program} {args:?} ended before it was interrupted: {status}");
        }
        w.valve.holding()
    });
    // What has come through is written (not an assertion: an early interruption would only
    // leave less to resume).
    let mut last = (parts_state(&w.clone), Instant::now());
    wait_for(
        w,
        Duration::from_secs(60),
        "the partial download settling",
        || {
            let now = parts_state(&w.clone);
            if now != last.0 {
                last = (now, Instant::now());
            }
            !last.0.is_empty() && last.1.elapsed() > Duration::from_millis(500)
        },
    );
    // The group this test started (`-PGID`), or its leader alone.
    let target = if whole_group {
        format!("-{pid}")
    } else {
        pid.to_string()
    };
    let sent = std::process::Command::new("kill")
        .args(["-INT", "--", &target])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -INT -- {target}");
    child.wait().unwrap();
    if !whole_group {
        // The agent outlives git-lfs: it learns that git-lfs is gone when it next reports
        // progress, so let its download go on.
        w.valve.open();
    }
    wait_for(w, Duration::from_secs(120), "the agents letting go", || {
        parts(&w.clone).iter().all(|p| {
            let Ok(f) = std::fs::File::open(p) else {
                return true;
            };
            f.try_lock().is_ok()
        })
    });
    w.valve.open();
}

/// Where git-lfs keeps the object.
fn object_path(w: &World) -> PathBuf {
    let oid = common::sha256_hex(&w.data);
    w.clone
        .join(".git/lfs/objects")
        .join(&oid[..2])
        .join(&oid[2..4])
        .join(&oid)
}

/// Fetches again to the end; returns the bytes that came over the link.
fn fetch_again(w: &World) -> u64 {
    let before = w.valve.delivered();
    w.other.git(&w.clone, &["lfs", "fetch", "origin"]);
    let moved = w.valve.delivered() - before;
    let got = std::fs::read(object_path(w)).unwrap();
    assert!(got == w.data, "the object is not what was pushed");
    moved
}

fn resumes_after(whole_group: bool) {
    let w = world(if whole_group { 601 } else { 602 });
    interrupt_half_way(&w, whole_group);
    assert!(!object_path(&w).exists(), "the first fetch did not finish");
    let left = parts(&w.clone);
    assert_eq!(left.len(), 1, "one partial download is left: {left:?}");

    let moved = fetch_again(&w);
    eprintln!(
        "fetch after an interruption half way: {moved} of {SIZE} bytes moved ({:.2})",
        moved as f64 / SIZE as f64
    );
    assert!(
        moved <= SIZE as u64 * 6 / 10,
        "{moved} of {SIZE} bytes moved again after an interruption half way"
    );
    let log = w.other.agent_log();
    assert!(
        log.contains("taking over the partial download"),
        "agent log (tail):\n{}",
        tail(&log, 40)
    );
    assert!(parts(&w.clone).is_empty(), "{:?}", parts(&w.clone));
}

#[needs(git_lfs)]
#[test]
fn a_fetch_stopped_with_ctrl_c_resumes_where_it_stopped() {
    resumes_after(true);
}

#[needs(git_lfs)]
#[test]
fn a_fetch_whose_git_lfs_was_interrupted_resumes_where_its_agent_stopped() {
    resumes_after(false);
}

#[needs(git_lfs)]
#[test]
fn a_partial_download_someone_holds_is_left_alone() {
    let w = world(603);
    interrupt_half_way(&w, true);
    let left = parts(&w.clone);
    assert_eq!(left.len(), 1, "{left:?}");
    let before = std::fs::read(&left[0]).unwrap();
    // Another agent's (this test stands for it) that holds its lock: not taken, not removed.
    let holder = std::fs::File::open(&left[0]).unwrap();
    holder.lock().unwrap();
    let moved = fetch_again(&w);
    assert!(
        moved >= SIZE as u64,
        "{moved} of {SIZE} bytes: the fetch started afresh"
    );
    assert!(!w.other.agent_log().contains("taking over"));
    assert!(std::fs::read(&left[0]).unwrap() == before, "left as it was");
    drop(holder);
}

#[needs(git_lfs)]
#[test]
fn git_xet_fetch_stopped_with_ctrl_c_resumes_where_it_stopped() {
    let w = world(603);
    interrupt_half_way_of(&w, true, "git", &["xet", "fetch"]);
    assert!(!object_path(&w).exists(), "the first fetch did not finish");
    assert_eq!(parts(&w.clone).len(), 1, "one partial download is left");
    let before = w.valve.delivered();
    let out = w.other.run_in(&w.clone, "git", &["xet", "fetch"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let moved = w.valve.delivered() - before;
    assert!(std::fs::read(object_path(&w)).unwrap() == w.data);
    eprintln!("git xet fetch after an interruption half way: {moved} of {SIZE} bytes moved");
    assert!(
        moved <= SIZE as u64 * 6 / 10,
        "{moved} of {SIZE} bytes moved again after an interruption half way"
    );
    assert!(parts(&w.clone).is_empty(), "{:?}", parts(&w.clone));
}

/// Files named as a checkout's work-tree files being written, anywhere in the clone's work
/// tree (not under `.git`).
fn checkout_leftovers(clone: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![clone.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.file_name() == ".git" {
                continue;
            }
            if e.path().is_dir() {
                stack.push(e.path());
            } else if e
                .file_name()
                .to_string_lossy()
                .starts_with(".git-xet-checkout")
            {
                out.push(e.path());
            }
        }
    }
    out
}

#[needs(git_lfs)]
#[test]
fn git_xet_pull_stopped_with_ctrl_c_resumes_and_leaves_no_half_written_file() {
    let w = world(604);
    // `git xet pull` writes model.bin beside its pointer as the object lands: stopped half
    // way, the half-written file is left behind (the process is gone) and the pointer stays.
    interrupt_half_way_of(&w, true, "git", &["xet", "pull"]);
    assert!(!object_path(&w).exists(), "the first pull did not finish");
    assert_eq!(
        checkout_leftovers(&w.clone).len(),
        1,
        "the interrupted pull was writing model.bin as it downloaded it"
    );
    let pointer = std::fs::read(w.clone.join("model.bin")).unwrap();
    assert!(pointer.starts_with(b"version https://git-lfs"));
    // The next pull takes the partial download over (so it copies the object into the work
    // tree: what it writes as it downloads is only the rest) and removes the leftover.
    let before = w.valve.delivered();
    let out = w.other.run_in(&w.clone, "git", &["xet", "pull"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let moved = w.valve.delivered() - before;
    assert!(
        moved <= SIZE as u64 * 6 / 10,
        "{moved} of {SIZE} bytes moved again after an interruption half way"
    );
    assert!(std::fs::read(object_path(&w)).unwrap() == w.data);
    assert!(std::fs::read(w.clone.join("model.bin")).unwrap() == w.data);
    assert_eq!(checkout_leftovers(&w.clone), Vec::<PathBuf>::new());
    let status = w.other.git(&w.clone, &["status", "--porcelain"]);
    assert_eq!(status.stdout.trim(), "", "{}", status.all());
    assert!(
        w.other
            .agent_log()
            .contains("LFS files checked out written=1 as_downloaded=0"),
        "{}",
        tail(&w.other.agent_log(), 20)
    );
}
