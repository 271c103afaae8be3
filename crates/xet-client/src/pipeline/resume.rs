//! A download's partial file, and what an interrupted download leaves in it for the next one.
//!
//! A [`PartialFile`] holds the file's bytes at their offsets (`0..size`), written in any order
//! by the download's threads, and after them the record of what is written: a header naming
//! the download (LFS oid, Xet file hash, size), then one entry per stretch of bytes, appended
//! once those bytes are in the file. An entry ([`Extent`]) says where its stretch is in the
//! file, which chunks of which stored xorb it holds (chunk index and byte offset in the xorb
//! where they start and where they end, so that the rest of a fetch range can be asked for
//! alone), and each chunk's hash and length. A complete download cuts the file to `size`
//! ([`PartialFile::finish`]): what git-lfs gets is the object and nothing else.
//!
//! A later download of the same file, in any process, reopens it ([`PartialFile::reopen`])
//! and takes its entries instead of fetching their chunks again (see
//! [`super::download::write_part`]). Nothing in it is taken on its word:
//!
//! - the header and each entry carry a BLAKE3 checksum (an entry's keyed with the Xet file
//!   hash): the record ends at the first entry that does not check, such as one torn when
//!   its process was killed;
//! - an entry is used only where the new plan has the same fetch range of the same xorb at
//!   the same place in the file;
//! - before an entry is used its bytes are read back and each chunk hashed
//!   ([`PartialFile::verify`]): bytes that no longer hash to what was recorded (never synced
//!   before a crash, changed since) are fetched again, with everything after them in their
//!   fetch range;
//! - the recorded chunk hashes go into the Xet file hash every download checks at the end,
//!   like fetched ones: a record whose hashes were wrong fails that check, and the download
//!   starts over without it ([`PartialFile::restart`]).
//!
//! Nothing is synced: a partial file is worth a fetch, and what a crash lost is fetched again.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::pipeline::direct::DirectWrites;
use crate::pipeline::download::WriteAt;
use crate::pipeline::mirror::Mirror;
use crate::pipeline::prior::read_exact_at;
use crate::pipeline::sha256_landed::Sha256Landed;
use xet_format::xorb::header::MAX_CHUNK_LEN;
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid, XorbHash};
use xet_protocol::util::sync::LockAnyway as _;

/// The first bytes of the record, right after the file's last byte.
const MAGIC: &[u8; 16] = b"git-xet partial1";

/// Magic, oid, file hash, size, checksum.
const HEADER_LEN: u64 = 16 + 32 + 32 + 8 + 32;

/// An entry's fixed part: where in the file, xorb, from (chunk, byte), to (chunk, byte), count.
const ENTRY_FIXED: usize = 8 + 32 + 4 + 8 + 4 + 8 + 4;

/// Each chunk of an entry: hash and length.
const ENTRY_CHUNK: usize = 32 + 4;

/// The most chunks one entry holds (a stretch of more is simply not recorded).
const MAX_ENTRY_CHUNKS: usize = 1 << 14;

/// The longest record read back: about 60 MiB of entries describe a 100 GiB file.
const MAX_RECORD: u64 = 256 << 20;

/// One stretch of a partial file: chunks of one fetch range of one xorb, written one after
/// the other from `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    /// Where its bytes start in the file.
    pub at: u64,
    /// The xorb its chunks come from.
    pub xorb: XorbHash,
    /// Chunk index and byte offset in the xorb of the first chunk read for it.
    pub from: (u32, u64),
    /// Chunk index and byte offset just past the last chunk read for it (chunks a term does
    /// not use are read and skipped, and count here).
    pub to: (u32, u64),
    /// The chunks written, in file order.
    pub chunks: Vec<ChunkRef>,
}

impl Extent {
    /// The bytes it holds in the file.
    pub fn len(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }

