//! The SHA-256 of a file written out of order, computed while its bytes land: git-lfs names an
//! object by that hash, and hashing a downloaded file again after its download is a second pass
//! over every byte.
//!
//! [`Sha256Landed`] is told of each write ([`Sha256Landed::landed`]). The bytes of a write that
//! continues the hashed prefix are hashed from memory by the writing thread; a write further on
//! is only noted, and its bytes are read back from the file (from the page cache, just
//! written) once the prefix reaches them. One thread hashes at a time; a thread that finds
//! another hashing leaves its write noted for it. [`Sha256Landed::finish`] reads and hashes what
//! no write reached (bytes a resumed download kept, writes left for a thread that had already
//! stopped). Writes are expected not to overlap; if they do, the hash is simply wrong, which
//! the caller's comparison with the object's name catches (then it hashes the file again).

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use sha2::Digest as _;
use xet_format::LfsOid;

use crate::pipeline::prior::read_exact_at;
use xet_protocol::util::sync::LockAnyway as _;

/// Bytes read back from the file at a time.
const READ_BACK: usize = 1 << 20;

/// See the module documentation.
pub struct Sha256Landed {
    /// Writes beyond the hashed prefix: start -> end.
    ahead: Mutex<BTreeMap<u64, u64>>,
    hashing: Mutex<Hashing>,
    /// How far the hash goes (mirrors `Hashing::done`, readable without its lock).
    done: AtomicU64,
}

struct Hashing {
    sha: sha2::Sha256,
    /// Bytes hashed: the file's first `done` bytes.
    done: u64,
    buf: Vec<u8>,
}

impl Default for Sha256Landed {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Sha256Landed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sha256Landed")
            .field("done", &self.done.load(Ordering::Relaxed))
            .finish()
    }
}

impl Sha256Landed {
    /// Nothing hashed yet.
    pub fn new() -> Self {
        Self {
            ahead: Mutex::new(BTreeMap::new()),
            hashing: Mutex::new(Hashing {
                sha: sha2::Sha256::new(),
                done: 0,
                buf: Vec::new(),
            }),
            done: AtomicU64::new(0),
        }
    }

