//! Writing a download's bytes past the page cache, for an object that nothing reads soon.
//!
//! When `git xet pull` or `git xet clone` writes the work-tree file as the object lands
//! ([`super::mirror`]), every byte is written twice: into the object under `.git/lfs/objects`
//! and into the work-tree file. Both go through the page cache by default, where each is a copy
//! of the bytes into the kernel's memory and, a few seconds later, a write-out by the kernel's
//! flusher: on a machine of two cores, 8 GiB of dirty pages for a 4 GiB model, and the
//! flusher's work competing with the download's. Yet only the work-tree file is read soon
//! (by whoever loads the model); the object is read again only by `git lfs fsck` or a push of
//! a file git-lfs does not find elsewhere.
//!
//! [`DirectWrites`] writes the page-aligned middle of each write through a second descriptor
//! opened with `O_DIRECT`, and the unaligned head and tail through the file's own descriptor.
//! Every write is copied (the middle into an aligned buffer) and queued for the writer's own
//! thread, which makes them in order: the download's threads never wait for the device, nor for
//! the file's lock, which the filesystem holds while a direct write that allocates blocks is
//! under way (ext4 does). At most [`QUEUE`] writes wait; a download thread that finds the queue
//! full waits for room. A page is thus written one
//! way or the other by a given write; where two writes meet on a page both use the page cache,
//! and where a page is written both ways (a download started over with other piece
//! boundaries) the kernel keeps them coherent (a direct write writes out and drops the cached
//! page first). The first direct write that fails (a filesystem that refuses the alignment,
//! a full disk) is done again through the page cache, and all later ones go that way; a write
//! that fails that way too is reported by the next write and by [`DirectWrites::flush`], which
//! waits until every queued write is in the file: a caller flushes before it reads the file,
//! starts it over, or hands it on.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::pipeline::download::WriteAt;
use xet_protocol::util::sync::LockAnyway as _;

/// Alignment of direct writes: offsets, lengths and memory. A page: a multiple of the logical
/// block size of the devices git-xet meets (512 or 4096 bytes), and the page cache's unit, so
/// that the pages a write leaves to the page cache are never the ones it writes directly.
pub const ALIGN: usize = 4096;

/// The most bytes one direct write takes (the size of each aligned buffer).
const PIECE: usize = 1 << 20;

/// Writes waiting for the writer's thread, at most (direct ones hold a MiB each).
pub const QUEUE: usize = 8;

/// Aligned buffers kept for reuse, at most: enough for a full queue, the one being written and
/// one being filled by each of the download's threads, so that none is allocated (zeroed and
/// faulted in) again while the download runs.
const SPARE: usize = QUEUE + 1 + crate::pipeline::download::DOWNLOAD_WORKERS;

/// A write's aligned middle shorter than this goes through the page cache (one copy either way;
/// a direct write of a few pages waits for the device for little).
const MIN_DIRECT: u64 = 64 << 10;

/// See the module documentation.
#[derive(Debug)]
pub struct DirectWrites {
    shared: Arc<Shared>,
    /// Jobs for the writer's thread (`None` once dropped).
    jobs: Option<SyncSender<Job>>,
    writer: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    /// The file's own descriptor (a duplicate): heads, tails, small writes and fallbacks.
    cached: File,
    /// The `O_DIRECT` descriptor.
    direct: File,
    /// A direct write failed: the writer's thread writes through the page cache.
    stopped: AtomicBool,
    /// Aligned buffers not in use (each `PIECE + ALIGN` long, used from its first aligned byte).
    spare: Mutex<Vec<Vec<u8>>>,
    state: Mutex<Pending>,
    /// Signalled each time a queued write is done.
    done: Condvar,
}

#[derive(Debug, Default)]
struct Pending {
    /// Writes queued and not done yet.
    queued: usize,
    /// The first queued write that failed both ways.
    failed: Option<String>,
}

/// A write for the writer's thread: `len` bytes of `buffer` from `start`, at `offset`;
/// `direct`: aligned, for the direct descriptor.
struct Job {
    buffer: Vec<u8>,
    start: usize,
    len: usize,
    offset: u64,
    direct: bool,
}

impl Job {
    /// A write of a copy of `bytes` through the page cache.
    fn cached(bytes: &[u8], offset: u64) -> Self {
        Self {
            buffer: bytes.to_vec(),
            start: 0,
            len: bytes.len(),
            offset,
            direct: false,
        }
    }
}

impl DirectWrites {
    /// Direct writes to `file`, where its filesystem allows them; `None` where it does not (the
    /// caller writes through the page cache as before).
    pub fn open(file: &File) -> Option<Self> {
        let opened = xet_protocol::util::os::reopen_direct(file)
            .and_then(|direct| Ok((direct, file.try_clone()?)));
        match opened {
            Ok((direct, cached)) => Self::with(direct, cached),
            Err(e) => {
                tracing::debug!("writes go through the page cache: no direct writes here: {e}");
                None
            }
        }
    }

