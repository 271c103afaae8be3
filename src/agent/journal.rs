//! The transfer journal: one JSON line per object the agent uploaded or downloaded, in
//! `<git common dir>/xet/transfers.jsonl`, so that `git xet ls-files` can show each LFS file's
//! Xet hash, how much of it was deduplicated, the bytes that crossed the wire and those a
//! download took from this machine instead, without asking the server (and `git xet status`
//! and `git xet push-summary` add them up). The fields are described in docs/guide.md ("The
//! transfer journal").
//!
//! Several agent processes append at once. Each record is written with a single `write` on a
//! file opened with `O_APPEND`, so lines never interleave on local filesystems. Readers skip
//! lines they cannot parse (a torn last line after a crash, a future format), and a later
//! record for the same oid replaces an earlier one. Endpoints are written redacted.
//!
//! The journal is compacted when it grows past [`COMPACT_AT`]: an agent that opens it while no
//! other holds it rewrites it with the one record per oid that [`read`] keeps (old pushes' lines
//! go; `git xet push-summary` then counts by time). Appenders hold a shared lock on
//! `transfers.lock` for as long as they write, the compactor the exclusive one, so no record is
//! appended to a file that is being replaced.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use xet_format::{FileHash, LfsOid};

/// What was done with an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Upload,
    Download,
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub direction: Direction,
    /// The LFS oid (SHA-256; 64 hex digits in the file).
    pub oid: LfsOid,
    /// The Xet file hash (the Xet string form in the file).
    pub xet_hash: FileHash,
    pub size: u64,
    /// Bytes of the file found already stored (uploads).
    #[serde(default)]
    pub dedup_bytes: u64,
    /// Bytes on the wire: xorb bytes as stored (compressed, chunk headers included) sent to the
    /// endpoint (uploads; an attempt that had to be repeated included) or fetched from it
    /// (downloads; every attempt). For a directory store, the bytes written to or read from
    /// it. Records written before `reused_bytes` existed counted a download's file bytes not
    /// copied from earlier versions here instead, chunk cache reads included.
    #[serde(default)]
    pub transferred_bytes: u64,
    /// Bytes of the file matched against an earlier version of it (from the history):
    /// deduplicated through it (uploads, part of `dedup_bytes`; the version on this machine or
    /// listed by the endpoint) or copied from it (downloads; a copy on this machine, part of
    /// `reused_bytes`).
    #[serde(default)]
    pub history_bytes: u64,
    /// Bytes of the file a download took from this machine instead of the endpoint: copied
    /// from earlier versions (`history_bytes`), read from the download chunk cache, or kept
    /// from an interrupted download's partial file. Always 0 for uploads, and in records
    /// written before this field existed.
    #[serde(default)]
    pub reused_bytes: u64,
    /// Where the object went or came from (URL or directory).
    #[serde(default)]
    pub endpoint: String,
    /// Unix seconds.
    #[serde(default)]
    pub time: u64,
}

impl Record {
    /// Bytes of the file a download took from this machine ([`Record::reused_bytes`]; at
    /// least the copies from earlier versions, which records written before `reused_bytes`
    /// existed count only in `history_bytes`); 0 for uploads.
    pub fn reused(&self) -> u64 {
        match self.direction {
            Direction::Download => self.reused_bytes.max(self.history_bytes),
            Direction::Upload => 0,
        }
    }

    /// A record stamped with the current time.
    pub fn new(direction: Direction, oid: &LfsOid, xet_hash: &FileHash, size: u64) -> Self {
        Self {
            direction,
            oid: *oid,
            xet_hash: *xet_hash,
            size,
            dedup_bytes: 0,
            transferred_bytes: 0,
            history_bytes: 0,
            reused_bytes: 0,
            endpoint: String::new(),
            time: xet_protocol::util::now_unix(),
        }
    }
}

/// The journal file of a repository whose common git directory is `common_dir`.
pub fn path(common_dir: &Path) -> PathBuf {
    common_dir.join("xet").join("transfers.jsonl")
}

/// Appends `record` to the journal (creating it), its endpoint redacted ([`xet_protocol::redact`]: a
/// password in an endpoint URL never lands in the journal).
pub fn append(common_dir: &Path, record: &Record) -> std::io::Result<()> {
    Appender::open(common_dir)?.append(record)
}

/// A journal larger than this is compacted by the next agent that opens it alone (about
/// 100,000 records).
pub(crate) const COMPACT_AT: u64 = 32 << 20;

/// The journal kept open for appending: an agent records every object of its transfers
/// through one. Each record is one `write` of a whole line to a file opened for appending, so
/// lines of several agents never interleave.
pub(crate) struct Appender {
    file: std::fs::File,
    /// The shared lock on `transfers.lock`, held while the journal is open (`None` where the
    /// filesystem has no locks).
    _lock: Option<std::fs::File>,
}

