//! Starting a `git xet serve` in-process for tests: loopback, ephemeral port, a temporary store,
//! known tokens; it stops when the returned value is dropped.

use git_xet::server::auth::{Scope, Secret};
use git_xet::server::{RunningServer, ServeConfig, Server};

/// A read-write token every test server accepts.
pub const WRITE_TOKEN: &str = "test-write-token-0123456789";
/// A read-only token every test server accepts.
pub const READ_TOKEN: &str = "test-read-token-0123456789";

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
}

/// Starts a server on 127.0.0.1:0 with a fresh store, tuned by `configure`.
pub fn start_with(configure: impl FnOnce(&mut ServeConfig)) -> TestServer {
    let dir = tempfile::tempdir().expect("temp dir");
    let secrets = vec![
        Secret::new(WRITE_TOKEN, Scope::Write, "test").unwrap(),
        Secret::new(READ_TOKEN, Scope::Read, "test").unwrap(),
    ];
    let mut config = ServeConfig::new(dir.path().join("store"), secrets);
    // Bounded in time even if a test hangs: the server stops by itself.
    config.max_lifetime = Some(std::time::Duration::from_secs(600));
    configure(&mut config);
    let server = Server::spawn(config).expect("server starts");
    TestServer { server, dir }
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
        Secret::new(WRITE_TOKEN, Scope::Write, "test").unwrap(),
        Secret::new(READ_TOKEN, Scope::Read, "test").unwrap(),
    ];
    let mut config = ServeConfig::new(dir.path().join("store"), secrets);
    config.max_lifetime = Some(std::time::Duration::from_secs(600));
    let server = Server::spawn(config).expect("server restarts");
    TestServer { server, dir }
}