    /// Direct writes through `direct`, the rest through `cached` (two descriptors of one file).
    fn with(direct: File, cached: File) -> Option<Self> {
        let shared = Arc::new(Shared {
            cached,
            direct,
            stopped: AtomicBool::new(false),
            spare: Mutex::new(Vec::new()),
            state: Mutex::default(),
            done: Condvar::new(),
        });
        let (jobs, queue) = sync_channel::<Job>(QUEUE);
        let theirs = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("git-xet-direct-writes".into())
            .spawn(move || {
                for job in queue {
                    theirs.write(job);
                }
            });
        match writer {
            Ok(writer) => Some(Self {
                shared,
                jobs: Some(jobs),
                writer: Some(writer),
            }),
            Err(e) => {
                tracing::debug!("writes go through the page cache: no writer thread: {e}");
                None
            }
        }
    }

    /// Queues a write of all of `buf` at `offset` of the file: the page-aligned middle for
    /// direct writes, the rest through the page cache. An error if a queued write failed.
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.shared.failure()?;
        let align = ALIGN as u64;
        let end = offset.saturating_add(buf.len() as u64);
        let first = offset.div_ceil(align).saturating_mul(align);
        let last = end / align * align;
        if last <= first || last - first < MIN_DIRECT {
            return self.send(Job::cached(buf, offset));
        }
        // Both within `buf`: offset <= first < last <= end.
        let (head, rest) = buf.split_at((first - offset) as usize);
        let (middle, tail) = rest.split_at((last - first) as usize);
        if !head.is_empty() {
            self.send(Job::cached(head, offset))?;
        }
        let mut at = first;
        for piece in middle.chunks(PIECE) {
            self.send(self.aligned(piece, at))?;
            at += piece.len() as u64;
        }
        if !tail.is_empty() {
            self.send(Job::cached(tail, last))?;
        }
        Ok(())
    }

    /// A direct write of a copy of `piece` (aligned, at most `PIECE` long) in an aligned
    /// buffer.
    fn aligned(&self, piece: &[u8], offset: u64) -> Job {
        let mut buffer = self
            .shared
            .spare
            .lock_anyway()
            .pop()
            .unwrap_or_else(|| vec![0u8; PIECE + ALIGN]);
        let start = buffer.as_ptr().align_offset(ALIGN);
        if start >= ALIGN || piece.len() > PIECE {
            return Job::cached(piece, offset);
        }
        buffer[start..start + piece.len()].copy_from_slice(piece);
        Job {
            buffer,
            start,
            len: piece.len(),
            offset,
            direct: true,
        }
    }

    /// Queues `job` for the writer's thread (made here if the thread is gone).
    fn send(&self, job: Job) -> io::Result<()> {
        self.shared.state.lock_anyway().queued += 1;
        let sent = match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|e| e.0),
            None => Err(job),
        };
        if let Err(job) = sent {
            self.shared.write(job);
        }
        self.shared.failure()
    }

    /// Waits until every queued write is in the file; an error if one failed.
    pub fn flush(&self) -> io::Result<()> {
        let mut state = self.shared.state.lock_anyway();
        while state.queued > 0 {
            state = self
                .shared
                .done
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        drop(state);
        self.shared.failure()
    }

    /// Whether a direct write failed and writes now go through the page cache.
    pub fn stopped(&self) -> bool {
        self.shared.stopped.load(Ordering::Relaxed)
    }
}

impl Shared {
    /// Makes a queued write: directly if it is a direct one and direct writes have not failed,
    /// else (or after a failure) through the page cache.
    fn write(&self, job: Job) {
        let bytes = &job.buffer[job.start..job.start + job.len];
        let direct = if !job.direct {
            None
        } else if self.stopped.load(Ordering::Relaxed) {
            Some(Err(io::Error::other("direct writes stopped")))
        } else {
            Some(
                match std::os::unix::fs::FileExt::write_at(&self.direct, bytes, job.offset) {
                    Ok(n) if n == bytes.len() => Ok(()),
                    Ok(n) => Err(io::Error::other(format!(
                        "a direct write of {} bytes at {} wrote {n}",
                        bytes.len(),
                        job.offset
                    ))),
                    Err(e) => Err(e),
                },
            )
        };
        let cached = match direct {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => {
                if !self.stopped.swap(true, Ordering::Relaxed) {
                    tracing::debug!("a direct write failed; writing through the page cache: {e}");
                }
                WriteAt::write_all_at(&self.cached, bytes, job.offset)
            }
            None => WriteAt::write_all_at(&self.cached, bytes, job.offset),
        };
        let failed = cached.err().map(|e| {
            format!(
                "cannot write {} bytes at offset {}: {e}",
                bytes.len(),
                job.offset
            )
        });
        if job.direct {
            let mut spare = self.spare.lock_anyway();
            if spare.len() < SPARE {
                spare.push(job.buffer);
            }
        }
        let mut state = self.state.lock_anyway();
        state.queued = state.queued.saturating_sub(1);
        if state.failed.is_none() {
            state.failed = failed;
        }
        drop(state);
        self.done.notify_all();
    }

