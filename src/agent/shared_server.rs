//! Agents sharing one private server for a directory store.
//!
//! git-lfs runs up to `lfs.concurrenttransfers` agent processes. A directory store opened in
//! each of them would be held for a whole transfer by one process at a time (its index allows
//! one writer process), so the agents share one `git xet serve` on the directory instead: the
//! first agent that needs it starts it (`serve --announce`, loopback, a token it makes up,
//! announced in `DIR/local-server.json`, see [`xet_store::announce`]), and every agent
//! talks to it like to any standalone HTTP endpoint. The server stops by itself
//! [`IDLE_EXIT`] after its last connection closes, which is soon after the last agent exits.
//!
//! Failure modes: if the server cannot be started or does not answer within
//! [`START_PATIENCE`], the agent opens the store itself as before (and waits its turn). A
//! server killed mid-transfer fails that transfer like any unreachable endpoint; the agent's
//! next transfer starts a new one. `GIT_XET_LOCAL_SERVER=0` turns the sharing off.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xet_store::announce::{self, Announce};

/// Set to `0` to open a directory store in every agent process instead of sharing a server.
pub(crate) const ENABLE_ENV: &str = "GIT_XET_LOCAL_SERVER";

/// How long the shared server stays after its last connection closed.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(2);

/// How long an agent waits for a shared server to answer before opening the store itself.
pub(crate) const START_PATIENCE: Duration = Duration::from_secs(20);

/// The server's log, in the store directory, started afresh when it passes this size.
const LOG_FILE: &str = "local-server.log";
const LOG_MAX: u64 = 1 << 20;

/// Why the shared server of a store cannot be had (the agent then opens the store itself).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocalServerError {
    #[error("cannot find the git-xet program to start a server: {0}")]
    NoProgram(#[source] std::io::Error),
    #[error("cannot create the store {}: {source}", dir.display())]
    CreateStore {
        dir: std::path::PathBuf,
        #[source]
        source: Box<xet_store::StoreError>,
    },
    #[error("cannot write {}: {source}", path.display())]
    Log {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start a server for the store {}: {source}", dir.display())]
    Spawn {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the private server of the store {} did not answer within {} s (its log is {})",
        dir.display(),
        START_PATIENCE.as_secs(),
        dir.join(LOG_FILE).display()
    )]
    NoAnswer { dir: std::path::PathBuf },
}

/// Whether agents share a server for a directory store (the default).
pub(crate) fn enabled() -> bool {
    // A build without the server (feature `server`) has none to start.
    cfg!(feature = "server") && super::environment::var(ENABLE_ENV).is_none_or(|v| v.trim() != "0")
}

/// The shared server of the store in `dir`: the one announced there if it answers, else one
/// started now (several agents may start one at once; the store's lock lets one win, and
/// everyone uses the winner's announcement).
pub(crate) fn connect_or_start(dir: &Path) -> Result<Announce, LocalServerError> {
    let deadline = Instant::now() + START_PATIENCE;
    let mut child: Option<Child> = None;
    let mut next_start = Instant::now();
    let mut backoff = Duration::from_millis(100);
    loop {
        if let Some(a) = announce::read(dir) {
            if answers(&a.url) {
                xet_protocol::redact::register_secret(&a.token);
                return Ok(a);
            }
        }
        // Ours exited: another server holds the store (its announcement is coming), or a
        // process that opened the store itself does; try again a little later.
        if let Some(c) = child.as_mut() {
            if matches!(c.try_wait(), Ok(Some(_))) {
                child = None;
                next_start = Instant::now() + backoff;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
        if child.is_none() && Instant::now() >= next_start {
            child = Some(start(dir)?);
        }
        if Instant::now() >= deadline {
            return Err(LocalServerError::NoAnswer {
                dir: dir.to_path_buf(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a git-xet server answers at `url` (loopback only: the token goes nowhere else).
fn answers(url: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return false;
    };
    let loopback = parsed.host_str().is_some_and(|h| {
        h.trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
    });
    if !loopback {
        return false;
    }
    let Ok(client) = xet_client::remote::OneShotClient::for_url(
        &xet_client::remote::HttpOptions::default(),
        url,
        Duration::from_secs(2),
        false,
    ) else {
        return false;
    };
    client
        .send(client.get(&format!("{url}/health")), 64 << 10)
        .ok()
        .filter(|r| r.status.is_success())
        .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok())
        .is_some_and(|v| v["status"] == "ok" && v.get("files").is_some())
}

/// Starts `git-xet serve --announce` on `dir`, detached: no stdin or stdout (git-lfs waits for
/// the agent's stdout to close), stderr to the store's `local-server.log`, its own process
/// group (a terminal's Ctrl-C stops the agents; the server then stops when idle).
fn start(dir: &Path) -> Result<Child, LocalServerError> {
    let exe = std::env::current_exe().map_err(LocalServerError::NoProgram)?;
    // An upload to a new store: create it first (a store is only made in an empty directory,
    // and the server's log goes into it).
    if !dir
        .join(crate::agent::settings::STORE_VERSION_FILE)
        .exists()
    {
        match xet_store::Store::open(dir) {
            Ok(store) => drop(store),
            // Another agent (or its server) has it open: it exists now.
            Err(e) if e.is_locked() => {}
            Err(e) => {
                return Err(LocalServerError::CreateStore {
                    dir: dir.to_path_buf(),
                    source: Box::new(e),
                })
            }
        }
    }
    let log_path = dir.join(LOG_FILE);
    if std::fs::metadata(&log_path).is_ok_and(|m| m.len() > LOG_MAX) {
        let _ = std::fs::remove_file(&log_path);
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| LocalServerError::Log {
            path: log_path.clone(),
            source: e,
        })?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg("--data")
        .arg(dir)
        .args(["--listen", "127.0.0.1:0", "--announce", "--idle-exit"])
        .arg(format!("{}", IDLE_EXIT.as_secs_f64()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        // Its tokens are its own; requests are not worth a log line each.
        .env_remove("GIT_XET_TOKEN")
        .env_remove("GIT_XET_READ_TOKEN")
        .env("RUST_LOG", "warn");
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd.spawn().map_err(|e| LocalServerError::Spawn {
        dir: dir.to_path_buf(),
        source: e,
    })?;
    tracing::debug!(store = %dir.display(), pid = child.id(), "started the store's private server");
    Ok(child)
}
