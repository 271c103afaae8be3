//! The local shard cache: shards of our own uploads and the server's global-dedup answers, kept
//! on disk per endpoint so that later uploads (in this process or another) deduplicate against
//! them without asking the server (docs/format.md §5.3).
//!
//! # Where
//!
//! `<cache root>/shards/<endpoint key>/<shard hash>.mdb`, where the cache root is
//! `$GIT_XET_CACHE_DIR` if set, else the user's cache directory for git-xet (the `directories`
//! crate: `~/.cache/git-xet` on Linux, `~/Library/Caches/git-xet` on macOS,
//! `%LOCALAPPDATA%\git-xet\cache` on Windows). The endpoint key ([`ShardCache::endpoint_key`]) is
//! a readable, filesystem-safe name plus 16 hex digits of the SHA-256 of the endpoint, so two
//! endpoints never share a directory.
//!
//! # Files
//!
//! Every shard is stored in the complete form with all three lookup tables (docs/format.md §4.6)
//! and named by its hash (§4.10), whatever form it arrived in: an upload-form shard we
//! registered, or a dedup answer (keyed or not, with its key and expiry in the footer).
//! Writes go to `.<random>.mdb_temp` in the same directory, are fsynced and renamed into place,
//! so a reader never sees half a shard, and two processes writing the same shard write the same
//! bytes under the same name.
//!
//! # Lookups
//!
//! [`ShardCache::lookup`] builds an in-memory index on its first call from the header, footer
//! and chunk lookup table of every cached shard (not the whole shards): the sorted truncated
//! chunk hashes with the shard each belongs to. A lookup then costs a binary search for the raw
//! hash and one per HMAC key of a non-expired keyed shard (after keying the hash, §1.8); only a
//! candidate is read from disk, verified against its file name and parsed in full, and the
//! last few shards read are kept in memory. Shards this process inserts are added to the index.
//! **Shards other processes write after the index was built are not seen** by this
//! `ShardCache` (a new one, e.g. for the next upload, sees them).
//!
//! Keyed shards are skipped once `now > shard_key_expiry`, and deleted 7 days after that
//! ([`EXPIRY_BUFFER_SECS`], xet-core's `MDB_SHARD_EXPIRATION_BUFFER`).
//!
//! # Size
//!
//! Each endpoint directory is limited to [`ShardCache::max_bytes`] (default
//! [`DEFAULT_MAX_BYTES`], 1 GiB; [`CacheConfig::shard_max_bytes`], which the agent takes from `$GIT_XET_CACHE_MAX_SIZE`).
//! A hit or an insert sets the file's modification time to now; when an insert takes the
//! directory over the limit, the least recently used shards are deleted until it is at 90% of it.
//! Pruning tolerates files that other processes delete or add under it.
//!
//! # Damage
//!
//! A file that is truncated, corrupt or does not match its name is removed with a warning
//! (`tracing::warn!`) when it is met; it never fails a lookup.

mod files;
mod index;
mod prune;
#[cfg(test)]
mod tests;

use files::*;
pub use files::{Claim, CLAIMS_SUBDIR};
use index::*;
use prune::*;

use std::fs::{self};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use sha2::Digest as _;

use xet_format::shard::ShardError;
use xet_format::ShardHash;
use xet_protocol::util::sync::LockAnyway as _;

/// The default size limit of each endpoint directory: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// How long after its key expired a keyed shard is deleted (xet-core's
/// `MDB_SHARD_EXPIRATION_BUFFER`, 7 days).
pub const EXPIRY_BUFFER_SECS: u64 = 7 * 24 * 3600;
/// The directory under the cache root that holds the endpoint directories.
pub const SHARDS_SUBDIR: &str = "shards";

const TEMP_SUFFIX: &str = ".mdb_temp";
/// Temporary files older than this are left over from a crash and deleted by pruning.
const STALE_TEMP: Duration = Duration::from_secs(3600);
/// How many parsed shards a cache keeps in memory, and how many chunk entries at most in all
/// (about 64 MiB of model; a single larger shard is still kept).
const LOADED_CAPACITY: usize = 16;
const LOADED_MAX_CHUNKS: usize = 1 << 20;

/// A failed cache operation. Every variant names the file or directory involved.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(
        "cannot find a cache directory for git-xet (no home directory); set GIT_XET_CACHE_DIR"
    )]
    NoCacheDir,
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What failed, e.g. "cannot read".
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: not a usable cached shard: {source}", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: ShardError,
    },
    #[error("{}: damaged, its content hashes to {actual}", path.display())]
    WrongName { path: PathBuf, actual: ShardHash },
    #[error("cannot serialise a shard for the cache in {}: {source}", dir.display())]
    Serialize {
        dir: PathBuf,
        #[source]
        source: ShardError,
    },
    #[error("invalid size {value:?} (from {origin}): expected a number of bytes with an optional K, M, G or T suffix, e.g. 500M")]
    InvalidSize { value: String, origin: String },
}

impl CacheError {
    fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CacheError + 'a {
        move |source| CacheError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// True when the error is a damaged cached file (which is then deleted).
    fn is_damage(&self) -> bool {
        matches!(
            self,
            CacheError::Corrupt { .. } | CacheError::WrongName { .. }
        )
    }

