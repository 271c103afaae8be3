//! The announcement of the private server that agents share for a directory store.
//!
//! An agent process holding a directory store for a whole transfer makes the others wait, so
//! in standalone mode with a directory endpoint the agents instead share one `git xet serve`
//! on that directory, started by the first agent that needs it (see `agent::shared_server`). It
//! listens on loopback with a write token it made up, and says where in
//! `DIR/local-server.json` (mode 0600, like the store's own `server.key`):
//!
//! | field | meaning |
//! |---|---|
//! | `url` | `http://127.0.0.1:PORT` |
//! | `token` | the write token (only this user can read the file) |
//! | `pid` | the server's process id |
//!
//! The server removes the file when it stops; a file left by a killed server names a port
//! nothing answers on, which readers detect.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's name in the store directory.
pub(crate) const ANNOUNCE_FILE: &str = "local-server.json";

/// Where a shared private server of a store listens, and its token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announce {
    pub url: String,
    pub token: String,
    pub pid: u32,
}

impl std::fmt::Debug for Announce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Announce")
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .field("pid", &self.pid)
            .finish()
    }
}

/// The announcement file of the store in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(ANNOUNCE_FILE)
}

/// Reads the announcement in `dir`, if there is a readable, well-formed one.
pub fn read(dir: &Path) -> Option<Announce> {
    let text = std::fs::read(path(dir)).ok()?;
    if text.len() > 4096 {
        return None;
    }
    serde_json::from_slice(&text).ok()
}

/// Writes `announce` to `dir` atomically, readable by this user only.
pub fn write(dir: &Path, announce: &Announce) -> std::io::Result<()> {
    let json = serde_json::to_vec(announce).map_err(std::io::Error::other)?;
    // Mode 0600, the temporary file's.
    xet_protocol::util::fs::AtomicWrite::new()
        .temp_name(".local-server", "")
        .durable()
        .write(&path(dir), &json)
}

/// Removes the announcement in `dir` if it is still the one of process `pid`.
pub fn withdraw(dir: &Path, pid: u32) {
    if read(dir).is_some_and(|a| a.pid == pid) {
        let _ = std::fs::remove_file(path(dir));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_privately_read_back_and_withdrawn_only_by_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), None);
        let a = Announce {
            url: "http://127.0.0.1:4000".into(),
            token: "t".repeat(64),
            pid: 42,
        };
        write(dir.path(), &a).unwrap();
        assert_eq!(read(dir.path()), Some(a.clone()));
        assert!(
            !format!("{a:?}").contains("tttt"),
            "the token is not printed"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "mode {mode:o}");
        }
        withdraw(dir.path(), 41);
        assert!(read(dir.path()).is_some(), "another process's file stays");
        withdraw(dir.path(), 42);
        assert_eq!(read(dir.path()), None);
        std::fs::write(path(dir.path()), b"{not json").unwrap();
        assert_eq!(read(dir.path()), None);
    }
}
