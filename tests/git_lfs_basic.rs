//! Real git and git-lfs with the standard `basic` transfer against an in-process `git xet serve`:
//! push, fresh clone, and an edited file whose push stores only the changed chunks.
//!
//! Isolation: every command runs with a cleared environment (`PATH` only, plus `HOME` in a
//! temporary directory, `GIT_CONFIG_NOSYSTEM=1`, `GIT_TERMINAL_PROMPT=0`), under a timeout. The
//! token reaches git-lfs through a credential helper in that `HOME`, as a user would set it up;
//! git-lfs first gets a 401 from the batch API and then asks the helper. Git objects go to a
//! bare repository on disk; `lfs.url` (and a committed `.lfsconfig`, which clones read) points
//! git-lfs at the server.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::server::{TestServer, WRITE_TOKEN};

const TIMEOUT: Duration = Duration::from_secs(180);

struct Env {
    root: tempfile::TempDir,
}

struct Output {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Env {
    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// Runs `program args` in `dir` with the isolated environment and a timeout.
    fn run_in(&self, dir: &Path, program: &str, args: &[&str]) -> Output {
        let out_path = self.root.path().join("cmd.out");
        let err_path = self.root.path().join("cmd.err");
        let mut child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.home().join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_LFS_SKIP_SMUDGE", "0")
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.code();
            }
            if started.elapsed() > TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{program} {args:?} timed out after {TIMEOUT:?}; stderr: {}",
                    std::fs::read_to_string(&err_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Output {
            status,
            stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
            stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        }
    }

    /// Runs a git command that must succeed.
    fn git(&self, dir: &Path, args: &[&str]) -> Output {
        let out = self.run_in(dir, "git", args);
        assert_eq!(
            out.status,
            Some(0),
            "git {args:?} failed\nstdout: {}\nstderr: {}",
            out.stdout,
            out.stderr
        );
        out
    }
}

/// Whether git and git-lfs are installed (skip, with a note, if not; fail under CI=true).
fn tools_available() -> bool {
    let ok = Command::new("git")
        .args(["lfs", "version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        let msg = "git or git-lfs is not installed";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{msg} (CI=true: failing instead of skipping)");
        }
        eprintln!("skipping: {msg}");
    }
    ok
}