    /// How many of the file's first bytes are hashed.
    pub fn hashed(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// `buf` was written at `offset` of `file`.
    pub fn landed(&self, file: &File, buf: &[u8], offset: u64) {
        if buf.is_empty() {
            return;
        }
        let end = offset.saturating_add(buf.len() as u64);
        self.ahead.lock_anyway().insert(offset, end);
        loop {
            let Ok(mut h) = self.hashing.try_lock() else {
                // Another thread hashes, and takes this write if it reaches it.
                return;
            };
            self.advance(&mut h, file, Some((buf, offset)));
            drop(h);
            // A write noted while this thread held the lock, right where it stopped, would
            // otherwise wait for the next write or `finish`.
            let at = self.done.load(Ordering::Relaxed);
            if !self.ahead.lock_anyway().contains_key(&at) {
                return;
            }
        }
    }

    /// Hashes the noted writes that continue the prefix, `mine` from memory.
    fn advance(&self, h: &mut Hashing, file: &File, mine: Option<(&[u8], u64)>) {
        loop {
            let next = {
                let mut ahead = self.ahead.lock_anyway();
                // Writes that end inside the prefix are behind it (overlapping writes).
                while let Some((&start, &end)) = ahead.first_key_value() {
                    if start < h.done {
                        ahead.remove(&start);
                        if end > h.done {
                            ahead.insert(h.done, end);
                        }
                    } else {
                        break;
                    }
                }
                ahead.remove(&h.done).map(|end| (h.done, end))
            };
            let Some((start, end)) = next else {
                return;
            };
            match mine {
                Some((buf, offset)) if offset == start && end == offset + buf.len() as u64 => {
                    h.sha.update(buf);
                }
                _ => {
                    if read_back(h, file, start, end).is_err() {
                        // Left for `finish`, which reads it again and reports the error.
                        self.ahead.lock_anyway().insert(start, end);
                        return;
                    }
                }
            }
            h.done = end;
            self.done.store(end, Ordering::Relaxed);
        }
    }

    /// The SHA-256 of the first `size` bytes of `file`: the hashed prefix, continued by reading
    /// the rest back.
    pub fn finish(&self, file: &File, size: u64) -> io::Result<LfsOid> {
        let mut h = self.hashing.lock_anyway();
        if h.done > size {
            return Err(io::Error::other(format!(
                "{} bytes were hashed of a file of {size}",
                h.done
            )));
        }
        let from = h.done;
        read_back(&mut h, file, from, size)?;
        h.done = size;
        self.done.store(size, Ordering::Relaxed);
        let sha = std::mem::take(&mut h.sha);
        Ok(LfsOid::from_digest(sha.finalize().into()))
    }

    /// Forgets everything hashed and noted (the file is written again from the start).
    pub fn reset(&self) {
        let mut h = self.hashing.lock_anyway();
        self.ahead.lock_anyway().clear();
        h.sha = sha2::Sha256::new();
        h.done = 0;
        self.done.store(0, Ordering::Relaxed);
    }
}

/// Hashes bytes `start..end` of `file` into `h`, read back.
fn read_back(h: &mut Hashing, file: &File, start: u64, end: u64) -> io::Result<()> {
    let mut at = start;
    while at < end {
        let n = usize::try_from(end - at)
            .unwrap_or(usize::MAX)
            .min(READ_BACK);
        h.buf.resize(n, 0);
        read_exact_at(file, &mut h.buf[..n], at)?;
        h.sha.update(&h.buf[..n]);
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    fn write(file: &File, landed: &Sha256Landed, bytes: &[u8], at: usize, len: usize) {
        let piece = &bytes[at..at + len];
        file.write_all_at(piece, at as u64).unwrap();
        landed.landed(file, piece, at as u64);
    }

    #[test]
    fn writes_in_any_order_hash_to_the_file_s_sha256() {
        let bytes = data(3 << 20);
        let tmp = tempfile::tempfile().unwrap();
        let landed = Sha256Landed::new();
        // Out of order: the middle, the end, then the start (which carries the prefix on).
        write(&tmp, &landed, &bytes, 1 << 20, 1 << 20);
        write(&tmp, &landed, &bytes, 2 << 20, 1 << 20);
        assert_eq!(landed.hashed(), 0);
        write(&tmp, &landed, &bytes, 0, 1 << 20);
        assert_eq!(landed.hashed(), 3 << 20);
        let oid = landed.finish(&tmp, bytes.len() as u64).unwrap();
        assert_eq!(oid, LfsOid::of(&bytes));
    }

    #[test]
    fn bytes_no_write_reached_are_read_at_the_end() {
        let bytes = data(100_000);
        let tmp = tempfile::tempfile().unwrap();
        // Bytes 0..40000 were there before (a resumed download): never reported.
        tmp.write_all_at(&bytes[..40_000], 0).unwrap();
        let landed = Sha256Landed::new();
        write(&tmp, &landed, &bytes, 40_000, 60_000);
        assert_eq!(landed.hashed(), 0);
        assert_eq!(
            landed.finish(&tmp, bytes.len() as u64).unwrap(),
            LfsOid::of(&bytes)
        );
    }

    #[test]
    fn a_reset_starts_over_and_threads_writing_at_once_agree() {
        let bytes = data(4 << 20);
        let tmp = tempfile::tempfile().unwrap();
        let landed = Sha256Landed::new();
        write(&tmp, &landed, &data(10), 0, 10);
        landed.reset();
        let piece = 64 << 10;
        let pieces: Vec<usize> = (0..bytes.len() / piece).collect();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (tmp, landed, bytes, pieces) = (&tmp, &landed, &bytes, &pieces);
                s.spawn(move || {
                    for i in pieces.iter().filter(|i| *i % 4 == t).rev() {
                        write(tmp, landed, bytes, i * piece, piece);
                    }
                });
            }
        });
        assert_eq!(
            landed.finish(&tmp, bytes.len() as u64).unwrap(),
            LfsOid::of(&bytes)
        );
    }

    #[test]
    fn a_file_shorter_than_what_was_hashed_is_an_error() {
        let bytes = data(1000);
        let tmp = tempfile::tempfile().unwrap();
        let landed = Sha256Landed::new();
        write(&tmp, &landed, &bytes, 0, 1000);
        assert!(landed.finish(&tmp, 500).is_err());
    }
}