    /// Whether it holds no bytes (it only read past chunks no term uses).
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    fn encode(&self, key: &FileHash) -> Option<Vec<u8>> {
        if self.chunks.len() > MAX_ENTRY_CHUNKS {
            return None;
        }
        let payload = ENTRY_FIXED + self.chunks.len() * ENTRY_CHUNK;
        let mut out = Vec::with_capacity(4 + payload + 32);
        out.extend_from_slice(&u32::try_from(payload).ok()?.to_le_bytes());
        out.extend_from_slice(&self.at.to_le_bytes());
        out.extend_from_slice(self.xorb.as_bytes());
        out.extend_from_slice(&self.from.0.to_le_bytes());
        out.extend_from_slice(&self.from.1.to_le_bytes());
        out.extend_from_slice(&self.to.0.to_le_bytes());
        out.extend_from_slice(&self.to.1.to_le_bytes());
        out.extend_from_slice(&u32::try_from(self.chunks.len()).ok()?.to_le_bytes());
        for c in &self.chunks {
            out.extend_from_slice(c.hash.as_bytes());
            out.extend_from_slice(&u32::try_from(c.len).ok()?.to_le_bytes());
        }
        let check = blake3::keyed_hash(key.as_bytes(), &out);
        out.extend_from_slice(check.as_bytes());
        Some(out)
    }

    /// The entry at the start of `bytes` and its length there; `None` when there is none that
    /// checks (the end of the record).
    fn decode(bytes: &[u8], key: &FileHash, size: u64) -> Option<(Extent, usize)> {
        let mut r = Reader(bytes);
        let payload = r.u32()? as usize;
        if payload < ENTRY_FIXED || !(payload - ENTRY_FIXED).is_multiple_of(ENTRY_CHUNK) {
            return None;
        }
        let whole = 4 + payload + 32;
        let body = bytes.get(..4 + payload)?;
        let check = bytes.get(4 + payload..whole)?;
        if blake3::keyed_hash(key.as_bytes(), body).as_bytes() != check {
            return None;
        }
        let at = r.u64()?;
        let xorb = XorbHash::from_bytes(r.hash()?);
        let from = (r.u32()?, r.u64()?);
        let to = (r.u32()?, r.u64()?);
        let n = r.u32()? as usize;
        if n != (payload - ENTRY_FIXED) / ENTRY_CHUNK {
            return None;
        }
        let mut chunks = Vec::with_capacity(n);
        for _ in 0..n {
            let hash = ChunkHash::from_bytes(r.hash()?);
            let len = r.u32()?;
            if len == 0 || len > MAX_CHUNK_LEN {
                return None;
            }
            chunks.push(ChunkRef::new(hash, u64::from(len)));
        }
        let e = Extent {
            at,
            xorb,
            from,
            to,
            chunks,
        };
        let fits = e.at.checked_add(e.len()).is_some_and(|end| end <= size);
        let moves = e.to.0 > e.from.0 && e.to.1 > e.from.1;
        (fits && moves).then_some((e, whole))
    }
}

/// Little-endian fields off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn hash(&mut self) -> Option<[u8; 32]> {
        self.take()
    }
}

/// Where an entry's chunks start: xorb, chunk index, byte offset, place in the file.
type EntryKey = (XorbHash, u32, u64, u64);

/// See the module documentation.
pub struct PartialFile {
    file: File,
    size: u64,
    file_hash: FileHash,
    /// Where the next entry goes; appends take turns.
    end: Mutex<u64>,
    /// The entries an earlier download left, not yet used, by where their chunks start.
    earlier: Mutex<HashMap<EntryKey, Extent>>,
    /// Bytes the earlier download's entries hold.
    found: u64,
    /// Bytes the record holds (earlier entries included).
    recorded: AtomicU64,
    /// The file's SHA-256, computed as its bytes land, once asked for
    /// ([`PartialFile::hash_as_written`]).
    sha256: OnceLock<Sha256Landed>,
    /// A second file the bytes are also written to ([`PartialFile::mirror_to`]).
    mirror: OnceLock<Mirror>,
    /// With a mirror, the file's own bytes skip the page cache (see [`DirectWrites`]).
    direct: OnceLock<DirectWrites>,
    /// Writes to the file take turns (see [`WriteAt::takes_turns`]); the mirror's and the
    /// SHA-256's work is done outside it, each taking its own turns.
    turn: Mutex<()>,
}