fn stored_xorb_bytes(server: &TestServer) -> u64 {
    fn walk(p: &Path) -> u64 {
        std::fs::read_dir(p)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => walk(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(&server.store_dir().join("xorbs"))
}

fn registered_files(server: &TestServer) -> u64 {
    let h: serde_json::Value = reqwest::blocking::get(format!("{}/health", server.url()))
        .unwrap()
        .json()
        .unwrap();
    h["files"].as_u64().unwrap()
}

/// Output a push or clone must not contain: lock-API hints, warnings, prompts.
fn assert_quiet(what: &str, out: &Output) {
    let all = format!("{}\n{}", out.stdout, out.stderr).to_lowercase();
    for noise in ["warning", "locking", "locksverify", "error", "username for"] {
        assert!(!all.contains(noise), "{what} printed {noise:?}:\n{all}");
    }
}

#[test]
fn push_clone_and_dedup_with_stock_git_lfs() {
    if !tools_available() {
        return;
    }
    let server = common::server::start();
    let env = Env {
        root: tempfile::tempdir().unwrap(),
    };
    let root = env.root.path().to_path_buf();
    std::fs::create_dir_all(env.home()).unwrap();
    let helper = format!(
        "!f() {{ test \"$1\" = get && echo username=git && echo password={WRITE_TOKEN}; }}; f"
    );
    let home = env.home();
    env.git(&home, &["config", "--global", "user.name", "Test"]);
    env.git(
        &home,
        &["config", "--global", "user.email", "test@example.com"],
    );
    env.git(&home, &["config", "--global", "init.defaultBranch", "main"]);
    env.git(&home, &["config", "--global", "credential.helper", &helper]);
    env.git(&home, &["lfs", "install", "--skip-repo"]);

    let lfs_url = format!("{}/team/repo.git/info/lfs", server.url());
    env.git(&root, &["init", "--bare", "remote.git"]);
    env.git(&root, &["init", "work"]);
    let work = root.join("work");
    env.git(&work, &["lfs", "install", "--local"]);
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["config", "lfs.url", &lfs_url]);
    std::fs::write(
        work.join(".lfsconfig"),
        format!("[lfs]\n\turl = {lfs_url}\n"),
    )
    .unwrap();

    let big = common::splitmix64(11, 6 << 20);
    let small_a = common::splitmix64(12, 3000);
    let small_b = b"a small text file tracked by LFS\n".repeat(40);
    std::fs::write(work.join("big.bin"), &big).unwrap();
    std::fs::write(work.join("small-a.bin"), &small_a).unwrap();
    std::fs::write(work.join("small-b.bin"), &small_b).unwrap();
    std::fs::write(work.join("README.md"), "plain git file\n").unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "first"]);
    let pointer = env.git(&work, &["show", "HEAD:big.bin"]).stdout;
    assert!(
        pointer.starts_with("version https://git-lfs.github.com/spec/v1"),
        "{pointer}"
    );
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);

    let push = env.git(&work, &["push", "-q", "origin", "main"]);
    assert_quiet("the first push", &push);
    assert_eq!(registered_files(&server), 3, "three LFS objects registered");
    let locks = env
        .git(&work, &["config", "--get-regexp", "locksverify"])
        .stdout;
    assert!(
        locks.trim_end().ends_with("false"),
        "git-lfs turned lock verification off: {locks}"
    );
    let after_first = stored_xorb_bytes(&server);
    eprintln!(
        "first push: {} bytes of LFS content, {after_first} bytes of stored xorbs",
        big.len() + small_a.len() + small_b.len()
    );

    // A fresh clone smudges every file from the server.
    let clone_out = env.git(&root, &["clone", "-q", "remote.git", "clone"]);
    assert_quiet("the clone", &clone_out);
    let clone = root.join("clone");
    assert!(
        std::fs::read(clone.join("big.bin")).unwrap() == big,
        "big.bin differs"
    );
    assert_eq!(std::fs::read(clone.join("small-a.bin")).unwrap(), small_a);
    assert_eq!(std::fs::read(clone.join("small-b.bin")).unwrap(), small_b);
    assert_eq!(
        std::fs::read_to_string(clone.join("README.md")).unwrap(),
        "plain git file\n"
    );

    // Edit the large file in the middle: the push stores only the chunks around the edit.
    let mut edited = big.clone();
    for b in &mut edited[3 << 20..(3 << 20) + 64] {
        *b = !*b;
    }
    std::fs::write(work.join("big.bin"), &edited).unwrap();
    env.git(&work, &["commit", "-q", "-am", "edit big.bin"]);
    let push = env.git(&work, &["push", "-q", "origin", "main"]);
    assert_quiet("the second push", &push);
    assert_eq!(registered_files(&server), 4);
    let grown = stored_xorb_bytes(&server) - after_first;
    eprintln!(
        "edited push: file of {} bytes, store grew by {grown} bytes",
        edited.len()
    );
    assert!(
        grown * 16 < edited.len() as u64,
        "the store grew by {grown} bytes for a 64-byte edit of a {}-byte file",
        edited.len()
    );

    // The clone pulls the edit.
    let pull = env.git(&clone, &["pull", "-q", "--ff-only"]);
    assert_quiet("the pull", &pull);
    assert!(
        std::fs::read(clone.join("big.bin")).unwrap() == edited,
        "pulled big.bin differs"
    );
    let fsck = env.git(&clone, &["lfs", "fsck"]);
    assert!(fsck.stdout.contains("fsck OK"), "{}", fsck.stdout);
}