    /// The failure of a queued write, if one failed.
    fn failure(&self) -> io::Result<()> {
        match &self.state.lock_anyway().failed {
            Some(e) => Err(io::Error::other(e.clone())),
            None => Ok(()),
        }
    }
}

impl Drop for DirectWrites {
    /// Lets the writer's thread finish the queued writes, and waits for it.
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 131 % 251) as u8).collect()
    }

    fn contents(tmp: &tempfile::NamedTempFile) -> Vec<u8> {
        std::fs::read(tmp.path()).unwrap()
    }

    /// A file of `len` bytes in the system's temporary directory, and direct writes to it.
    /// Where its filesystem refuses `O_DIRECT` (a tmpfs before Linux 6.6), the "direct"
    /// descriptor is a plain one: the queue, the order of writes and the flushing are tested
    /// all the same.
    fn sized(len: usize) -> (tempfile::NamedTempFile, DirectWrites) {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.as_file().set_len(len as u64).unwrap();
        let direct = DirectWrites::open(tmp.as_file()).unwrap_or_else(|| {
            eprintln!("no O_DIRECT in the temporary directory: plain writes stand in");
            with(
                tmp.as_file().try_clone().unwrap(),
                tmp.as_file().try_clone().unwrap(),
            )
        });
        (tmp, direct)
    }

    /// Writes through `direct` whose direct descriptor is `direct` and whose cached one is
    /// `cached` (to make either fail).
    fn with(direct: File, cached: File) -> DirectWrites {
        DirectWrites::with(direct, cached).unwrap()
    }

    #[test]
    fn unaligned_writes_in_any_order_leave_every_byte_in_place() {
        let bytes = data(3 * PIECE + 12_345);
        let (tmp, direct) = sized(bytes.len());
        // Pieces of odd sizes, written back to front, one of them longer than a buffer, more
        // than the queue holds.
        let cuts = [0, 1000, 70_000, 70_001, 2 * PIECE + 777, bytes.len()];
        for w in cuts.windows(2).rev() {
            direct
                .write_all_at(&bytes[w[0]..w[1]], w[0] as u64)
                .unwrap();
        }
        direct.flush().unwrap();
        assert!(!direct.stopped(), "the filesystem took the direct writes");
        assert!(contents(&tmp) == bytes, "the file holds other bytes");
    }

    #[test]
    fn a_page_written_again_the_other_way_holds_the_last_bytes() {
        let len = 4 * MIN_DIRECT as usize;
        let (tmp, direct) = sized(len);
        // Aligned: direct. Then some of the same pages through the page cache (the unaligned
        // head of a write), then directly again.
        direct.write_all_at(&vec![1u8; len], 0).unwrap();
        direct.flush().unwrap();
        WriteAt::write_all_at(tmp.as_file(), &[2u8; 100], 10).unwrap();
        let expected = [&[1u8; 10][..], &[2u8; 100], &[1u8; 10]].concat();
        assert_eq!(&contents(&tmp)[..120], &expected[..]);
        direct.write_all_at(&vec![3u8; len], 0).unwrap();
        direct.flush().unwrap();
        assert!(
            contents(&tmp) == vec![3u8; len],
            "the last bytes written are not all there"
        );
    }

    #[test]
    fn dropping_it_lets_the_queued_writes_land() {
        let bytes = data(2 * PIECE);
        let (tmp, direct) = sized(bytes.len());
        direct.write_all_at(&bytes, 0).unwrap();
        drop(direct);
        assert!(contents(&tmp) == bytes, "queued writes were lost");
    }

    #[test]
    fn a_refused_direct_write_is_written_through_the_page_cache() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let bytes = data(2 * PIECE + 5 * MIN_DIRECT as usize);
        tmp.as_file().set_len(bytes.len() as u64).unwrap();
        // A "direct" descriptor open read-only: every direct write fails.
        let direct = with(
            File::open(tmp.path()).unwrap(),
            tmp.as_file().try_clone().unwrap(),
        );
        direct.write_all_at(&bytes, 0).unwrap();
        direct.flush().unwrap();
        assert!(direct.stopped());
        assert!(contents(&tmp) == bytes, "the file holds other bytes");
    }

    #[test]
    fn a_write_that_fails_both_ways_is_reported_by_flush_and_the_next_write() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let bytes = data(2 * PIECE);
        tmp.as_file().set_len(bytes.len() as u64).unwrap();
        // Both descriptors read-only: heads, tails and the fallback fail too.
        let direct = with(
            File::open(tmp.path()).unwrap(),
            File::open(tmp.path()).unwrap(),
        );
        // Aligned, so that only queued writes are tried (they fail on the writer's thread).
        let _ = direct.write_all_at(&bytes, 0);
        let err = direct.flush().unwrap_err();
        assert!(err.to_string().contains("cannot write"), "{err}");
        let again = direct.write_all_at(&bytes[..PIECE], 0).unwrap_err();
        assert!(again.to_string().contains("cannot write"), "{again}");
    }
}