impl std::fmt::Debug for PartialFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartialFile")
            .field("size", &self.size)
            .field("file_hash", &self.file_hash)
            .field("recorded", &self.recorded.load(Ordering::Relaxed))
            .finish()
    }
}

/// The header of the record of a download of `oid` (Xet file `file_hash`, `size` bytes).
fn header(oid: &LfsOid, file_hash: &FileHash, size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN as usize);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(oid.digest());
    out.extend_from_slice(file_hash.as_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    let check = blake3::hash(&out);
    out.extend_from_slice(check.as_bytes());
    out
}

impl PartialFile {
    /// A new partial file of the download of `oid` (Xet file `file_hash`, `size` bytes) in
    /// `file`, which is emptied.
    pub fn create(file: File, oid: &LfsOid, file_hash: &FileHash, size: u64) -> io::Result<Self> {
        file.set_len(0)?;
        let head = header(oid, file_hash, size);
        WriteAt::write_all_at(&file, &head, size)?;
        Ok(Self {
            file,
            size,
            file_hash: *file_hash,
            end: Mutex::new(size + HEADER_LEN),
            earlier: Mutex::new(HashMap::new()),
            found: 0,
            recorded: AtomicU64::new(0),
            sha256: OnceLock::new(),
            mirror: OnceLock::new(),
            direct: OnceLock::new(),
            turn: Mutex::new(()),
        })
    }

    /// The partial file an earlier download of `oid` (Xet file `file_hash`, `size` bytes) left
    /// in `file`, with the entries of its record that check (the rest of the record is cut
    /// off); `None` if `file` holds no record of that download (another file, another format,
    /// or a complete file cut to its size).
    pub fn reopen(
        file: File,
        oid: &LfsOid,
        file_hash: &FileHash,
        size: u64,
    ) -> io::Result<Option<Self>> {
        let len = file.metadata()?.len();
        let start = size.saturating_add(HEADER_LEN);
        if len < start || len - start > MAX_RECORD {
            return Ok(None);
        }
        let mut head = vec![0u8; HEADER_LEN as usize];
        read_exact_at(&file, &mut head, size)?;
        if head != header(oid, file_hash, size) {
            return Ok(None);
        }
        let mut record = vec![0u8; usize::try_from(len - start).unwrap_or(0)];
        read_exact_at(&file, &mut record, start)?;
        let mut earlier = HashMap::new();
        let mut used = 0usize;
        let mut found = 0u64;
        while let Some((e, n)) = record
            .get(used..)
            .and_then(|rest| Extent::decode(rest, file_hash, size))
        {
            used += n;
            found += e.len();
            earlier.insert((e.xorb, e.from.0, e.from.1, e.at), e);
        }
        let end = start + used as u64;
        if end < len {
            // A torn or foreign tail: new entries go where the good ones end.
            file.set_len(end)?;
        }
        Ok(Some(Self {
            file,
            size,
            file_hash: *file_hash,
            end: Mutex::new(end),
            earlier: Mutex::new(earlier),
            found,
            recorded: AtomicU64::new(found),
            sha256: OnceLock::new(),
            mirror: OnceLock::new(),
            direct: OnceLock::new(),
            turn: Mutex::new(()),
        }))
    }

    /// The file's size (where its record starts).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The Xet file the partial file is a download of.
    pub fn file_hash(&self) -> &FileHash {
        &self.file_hash
    }

    /// Bytes the earlier download's record held when it was reopened.
    pub fn found(&self) -> u64 {
        self.found
    }

    /// Bytes the record holds now: what a next download could take instead of fetching.
    pub fn resumable(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }

