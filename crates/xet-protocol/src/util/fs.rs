//! Atomic file writes: a temporary file beside the target, filled, optionally synced and given
//! a mode, then renamed over the target (`tempfile`'s `persist`), so that a reader sees the old
//! content or the new, never part of it, and a crash leaves at most a temporary file behind.

use std::io::{self, Write};
use std::path::Path;

/// How [`AtomicWrite::write`] writes; see the module documentation.
#[derive(Debug, Clone)]
pub struct AtomicWrite<'a> {
    prefix: &'a str,
    suffix: &'a str,
    sync: bool,
    mode: Option<u32>,
}

impl Default for AtomicWrite<'_> {
    fn default() -> Self {
        Self {
            prefix: ".tmp-",
            suffix: "",
            sync: false,
            mode: None,
        }
    }
}

impl<'a> AtomicWrite<'a> {
    /// Temporary files named `.tmp-<random>`, not synced, mode 0600 (on unix).
    pub fn new() -> Self {
        Self::default()
    }

    /// The temporary file's name is `<prefix><random><suffix>` (so that cleaning can find
    /// leftovers).
    pub fn temp_name(mut self, prefix: &'a str, suffix: &'a str) -> Self {
        self.prefix = prefix;
        self.suffix = suffix;
        self
    }

    /// Syncs the file before the rename and the directory after it, so that the new content
    /// survives a power loss once `write` has returned.
    pub fn durable(mut self) -> Self {
        self.sync = true;
        self
    }

    /// The file's permissions (unix; ignored elsewhere). Without it, the temporary file's 0600.
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Writes `bytes` to `path`, replacing what is there. The temporary file is made in
    /// `path`'s directory (which must exist) and removed if anything fails.
    pub fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::Builder::new()
            .prefix(self.prefix)
            .suffix(self.suffix)
            .tempfile_in(dir)?;
        tmp.write_all(bytes)?;
        #[cfg(unix)]
        if let Some(mode) = self.mode {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        if self.sync {
            tmp.as_file().sync_all()?;
        }
        tmp.persist(path).map_err(|e| e.error)?;
        #[cfg(unix)]
        if self.sync {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_and_leave_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        AtomicWrite::new().write(&path, b"one").unwrap();
        AtomicWrite::new()
            .temp_name(".x", ".tmp")
            .durable()
            .write(&path, b"two")
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            AtomicWrite::new()
                .mode(0o755)
                .write(&path, b"#!/bin/sh\n")
                .unwrap();
            assert_eq!(mode(&path), 0o755);
        }
        // A missing directory is an error, and creates nothing.
        let err = AtomicWrite::new().write(&dir.path().join("no/f"), b"x");
        assert!(err.is_err());
        assert!(!dir.path().join("no").exists());
    }
}