impl Appender {
    /// Opens (creating) the journal of the repository whose common git directory is
    /// `common_dir`, compacting it first if it is over [`COMPACT_AT`] and nobody else has it
    /// open.
    pub fn open(common_dir: &Path) -> std::io::Result<Self> {
        Self::open_compacting_at(common_dir, COMPACT_AT)
    }

    fn open_compacting_at(common_dir: &Path, compact_at: u64) -> std::io::Result<Self> {
        let file = path(common_dir);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(file.with_file_name("transfers.lock"))
            .ok();
        if let Some(lock) = &lock {
            if lock.try_lock().is_ok() {
                let big = std::fs::metadata(&file).is_ok_and(|m| m.len() > compact_at);
                if big {
                    if let Err(e) = compact(common_dir) {
                        tracing::warn!(path = %file.display(), "cannot compact the transfer journal: {e}");
                    }
                }
                let _ = lock.unlock();
            }
        }
        // Shared with the other appenders; waits while one compacts. A filesystem without
        // locks gets no lock (and no compaction).
        let lock = lock.filter(|l| l.lock_shared().is_ok());
        let file = OpenOptions::new().create(true).append(true).open(&file)?;
        Ok(Self { file, _lock: lock })
    }

    /// Appends `record`, its endpoint redacted.
    pub fn append(&mut self, record: &Record) -> std::io::Result<()> {
        let record = Record {
            endpoint: xet_protocol::redact::redact(&record.endpoint),
            ..record.clone()
        };
        let mut line = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)
    }
}

/// The latest record per oid (uploads win over downloads of the same content, since they say
/// how much was deduplicated). A missing journal is empty.
pub fn read(common_dir: &Path) -> std::io::Result<HashMap<LfsOid, Record>> {
    let text = match std::fs::read_to_string(path(common_dir)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(e),
    };
    let mut out: HashMap<LfsOid, Record> = HashMap::new();
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<Record>(line) else {
            continue;
        };
        let replace = match out.get(&record.oid) {
            Some(old) => {
                record.direction == Direction::Upload || old.direction == Direction::Download
            }
            None => true,
        };
        if replace {
            out.insert(record.oid, record);
        }
    }
    Ok(out)
}