    /// True when the error is a file that vanished (another process deleted it).
    fn is_not_found(&self) -> bool {
        matches!(self, CacheError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// What one endpoint directory holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStats {
    pub dir: PathBuf,
    /// Number of cached shard files.
    pub shards: u64,
    /// Their total size.
    pub bytes: u64,
}

/// What a prune (or clear) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PruneReport {
    /// Shards deleted, and their bytes (expired, damaged or least recently used).
    pub removed_shards: u64,
    pub removed_bytes: u64,
    /// Shards left, and their bytes.
    pub kept_shards: u64,
    pub kept_bytes: u64,
}

/// A cached shard file seen by a directory scan.
struct Entry {
    path: PathBuf,
    hash: ShardHash,
    len: u64,
    mtime: SystemTime,
}

/// Where the client's caches live and how large each may grow, per endpoint. The agent's
/// settings make it from the environment (`lfs::settings::cache_config`); this layer reads
/// none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// The cache root: `shards/` and `chunks/` are under it.
    pub root: PathBuf,
    /// The shard cache limit per endpoint.
    pub shard_max_bytes: u64,
    /// The download chunk cache limit per endpoint; 0 turns it off.
    pub chunk_max_bytes: u64,
}

impl CacheConfig {
    /// The default limits under `root`.
    pub fn under(root: PathBuf) -> Self {
        Self {
            root,
            shard_max_bytes: DEFAULT_MAX_BYTES,
            chunk_max_bytes: crate::chunk_cache::DEFAULT_MAX_BYTES,
        }
    }

    /// The user's cache directory for git-xet.
    pub fn default_root() -> Result<PathBuf, CacheError> {
        directories::ProjectDirs::from("", "", "git-xet")
            .map(|d| d.cache_dir().to_path_buf())
            .ok_or(CacheError::NoCacheDir)
    }
}

/// The shard cache of one endpoint. See the module documentation.
#[derive(Debug)]
pub struct ShardCache {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
}

impl ShardCache {
    /// The cache of `endpoint` (a CAS URL or a local store directory) under the root of
    /// `config`, limited to its shard limit. A local directory that exists is made absolute
    /// first, so that every spelling of it shares one cache. Creates nothing until a shard is
    /// inserted.
    pub fn for_endpoint(config: &CacheConfig, endpoint: &str) -> ShardCache {
        let normalized = if endpoint.contains("://") {
            endpoint.to_string()
        } else {
            fs::canonicalize(endpoint)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| endpoint.to_string())
        };
        let dir = config
            .root
            .join(SHARDS_SUBDIR)
            .join(Self::endpoint_key(&normalized));
        Self::open(&dir).with_max_bytes(config.shard_max_bytes)
    }

    /// The cache in `dir` (created on the first insert), limited to [`DEFAULT_MAX_BYTES`].
    pub fn open(dir: &Path) -> ShardCache {
        ShardCache {
            dir: dir.to_path_buf(),
            max_bytes: DEFAULT_MAX_BYTES,
            state: Mutex::new(State::default()),
        }
    }

    /// Sets the size limit.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> ShardCache {
        self.max_bytes = max_bytes;
        self
    }

    /// The caches of every endpoint under `root` (a cache root, [`CacheConfig::root`]), sorted
    /// by directory name; none if `root/shards` does not exist.
    pub fn all_under(root: &Path) -> Result<Vec<ShardCache>, CacheError> {
        let shards = root.join(SHARDS_SUBDIR);
        let entries = match fs::read_dir(&shards) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(CacheError::io("cannot list", &shards)(e)),
        };
        let mut dirs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(CacheError::io("cannot list", &shards))?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
        }
        dirs.sort();
        Ok(dirs.iter().map(|d| ShardCache::open(d)).collect())
    }

    /// The directory name of an endpoint: its host (for a URL, without user info, lowercased)
    /// or last path component (for a directory), reduced to `[A-Za-z0-9._-]` and at most 40
    /// characters, then `-` and the first 16 hex digits of the SHA-256 of the endpoint (URL
    /// scheme and host lowercased, user info and trailing slashes removed).
    pub fn endpoint_key(endpoint: &str) -> String {
        let e = endpoint.trim();
        let e = match e.trim_end_matches(['/', '\\']) {
            "" => e,
            trimmed => trimmed,
        };
        let (readable, hashed) = match e.split_once("://") {
            Some((scheme, rest)) => {
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let host = crate::url::without_userinfo(authority).to_ascii_lowercase();
                let hashed = format!("{}://{host}{path}", scheme.to_ascii_lowercase());
                let readable = if host.is_empty() {
                    last_component(path).to_string()
                } else {
                    host
                };
                (readable, hashed)
            }
            None => (last_component(e).to_string(), e.to_string()),
        };
        let mut name: String = readable
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        // No hidden directories, no `.` or `..`.
        name = name.trim_start_matches('.').to_string();
        if name.is_empty() {
            name = "endpoint".into();
        }
        let digest = sha2::Sha256::digest(hashed.as_bytes());
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!("{name}-{hex}")
    }

    /// The directory of this cache.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The size limit.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock_anyway()
    }
}

fn last_component(path: &str) -> &str {
    path.rsplit(['/', '\\'])
        .find(|c| !c.is_empty())
        .unwrap_or(path)
}
