//! Starting a `git xet serve` in-process for tests: loopback, ephemeral port, a temporary store,
//! known tokens; it stops when the returned value is dropped.

use git_xet::server::auth::{Scope, ServerToken};
use git_xet::server::{RunningServer, ServeConfig, Server};

/// A read-write token every test server accepts.
pub const WRITE_TOKEN: &str = "test-write-token-0123456789";
/// A read-only token every test server accepts.
pub const READ_TOKEN: &str = "test-read-token-0123456789";

/// Secrets for a server shared by teams: `(secret, scope, name, repository pattern)`; a
/// pattern of `None` makes a server-wide secret.
pub fn team_secrets(teams: &[(&str, Scope, &str, Option<&str>)]) -> Vec<ServerToken> {
    teams
        .iter()
        .map(|&(secret, scope, name, pattern)| {
            let s = ServerToken::new(secret, scope, name).unwrap();
            match pattern {
                Some(p) => s.scoped(git_xet::server::auth::RepoPattern::parse(p).unwrap()),
                None => s,
            }
        })
        .collect()
}

/// A running server and the directory holding its store (removed after the server stops).
pub struct TestServer {
    pub server: RunningServer,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> &str {
        &self.server.url
    }

    /// The store directory.
    pub fn store_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("store")
    }

    /// A number from the server's `/health` (`files`, `sent_xorb_bytes`, …).
    pub fn health(&self, field: &str) -> u64 {
        let h: serde_json::Value = reqwest::blocking::get(format!("{}/health", self.url()))
            .and_then(|r| r.json())
            .unwrap_or_else(|e| panic!("GET /health: {e}"));
        h[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no number {field:?} in /health: {h}"))
    }
}

/// Starts a server on 127.0.0.1:0 with a fresh store, tuned by `configure`.
pub fn start_with(configure: impl FnOnce(&mut ServeConfig)) -> TestServer {
    start_on_with(tempfile::tempdir().expect("temp dir"), configure)
}

/// Starts a server with the default configuration.
pub fn start() -> TestServer {
    start_with(|_| {})
}

/// Restarts a server on the same store directory (a new port), e.g. to check persistence.
pub fn restart(old: TestServer) -> TestServer {
    let TestServer { server, dir } = old;
    server.stop().expect("server stops cleanly");
    start_on(dir)
}

/// Starts a server on the store of a stopped one (a new port).
pub fn start_on(dir: tempfile::TempDir) -> TestServer {
    let secrets = vec![
        ServerToken::new(WRITE_TOKEN, Scope::Write, "test").unwrap(),
        ServerToken::new(READ_TOKEN, Scope::Read, "test").unwrap(),
    ];
    let mut config = ServeConfig::new(dir.path().join("store"), secrets);
    config.max_lifetime = Some(std::time::Duration::from_secs(600));
    let server = Server::spawn(config).expect("server restarts");
    TestServer { server, dir }
}

/// Starts a server on the store of a stopped one (a new port), tuned by `configure` as
/// [`start_with`] does (the test tokens are set before it runs).
pub fn start_on_with(
    dir: tempfile::TempDir,
    configure: impl FnOnce(&mut ServeConfig),
) -> TestServer {
    let secrets = vec![
        ServerToken::new(WRITE_TOKEN, Scope::Write, "test").unwrap(),
        ServerToken::new(READ_TOKEN, Scope::Read, "test").unwrap(),
    ];
    let mut config = ServeConfig::new(dir.path().join("store"), secrets);
    // Bounded in time even if a test hangs: the server stops by itself.
    config.max_lifetime = Some(std::time::Duration::from_secs(600));
    configure(&mut config);
    let server = Server::spawn(config).expect("server starts");
    TestServer { server, dir }
}

/// A `git-xet serve` child process (the built binary) on 127.0.0.1:0 with the test tokens and
/// a fresh store; killed when dropped. For tests that measure the process (memory, signals).
pub struct ServeProcess {
    pub child: std::process::Child,
    pub url: String,
    pub addr: std::net::SocketAddr,
    pub dir: tempfile::TempDir,
    /// The server's stderr (its log), written to a file.
    pub log: std::path::PathBuf,
}

impl ServeProcess {
    /// Starts the binary with `extra` arguments; it stops by itself after 300 s at the latest.
    pub fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_git-xet"));
        cmd.args(serve_args(&dir.path().join("store"))).args(extra);
        Self::from_command(cmd, dir)
    }

    /// Runs `cmd` (which must run `git-xet serve`, e.g. through a wrapper, with
    /// [`serve_args`]) and waits for its start-up line; `dir` is kept with the process.
    pub fn from_command(mut cmd: std::process::Command, dir: tempfile::TempDir) -> Self {
        use std::io::BufRead as _;
        let log = dir.path().join("serve.log");
        let mut child = cmd
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("git-xet serve starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("start-up line");
        let Some(url) = line
            .trim()
            .strip_prefix("listening on ")
            .map(str::to_string)
        else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "unexpected start-up line {line:?}; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        let addr = url
            .trim_start_matches("http://")
            .parse()
            .expect("a socket address");
        Self {
            child,
            url,
            addr,
            dir,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`), 0 if unreadable.
    pub fn status_kib(&self, field: &str) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Open file descriptors of the server (sockets, spool files, the store).
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Sends SIGTERM and waits at most `limit` for the process to exit; returns how long it
    /// took, or `None` (after killing it) if it did not exit in time.
    pub fn terminate(&mut self, limit: std::time::Duration) -> Option<std::time::Duration> {
        let started = std::time::Instant::now();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(sent, "kill -TERM {}", self.pid());
        while started.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Some(started.elapsed());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// Open sockets of the server (the listener and every connection).
    pub fn open_sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| {
                d.flatten()
                    .filter(|e| {
                        std::fs::read_link(e.path())
                            .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// Request bodies being spooled now (files `spool-*` in the store's `tmp/`).
    pub fn spool_files(&self) -> usize {
        std::fs::read_dir(self.dir.path().join("store/tmp"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("spool-"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The arguments of `git-xet serve` for a test: loopback, the test tokens, the store `data`, a
/// maximum lifetime of 300 s.
pub fn serve_args(data: &std::path::Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--max-lifetime",
        "300",
        "--token",
        WRITE_TOKEN,
        "--read-token",
        READ_TOKEN,
        "--data",
    ]
    .iter()
    .map(Into::into)
    .collect();
    args.push(data.into());
    args
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw TCP connection to a server, with 30 s read and write timeouts (a test never hangs on
/// it).
pub fn connect(addr: std::net::SocketAddr) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    s.set_write_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    s
}

/// Sends a GET of `target` and does not read the answer (a stalled reader).
pub fn stalled_get(
    addr: std::net::SocketAddr,
    target: &str,
    auth: Option<&str>,
) -> std::net::TcpStream {
    use std::io::Write as _;
    let mut s = connect(addr);
    let auth = auth
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {target} HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\n").unwrap();
    s
}

/// Sends an upload head declaring `declared` bytes of body, then `sent` bytes, then nothing (a
/// stalled writer).
pub fn stalled_upload(
    addr: std::net::SocketAddr,
    method: &str,
    target: &str,
    declared: u64,
    sent: usize,
) -> std::net::TcpStream {
    use std::io::Write as _;
    let mut s = connect(addr);
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {WRITE_TOKEN}\r\nContent-Length: {declared}\r\n\r\n"
    )
    .unwrap();
    s.write_all(&vec![0x5a; sent]).unwrap();
    s
}