    /// Appends `extent` to the record; its bytes must be in the file already. An extent too
    /// large for one entry is not recorded.
    pub fn record(&self, extent: &Extent) -> io::Result<()> {
        let Some(bytes) = extent.encode(&self.file_hash) else {
            return Ok(());
        };
        let mut end = self.end.lock_anyway();
        WriteAt::write_all_at(&self.file, &bytes, *end)?;
        *end += bytes.len() as u64;
        self.recorded.fetch_add(extent.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Takes the earlier download's entry whose chunks start at chunk `from` (index, byte
    /// offset) of `xorb` and at `at` in the file, if there is one (not checked yet: see
    /// [`PartialFile::verify`]).
    pub fn take(&self, xorb: &XorbHash, from: (u32, u64), at: u64) -> Option<Extent> {
        self.earlier
            .lock_anyway()
            .remove(&(*xorb, from.0, from.1, at))
    }

    /// Whether the bytes of `extent` in the file hash, chunk by chunk, to what it records
    /// (`buf` is scratch space).
    pub fn verify(&self, extent: &Extent, buf: &mut Vec<u8>) -> bool {
        // No flush first: an entry of the earlier download names bytes this one has not
        // written (and waiting for the queue to empty while other threads fill it could last).
        let len = extent.len();
        if extent.at.checked_add(len).is_none_or(|end| end > self.size) {
            return false;
        }
        let Ok(n) = usize::try_from(len) else {
            return false;
        };
        buf.clear();
        buf.resize(n, 0);
        if read_exact_at(&self.file, buf, extent.at).is_err() {
            return false;
        }
        let mut at = 0usize;
        for c in &extent.chunks {
            let end = at + c.len as usize;
            if ChunkHash::of(&buf[at..end]) != c.hash {
                return false;
            }
            at = end;
        }
        true
    }

    /// Forgets everything: the file is emptied and its record starts again (a download that
    /// did not verify starts over).
    pub fn restart(&self, oid: &LfsOid) -> io::Result<()> {
        // Queued writes of the attempt that failed land first, not over the next one's.
        self.flush()?;
        let mut end = self.end.lock_anyway();
        self.earlier.lock_anyway().clear();
        self.file.set_len(0)?;
        let head = header(oid, &self.file_hash, self.size);
        WriteAt::write_all_at(&self.file, &head, self.size)?;
        *end = self.size + HEADER_LEN;
        self.recorded.store(0, Ordering::Relaxed);
        if let Some(sha) = self.sha256.get() {
            sha.reset();
        }
        if let Some(mirror) = self.mirror.get() {
            mirror.reset();
        }
        Ok(())
    }

    /// From now on, computes the file's SHA-256 while its bytes are written (see
    /// [`Sha256Landed`]); [`PartialFile::sha256`] gives it.
    pub fn hash_as_written(&self) {
        let _ = self.sha256.set(Sha256Landed::new());
    }

    /// The SHA-256 of the file's bytes, mostly computed while they were written (the rest is
    /// read back); `None` unless [`PartialFile::hash_as_written`] was called.
    pub fn sha256(&self) -> Option<io::Result<LfsOid>> {
        let sha = self.sha256.get()?;
        Some(
            self.flush()
                .and_then(|()| sha.finish(&self.file, self.size)),
        )
    }

    /// From now on, writes the file's bytes to `file` too, at the same offsets (see
    /// [`Mirror`]); [`PartialFile::mirrored`] says whether it holds all of them. Once only.
    ///
    /// The mirror is the copy read next (a work-tree file): this file's own bytes then skip
    /// the page cache where the filesystem allows it ([`DirectWrites`]), and the SHA-256
    /// computed as they land reads back what it needs from the mirror.
    pub fn mirror_to(&self, file: File) -> io::Result<()> {
        let mirror = Mirror::new(file, self.size)?;
        if self.mirror.set(mirror).is_ok() {
            if let Some(direct) = DirectWrites::open(&self.file) {
                let _ = self.direct.set(direct);
            }
        }
        Ok(())
    }

    /// Whether the file given to [`PartialFile::mirror_to`] holds every byte of this one, all
    /// written to both since the download last started over.
    pub fn mirrored(&self) -> bool {
        self.mirror.get().is_some_and(Mirror::complete)
    }

    /// Cuts the record off: the file is the downloaded file and nothing else.
    pub fn finish(&self) -> io::Result<()> {
        self.flush()?;
        self.file.set_len(self.size)
    }

    /// Waits until every write is in the file (see [`DirectWrites::flush`]); an error if one
    /// failed.
    fn flush(&self) -> io::Result<()> {
        self.direct.get().map_or(Ok(()), DirectWrites::flush)
    }
}

impl WriteAt for PartialFile {
    /// Writes within the file's `size` bytes only (the record follows them).
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let fits = offset
            .checked_add(buf.len() as u64)
            .is_some_and(|end| end <= self.size);
        if !fits {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a write of {} bytes at {offset} goes past the file's {} bytes",
                    buf.len(),
                    self.size
                ),
            ));
        }
        {
            let _turn = self.turn.lock_anyway();
            match self.direct.get() {
                Some(direct) => direct.write_all_at(buf, offset)?,
                None => WriteAt::write_all_at(&self.file, buf, offset)?,
            }
        }
        let mirror = self.mirror.get();
        if let Some(mirror) = mirror {
            mirror.write(buf, offset);
        }
        if let Some(sha) = self.sha256.get() {
            // Bytes read back come from the page cache: the mirror's, while it holds every
            // write (if it broke meanwhile, the hash comes out wrong and the caller, who
            // compares it with the object's name, hashes the file again).
            let from = mirror.and_then(Mirror::intact).unwrap_or(&self.file);
            sha.landed(from, buf, offset);
        }
        Ok(())
    }

    /// The file's writes, the mirror's and the SHA-256 each take their own turns: one thread
    /// can hash while another writes.
    fn takes_turns(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oid() -> LfsOid {
        LfsOid::of(b"object")
    }

    fn hash() -> FileHash {
        FileHash::from_bytes([7; 32])
    }

    fn extent(at: u64, xorb: u8, from: (u32, u64), data: &[&[u8]]) -> Extent {
        let chunks: Vec<ChunkRef> = data
            .iter()
            .map(|d| ChunkRef::new(ChunkHash::of(d), d.len() as u64))
            .collect();
        Extent {
            at,
            xorb: XorbHash::from_bytes([xorb; 32]),
            from,
            to: (from.0 + data.len() as u32, from.1 + 1000),
            chunks,
        }
    }

    fn part_with(size: u64) -> (tempfile::NamedTempFile, PartialFile) {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let part = PartialFile::create(tmp.reopen().unwrap(), &oid(), &hash(), size).unwrap();
        (tmp, part)
    }

    #[test]
    fn with_a_mirror_both_files_and_the_sha256_hold_every_write_even_after_a_restart() {
        let size = (3 << 20) + 4321;
        let bytes: Vec<u8> = (0..size).map(|i| (i * 7 % 253) as u8).collect();
        let oid = LfsOid::of(&bytes);
        let (tmp, part) = part_with(size as u64);
        let mirror = tempfile::NamedTempFile::new().unwrap();
        part.hash_as_written();
        part.mirror_to(mirror.reopen().unwrap()).unwrap();
        // A first attempt writes garbage over the middle (a damaged download), then starts
        // over: the files end up with the second attempt's bytes.
        part.write_all_at(&vec![0xEE; 2 << 20], 1 << 20).unwrap();
        part.restart(&oid).unwrap();
        // Pieces out of order, of odd sizes and places.
        let cuts = [0, 5000, 1 << 20, (1 << 20) + 333, (5 << 19) + 1, size];
        for w in cuts.windows(2).rev() {
            part.write_all_at(&bytes[w[0]..w[1]], w[0] as u64).unwrap();
        }
        assert!(part.mirrored());
        assert_eq!(part.sha256().unwrap().unwrap(), oid);
        part.finish().unwrap();
        assert!(
            std::fs::read(tmp.path()).unwrap() == bytes,
            "the object differs"
        );
        assert!(
            std::fs::read(mirror.path()).unwrap() == bytes,
            "the mirror differs"
        );
    }

    #[test]
    fn entries_come_back_after_a_reopen_and_their_bytes_are_checked() {
        let (tmp, part) = part_with(100);
        let (a, b) = (vec![1u8; 30], vec![2u8; 20]);
        part.write_all_at(&a, 10).unwrap();
        part.write_all_at(&b, 40).unwrap();
        let first = extent(10, 1, (0, 0), &[&a[..10], &a[10..]]);
        let second = extent(40, 1, first.to, &[&b]);
        part.record(&first).unwrap();
        part.record(&second).unwrap();
        assert_eq!(part.resumable(), 50);
        // Beyond the file's bytes is the record's place.
        assert!(part.write_all_at(&[0], 100).is_err());
        drop(part);

        let again = PartialFile::reopen(tmp.reopen().unwrap(), &oid(), &hash(), 100)
            .unwrap()
            .expect("a record");
        assert_eq!(again.found(), 50);
        let mut buf = Vec::new();
        let got = again.take(&first.xorb, (0, 0), 10).unwrap();
        assert_eq!(got, first);
        assert!(again.verify(&got, &mut buf));
        assert!(again.take(&first.xorb, (0, 0), 10).is_none(), "taken once");
        // Bytes that changed since are not taken.
        again.write_all_at(&[9], 45).unwrap();
        let got = again.take(&second.xorb, second.from, 40).unwrap();
        assert!(!again.verify(&got, &mut buf));
        // Cut to its size, the file is the download and holds no record.
        again.finish().unwrap();
        assert_eq!(tmp.as_file().metadata().unwrap().len(), 100);
        assert!(
            PartialFile::reopen(tmp.reopen().unwrap(), &oid(), &hash(), 100)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_torn_entry_ends_the_record_and_is_written_over() {
        let (tmp, part) = part_with(64);
        let data = [3u8; 16];
        part.write_all_at(&data, 0).unwrap();
        let good = extent(0, 2, (4, 500), &[&data]);
        part.record(&good).unwrap();
        let end = tmp.as_file().metadata().unwrap().len();
        // Half an entry, as a killed process leaves it.
        let torn = extent(16, 2, good.to, &[&data]).encode(&hash()).unwrap();
        tmp.as_file()
            .write_all_at(&torn[..torn.len() / 2], end)
            .unwrap();
        drop(part);
        let again = PartialFile::reopen(tmp.reopen().unwrap(), &oid(), &hash(), 64)
            .unwrap()
            .unwrap();
        assert_eq!(again.found(), 16);
        assert_eq!(tmp.as_file().metadata().unwrap().len(), end, "tail cut");
        let next = extent(16, 2, good.to, &[&data]);
        again.write_all_at(&data, 16).unwrap();
        again.record(&next).unwrap();
        drop(again);
        let third = PartialFile::reopen(tmp.reopen().unwrap(), &oid(), &hash(), 64)
            .unwrap()
            .unwrap();
        assert_eq!(third.found(), 32);
    }

    #[test]
    fn a_record_of_another_download_is_not_used() {
        let (tmp, part) = part_with(64);
        part.write_all_at(&[5; 8], 0).unwrap();
        part.record(&extent(0, 1, (0, 0), &[&[5; 8]])).unwrap();
        drop(part);
        let other_oid = LfsOid::of(b"another object");
        let other_hash = FileHash::from_bytes([8; 32]);
        for (o, h, size) in [
            (other_oid, hash(), 64),
            (oid(), other_hash, 64),
            (oid(), hash(), 63),
        ] {
            let found = PartialFile::reopen(tmp.reopen().unwrap(), &o, &h, size).unwrap();
            assert!(found.is_none(), "{o} {h} {size}");
        }
        // An entry checked with another key (another file's) ends the record.
        let (tmp, part) = part_with(64);
        let foreign = extent(0, 1, (0, 0), &[&[5; 8]])
            .encode(&other_hash)
            .unwrap();
        tmp.as_file()
            .write_all_at(&foreign, 64 + HEADER_LEN)
            .unwrap();
        drop(part);
        let again = PartialFile::reopen(tmp.reopen().unwrap(), &oid(), &hash(), 64)
            .unwrap()
            .unwrap();
        assert_eq!(again.found(), 0);
        // A restart forgets the record.
        again.write_all_at(&[5; 8], 0).unwrap();
        again.record(&extent(0, 1, (0, 0), &[&[5; 8]])).unwrap();
        again.restart(&oid()).unwrap();
        assert_eq!(again.resumable(), 0);
        drop(again);
        let empty = PartialFile::reopen(tmp.reopen().unwrap(), &oid(), &hash(), 64)
            .unwrap()
            .unwrap();
        assert_eq!(empty.found(), 0);
    }
}