/// Rewrites the journal with the records [`read`] keeps, oldest first (a temporary file
/// renamed over it). The caller holds the exclusive lock.
fn compact(common_dir: &Path) -> std::io::Result<()> {
    let mut records: Vec<Record> = read(common_dir)?.into_values().collect();
    records.sort_by_key(|r| r.time);
    let file = path(common_dir);
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    {
        let mut out = std::io::BufWriter::new(tmp.as_file_mut());
        for record in &records {
            serde_json::to_writer(&mut out, record).map_err(std::io::Error::other)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(&file).map_err(|e| e.error)?;
    Ok(())
}

/// Every record written at `since` (unix seconds) or later and appended after the journal was
/// `after_byte` bytes long, in order (a push's records, for its summary: the pre-push hook notes
/// the journal's length before the push). A journal shorter than `after_byte` was replaced, and
/// all of it counts. A missing journal is empty.
pub(crate) fn read_since(
    common_dir: &Path,
    since: u64,
    after_byte: u64,
) -> std::io::Result<Vec<Record>> {
    let bytes = match std::fs::read(path(common_dir)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let start = usize::try_from(after_byte)
        .ok()
        .filter(|&n| n <= bytes.len())
        .unwrap_or(0);
    Ok(String::from_utf8_lossy(&bytes[start..])
        .lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter(|r| r.time >= since)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_past_its_limit_is_compacted_by_an_agent_that_has_it_alone() {
        let dir = tempfile::tempdir().unwrap();
        let hash = FileHash::from_hex(&"cd".repeat(32)).unwrap();
        let oids: Vec<LfsOid> = (0..20u8)
            .map(|i| LfsOid::from_hex(&format!("{i:02x}").repeat(32)).unwrap())
            .collect();
        {
            let mut j = Appender::open(dir.path()).unwrap();
            for round in 0..5 {
                for oid in &oids {
                    let direction = if round == 2 {
                        Direction::Upload
                    } else {
                        Direction::Download
                    };
                    let mut r = Record::new(direction, oid, &hash, 10);
                    r.time = round;
                    j.append(&r).unwrap();
                }
            }
        }
        let before = read(dir.path()).unwrap();
        let len = || std::fs::metadata(path(dir.path())).unwrap().len();
        let big = len();

        // Another agent has it open: no compaction.
        let other = Appender::open(dir.path()).unwrap();
        drop(Appender::open_compacting_at(dir.path(), 100).unwrap());
        assert_eq!(len(), big);
        drop(other);

        // Alone: one line per oid, the same records read back, and appends go on. (A process
        // another test forks at that moment holds the lock until it execs: try again then.)
        let mut j = Appender::open_compacting_at(dir.path(), 100).unwrap();
        for _ in 0..50 {
            if len() < big / 4 {
                break;
            }
            drop(j);
            std::thread::sleep(std::time::Duration::from_millis(20));
            j = Appender::open_compacting_at(dir.path(), 100).unwrap();
        }
        assert!(len() < big / 4, "{} of {big} bytes", len());
        assert_eq!(read(dir.path()).unwrap(), before);
        assert!(before.values().all(|r| r.direction == Direction::Upload));
        let late = LfsOid::from_hex(&"ee".repeat(32)).unwrap();
        j.append(&Record::new(Direction::Download, &late, &hash, 3))
            .unwrap();
        assert_eq!(read(dir.path()).unwrap().len(), oids.len() + 1);
        // Under the limit: left alone.
        drop(j);
        let now = len();
        drop(Appender::open(dir.path()).unwrap());
        assert_eq!(len(), now);
    }

    #[test]
    fn appends_and_reads_back_skipping_junk() {
        let dir = tempfile::tempdir().unwrap();
        let oid = LfsOid::from_hex(&"ab".repeat(32)).unwrap();
        let hash = FileHash::from_hex(&"cd".repeat(32)).unwrap();
        let mut up = Record::new(Direction::Upload, &oid, &hash, 10);
        up.dedup_bytes = 4;
        append(dir.path(), &up).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(path(dir.path()))
            .unwrap()
            .write_all(b"{not json\n")
            .unwrap();
        append(
            dir.path(),
            &Record::new(Direction::Download, &oid, &hash, 10),
        )
        .unwrap();
        let all = read(dir.path()).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[&oid], up, "the upload record is kept");

        // Endpoints are written redacted.
        let mut secret = Record::new(Direction::Upload, &oid, &hash, 10);
        secret.endpoint = "http://git:journal-secret@h:1".into();
        append(dir.path(), &secret).unwrap();
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(!text.contains("journal-secret"), "{text}");
        assert!(text.contains("http://git:***@h:1"), "{text}");
        assert!(read(&dir.path().join("missing")).unwrap().is_empty());
    }

    #[test]
    fn records_written_before_reused_bytes_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let oid = LfsOid::from_hex(&"ab".repeat(32)).unwrap();
        // A download as earlier versions wrote it: file bytes not copied counted as fetched.
        let old = serde_json::json!({
            "direction": "download",
            "oid": "ab".repeat(32),
            "xet_hash": "cd".repeat(32),
            "size": 1000,
            "transferred_bytes": 600,
            "history_bytes": 400,
            "endpoint": "http://h:1",
            "time": 5,
        });
        std::fs::create_dir_all(path(dir.path()).parent().unwrap()).unwrap();
        std::fs::write(path(dir.path()), format!("{old}\n")).unwrap();
        let got = &read(dir.path()).unwrap()[&oid];
        assert_eq!((got.transferred_bytes, got.reused_bytes), (600, 0));
        // What was copied from earlier versions counts as reused.
        assert_eq!(got.reused(), 400);

        // New records carry both, and an upload reuses nothing.
        let hash = FileHash::from_hex(&"cd".repeat(32)).unwrap();
        let mut down = Record::new(Direction::Download, &oid, &hash, 1000);
        down.transferred_bytes = 90;
        down.reused_bytes = 950;
        down.history_bytes = 400;
        append(dir.path(), &down).unwrap();
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(
            text.lines()
                .last()
                .unwrap()
                .contains("\"reused_bytes\":950"),
            "{text}"
        );
        assert_eq!(read(dir.path()).unwrap()[&oid].reused(), 950);
        let mut up = Record::new(Direction::Upload, &oid, &hash, 1000);
        up.history_bytes = 400;
        assert_eq!(up.reused(), 0);
    }

    #[test]
    fn read_since_takes_the_records_after_a_time_and_a_length() {
        let dir = tempfile::tempdir().unwrap();
        let oid = LfsOid::from_hex(&"ab".repeat(32)).unwrap();
        let hash = FileHash::from_hex(&"cd".repeat(32)).unwrap();
        let mut old = Record::new(Direction::Upload, &oid, &hash, 1);
        old.time = 100;
        append(dir.path(), &old).unwrap();
        let mark = std::fs::metadata(path(dir.path())).unwrap().len();
        let mut new = Record::new(Direction::Upload, &oid, &hash, 2);
        new.time = 100;
        append(dir.path(), &new).unwrap();

        // Same second: only the length tells them apart.
        let sizes = |since, after| -> Vec<u64> {
            read_since(dir.path(), since, after)
                .unwrap()
                .iter()
                .map(|r| r.size)
                .collect()
        };
        assert_eq!(sizes(100, 0), [1, 2]);
        assert_eq!(sizes(100, mark), [2]);
        assert_eq!(sizes(101, 0), Vec::<u64>::new());
        // A mark beyond the end (the journal was replaced since): all of it.
        assert_eq!(sizes(0, u64::MAX), [1, 2]);
        assert!(read_since(&dir.path().join("missing"), 0, 0)
            .unwrap()
            .is_empty());
    }
}
