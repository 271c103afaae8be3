//! A second file a download's bytes are also written to, as they are written: the work-tree
//! file of a checkout made in the same pass as the object (`git xet clone`, `git xet pull`),
//! instead of copied from it afterwards.
//!
//! [`Mirror`] writes each piece at the offset it has in the download and remembers which bytes
//! it holds. It is [`Mirror::complete`] only when every byte of the file was written through it
//! since the last [`Mirror::reset`]: bytes a download took over from an earlier one, or wrote
//! some other way, leave a hole, and the caller then copies the finished object as before. A
//! failed write (a full disk where the work tree is) stops the mirror, never the download.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Mutex;

use crate::pipeline::download::WriteAt;
use xet_protocol::util::sync::LockAnyway as _;

/// See the module documentation.
#[derive(Debug)]
pub struct Mirror {
    file: File,
    size: u64,
    state: Mutex<State>,
    /// Writes take turns (see `OneWriteAtATime` in the download module: waiting here parks a
    /// thread where the filesystem's lock would have it spin).
    turn: Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    /// The stretches written, `start -> end` (exclusive), merged where they meet.
    written: BTreeMap<u64, u64>,
    /// A write failed: the mirror is of no use.
    broken: bool,
}

impl State {
    fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut start, mut end) = (start, end);
        // Stretches that overlap or touch [start, end) are merged into it.
        let touching: Vec<(u64, u64)> = self
            .written
            .range(..=end)
            .rev()
            .take_while(|(_, e)| **e >= start)
            .map(|(s, e)| (*s, *e))
            .collect();
        for (s, e) in touching {
            self.written.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.written.insert(start, end);
    }
}

impl Mirror {
    /// A mirror of a download of `size` bytes into `file`, a new empty file (sized to `size`
    /// here; never truncated to zero first: ext4 writes a file truncated to zero and rewritten
    /// to disk when it is closed).
    pub fn new(file: File, size: u64) -> std::io::Result<Self> {
        file.set_len(size)?;
        Ok(Self {
            file,
            size,
            state: Mutex::default(),
            turn: Mutex::new(()),
        })
    }

    /// Writes `buf` at `offset`, as the download just did. A failure stops the mirror.
    pub fn write(&self, buf: &[u8], offset: u64) {
        let end = offset.saturating_add(buf.len() as u64);
        if end > self.size || self.state.lock_anyway().broken {
            self.state.lock_anyway().broken = true;
            return;
        }
        let written = {
            let _turn = self.turn.lock_anyway();
            WriteAt::write_all_at(&self.file, buf, offset)
        };
        let mut state = self.state.lock_anyway();
        match written {
            Ok(()) => state.add(offset, end),
            Err(e) => {
                tracing::debug!("a mirrored write failed; the file will be copied instead: {e}");
                state.broken = true;
            }
        }
    }

    /// The mirror's file while no write to it failed: the bytes of every write made through
    /// the mirror are in it.
    pub fn intact(&self) -> Option<&File> {
        (!self.state.lock_anyway().broken).then_some(&self.file)
    }

    /// Forgets what was written (the download starts over and writes every byte again).
    pub fn reset(&self) {
        self.state.lock_anyway().written.clear();
    }

    /// Whether every byte of the file was written through the mirror and none failed.
    pub fn complete(&self) -> bool {
        let state = self.state.lock_anyway();
        if state.broken {
            return false;
        }
        if self.size == 0 {
            return true;
        }
        state.written.len() == 1 && state.written.get(&0) == Some(&self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn mirror(size: u64) -> (tempfile::NamedTempFile, Mirror) {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let m = Mirror::new(tmp.as_file().try_clone().unwrap(), size).unwrap();
        (tmp, m)
    }

    fn contents(tmp: &tempfile::NamedTempFile) -> Vec<u8> {
        let mut out = Vec::new();
        std::fs::File::open(tmp.path())
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn complete_once_every_byte_is_written_in_any_order() {
        let (tmp, m) = mirror(10);
        m.write(b"fgh", 5);
        assert!(!m.complete());
        m.write(b"abc", 0);
        m.write(b"ij", 8);
        assert!(!m.complete(), "bytes 3..5 are a hole");
        m.write(b"de", 3);
        assert!(m.complete());
        assert_eq!(contents(&tmp), b"abcdefghij");
    }

    #[test]
    fn overlapping_writes_do_not_count_twice() {
        let (_tmp, m) = mirror(8);
        m.write(b"abcd", 0);
        m.write(b"cdef", 2);
        m.write(b"cdef", 2);
        assert!(!m.complete(), "8 bytes written, 6 covered");
        m.write(b"gh", 6);
        assert!(m.complete());
    }

    #[test]
    fn a_reset_or_a_write_past_the_end_makes_it_incomplete() {
        let (_tmp, m) = mirror(4);
        m.write(b"abcd", 0);
        assert!(m.complete());
        m.reset();
        assert!(!m.complete());
        m.write(b"abcd", 0);
        assert!(m.complete());
        m.write(b"e", 4);
        assert!(!m.complete(), "a write past the end breaks the mirror");
        m.write(b"abcd", 0);
        assert!(!m.complete(), "and it stays broken");
    }

    #[test]
    fn merging_keeps_separate_stretches_apart() {
        let mut s = State::default();
        s.add(10, 20);
        s.add(30, 40);
        s.add(20, 25);
        s.add(0, 5);
        assert_eq!(
            s.written.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(),
            vec![(0, 5), (10, 25), (30, 40)]
        );
        s.add(5, 30);
        assert_eq!(s.written.len(), 1);
        assert_eq!(s.written.get(&0), Some(&40));
    }
}
