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
