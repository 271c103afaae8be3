//! Running `git-xet transfer` directly, as git-lfs would: bytes on stdin, JSON replies on stdout,
//! bounded in time.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one run of the agent did.
#[derive(Debug)]
pub struct AgentRun {
    pub status: Option<i32>,
    /// Every stdout line, parsed as JSON (a line that is not JSON fails the test).
    pub replies: Vec<serde_json::Value>,
    pub stderr: String,
    pub elapsed: Duration,
}

impl AgentRun {
    /// The `complete` replies.
    pub fn completes(&self) -> Vec<&serde_json::Value> {
        self.replies
            .iter()
            .filter(|r| r["event"] == "complete")
            .collect()
    }

    /// The `peak_rss_kib` of the agent's exit log line.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let at = self.stderr.find("peak_rss_kib=")? + "peak_rss_kib=".len();
        let digits: String = self.stderr[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    }
}

/// Runs `cmd` (a `git-xet transfer` command, its environment set) with `input` on stdin and
/// collects what it wrote; fails the test if it runs for a minute. The agent may stop reading
/// early (after a fatal error): the broken pipe is expected then.
pub fn run_agent(mut cmd: Command, input: Vec<u8>) -> AgentRun {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr.read_to_end(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the agent did not finish within a minute");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    writer.join().unwrap();
    AgentRun {
        status,
        replies: out
            .join()
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect(),
        stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
        elapsed,
    }
}

/// A git repository (`repo/`) with a private, empty home, cache and agent log, for running
/// `git-xet transfer` and git in isolation.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    /// A fresh sandbox with `git init` done in its repository.
    pub fn new() -> Self {
        let s = Sandbox {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(s.home()).unwrap();
        std::fs::create_dir_all(s.repo()).unwrap();
        let ok = s.command("git").args(["init", "-q"]).status().unwrap();
        assert!(ok.success());
        s
    }

    pub fn home(&self) -> std::path::PathBuf {
        self.dir.path().join("home")
    }

    pub fn repo(&self) -> std::path::PathBuf {
        self.dir.path().join("repo")
    }

    /// The agent's log (`GIT_XET_LOG`), empty if there is none.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    /// `program` in the repository with a cleared environment: `PATH`, the private home, no
    /// system configuration, no prompts, the private cache, a debug log to `agent.log`.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.current_dir(self.repo())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.home().join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_XET_CACHE_DIR", self.dir.path().join("cache"))
            .env("GIT_XET_LOG", self.dir.path().join("agent.log"))
            .env("GIT_XET_LOG_LEVEL", "debug")
            .env("LC_ALL", "C");
        c
    }

    /// An object file of `len` bytes: (path, oid, size).
    pub fn object(&self, seed: u64, len: usize) -> (std::path::PathBuf, String, usize) {
        let data = super::splitmix64(seed, len);
        let path = self.dir.path().join(format!("object-{seed}"));
        std::fs::write(&path, &data).unwrap();
        (path, super::sha256_hex(&data), len)
    }
}
