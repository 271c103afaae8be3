use std::sync::Mutex;

use super::*;
use xet_format::xorb::CompressionScheme;

/// A fake stored xorb: `n` uncompressed chunks of different lengths, and the byte offset of
/// each chunk boundary.
fn xorb(n: u32) -> (Vec<u8>, Vec<u64>) {
    let mut bytes = Vec::new();
    let mut offsets = Vec::new();
    for i in 0..n {
        offsets.push(bytes.len() as u64);
        let len = 100 + i * 7;
        let h = ChunkHeader::new(CompressionScheme::None, len, len).unwrap();
        bytes.extend_from_slice(&h.encode());
        bytes.extend((0..len).map(|j| (i * 31 + j) as u8));
    }
    offsets.push(bytes.len() as u64);
    (bytes, offsets)
}

fn range(offsets: &[u64], chunks: std::ops::Range<u32>) -> FetchRange {
    FetchRange {
        bytes: offsets[chunks.start as usize]..=offsets[chunks.end as usize] - 1,
        chunks,
        url: Some("http://x/xorb".into()),
    }
}

/// A fetch from the fake xorb that records every range asked for.
struct Server {
    bytes: Vec<u8>,
    asked: Mutex<Vec<std::ops::Range<u32>>>,
}

impl Server {
    fn fetch(&self, r: &FetchRange) -> Result<Vec<u8>, TargetError> {
        self.asked.lock().unwrap().push(r.chunks.clone());
        Ok(self.bytes[*r.bytes.start() as usize..=*r.bytes.end() as usize].to_vec())
    }
    fn asked(&self) -> Vec<std::ops::Range<u32>> {
        std::mem::take(&mut *self.asked.lock().unwrap())
    }
}

/// An empty cache keeping every range, and a server of a fake xorb of 20 chunks (its bytes
/// and chunk offsets).
fn cache_and_server() -> (tempfile::TempDir, ChunkCache, Server, Vec<u8>, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let cache = ChunkCache::open(dir.path()).with_min_range(0);
    let (bytes, offsets) = xorb(20);
    let server = Server {
        bytes: bytes.clone(),
        asked: Mutex::new(Vec::new()),
    };
    (dir, cache, server, bytes, offsets)
}

#[test]
fn fetches_only_the_gaps_and_returns_what_the_server_would() {
    let (_dir, cache, server, bytes, offsets) = cache_and_server();
    let x = XorbHash::from_hex(&"ab".repeat(32)).unwrap();
    let fetch = |r: &FetchRange| server.fetch(r);
    let expect =
        |r: &FetchRange| bytes[*r.bytes.start() as usize..=*r.bytes.end() as usize].to_vec();

    // Two separate pieces first (as another version of the file would need them).
    for chunks in [2..5, 9..12] {
        let r = range(&offsets, chunks.clone());
        let (got, fetched) = cache.read_through(&x, &r, &fetch).unwrap();
        assert_eq!(got, expect(&r));
        assert_eq!(fetched, got.len() as u64);
        assert_eq!(server.asked(), vec![chunks]);
    }
    // A range over both: only the gaps go to the server.
    let r = range(&offsets, 0..15);
    let (got, fetched) = cache.read_through(&x, &r, &fetch).unwrap();
    assert_eq!(got, expect(&r));
    assert_eq!(server.asked(), [0..2, 5..9, 12..15]);
    assert_eq!(
        fetched,
        (offsets[2] - offsets[0]) + (offsets[9] - offsets[5]) + (offsets[15] - offsets[12])
    );
    // Now inside what is cached, starting mid-entry: nothing is fetched.
    let r = range(&offsets, 3..14);
    let (got, fetched) = cache.read_through(&x, &r, &fetch).unwrap();
    assert_eq!(got, expect(&r));
    assert_eq!(fetched, 0);
    assert!(server.asked().is_empty());
}

#[test]
fn a_url_signed_for_its_range_is_fetched_whole_or_not_at_all() {
    let (_dir, cache, server, bytes, offsets) = cache_and_server();
    let x = XorbHash::from_hex(&"cd".repeat(32)).unwrap();
    let fetch = |r: &FetchRange| server.fetch(r);
    cache
        .read_through(&x, &range(&offsets, 2..5), &fetch)
        .unwrap();
    server.asked();
    // An object-store URL whose signature covers its Range: the gaps cannot be asked for
    // alone, so the whole range is.
    let mut r = range(&offsets, 0..8);
    r.url =
        Some("http://s3.test/b/xorbs/x?X-Amz-SignedHeaders=host%3Brange&X-Amz-Signature=0".into());
    let (got, fetched) = cache.read_through(&x, &r, &fetch).unwrap();
    assert_eq!(got, bytes[..offsets[8] as usize].to_vec());
    assert_eq!(fetched, offsets[8]);
    assert_eq!(server.asked(), vec![(0..8)]);
    // What is cached then serves it with no fetch at all.
    let (got, fetched) = cache.read_through(&x, &r, &fetch).unwrap();
    assert_eq!((got.len() as u64, fetched), (offsets[8], 0));
    assert!(server.asked().is_empty());
}

#[test]
fn a_damaged_entry_is_deleted_and_the_range_fetched_whole() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ChunkCache::open(dir.path()).with_min_range(0);
    let (bytes, offsets) = xorb(6);
    let server = Server {
        bytes: bytes.clone(),
        asked: Mutex::new(Vec::new()),
    };
    let x = XorbHash::from_hex(&"cd".repeat(32)).unwrap();
    let fetch = |r: &FetchRange| server.fetch(r);
    let r = range(&offsets, 0..6);
    cache.read_through(&x, &r, &fetch).unwrap();
    server.asked();
    // Flip a header byte of the second chunk (same length: only the headers tell).
    let entry = list(&cache.xorb_dir(&x)).pop().unwrap();
    let mut data = fs::read(&entry.path).unwrap();
    data[offsets[1] as usize + 1] ^= 0xff;
    fs::write(&entry.path, &data).unwrap();
    let (got, fetched) = cache.read_through(&x, &r, &fetch).unwrap();
    assert_eq!(got, bytes[..offsets[6] as usize]);
    assert_eq!(fetched, offsets[6]);
    assert_eq!(server.asked(), vec![0..6]);
    assert!(!entry.path.exists(), "the damaged entry is gone");

    // An entry whose name disagrees with the server's offsets is deleted too.
    fs::write(
        cache.xorb_dir(&x).join("0-2-5"),
        &bytes[..offsets[2] as usize],
    )
    .unwrap();
    let (got, _) = cache.read_through(&x, &r, &fetch).unwrap();
    assert_eq!(got, bytes[..offsets[6] as usize]);
    assert!(!cache.xorb_dir(&x).join("0-2-5").exists());

    // forget drops every entry of the xorb.
    cache.read_through(&x, &r, &fetch).unwrap();
    assert!(!list(&cache.xorb_dir(&x)).is_empty());
    cache.forget(&[x]);
    assert!(list(&cache.xorb_dir(&x)).is_empty());
}

#[test]
fn prune_deletes_the_least_recently_used_entries_first() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, offsets) = xorb(30);
    let server = Server {
        bytes,
        asked: Mutex::new(Vec::new()),
    };
    let fetch = |r: &FetchRange| server.fetch(r);
    let cache = ChunkCache::open(dir.path()).with_min_range(0);
    let xs: Vec<XorbHash> = (1u8..=3)
        .map(|i| XorbHash::from_hex(&format!("{i:02x}").repeat(32)).unwrap())
        .collect();
    let r = range(&offsets, 0..30);
    let size = offsets[30];
    for (i, x) in xs.iter().enumerate() {
        cache.read_through(x, &r, &fetch).unwrap();
        let entry = list(&cache.xorb_dir(x)).pop().unwrap();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + i as u64);
        File::options()
            .write(true)
            .open(&entry.path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    let cache = cache.with_max_bytes(2 * size);
    assert_eq!(cache.prune(), size);
    assert!(list(&cache.xorb_dir(&xs[0])).is_empty(), "the oldest went");
    assert!(!list(&cache.xorb_dir(&xs[2])).is_empty());
    assert_eq!(cache.prune(), 0, "under the limit now");
}

/// Threads of one process: the same range is fetched once (the second waits and reads the
/// first's entry); separate ranges of one xorb are fetched at the same time.
#[test]
fn threads_share_a_xorb_by_chunk_range() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;
    let dir = tempfile::tempdir().unwrap();
    let cache = ChunkCache::open(dir.path()).with_min_range(0);
    let (bytes, offsets) = xorb(20);
    let x = XorbHash::from_hex(&"cd".repeat(32)).unwrap();
    let fetches = AtomicUsize::new(0);
    let now = AtomicUsize::new(0);
    let most = AtomicUsize::new(0);
    let fetch = |r: &FetchRange| -> Result<Vec<u8>, TargetError> {
        fetches.fetch_add(1, Ordering::SeqCst);
        let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(at_once, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(200));
        now.fetch_sub(1, Ordering::SeqCst);
        Ok(bytes[*r.bytes.start() as usize..=*r.bytes.end() as usize].to_vec())
    };
    let run = |ranges: [std::ops::Range<u32>; 2]| {
        let barrier = Barrier::new(2);
        std::thread::scope(|s| {
            for chunks in ranges {
                let (cache, fetch, barrier, offsets, bytes) =
                    (&cache, &fetch, &barrier, &offsets, &bytes);
                s.spawn(move || {
                    let r = range(offsets, chunks);
                    barrier.wait();
                    let (got, _) = cache.read_through(&x, &r, fetch).unwrap();
                    assert_eq!(
                        got,
                        bytes[*r.bytes.start() as usize..=*r.bytes.end() as usize]
                    );
                });
            }
        });
    };
    run([0..5, 0..5]);
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "one fetch for the same range"
    );
    assert_eq!(most.load(Ordering::SeqCst), 1);
    run([6..10, 12..16]);
    assert_eq!(fetches.load(Ordering::SeqCst), 3);
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "separate ranges fetched at the same time"
    );
    // Every lock of this process was let go: another range can be taken at once.
    assert!(holdings()
        .ranges
        .iter()
        .all(|(d, _)| !d.starts_with(dir.path())));
    assert!(holdings()
        .file_locks
        .keys()
        .all(|d| !d.starts_with(dir.path())));
}

impl Server {
    /// Streams `r` in pieces of `piece` bytes; after `restart_at` bytes (if any) it starts
    /// again from the range's beginning once, as a source does after a broken connection.
    fn stream(
        &self,
        r: &FetchRange,
        piece: usize,
        restart_at: Option<u64>,
        sink: &mut RangeSink<'_>,
    ) -> Result<Origin, TargetError> {
        let bytes = self.fetch(r)?;
        let mut restart = restart_at;
        let mut at = 0usize;
        while at < bytes.len() {
            if restart.is_some_and(|r| at as u64 >= r) {
                restart = None;
                at = 0;
            }
            let end = (at + piece).min(bytes.len());
            if sink(at as u64, &bytes[at..end]).is_break() {
                break;
            }
            at = end;
        }
        Ok(Origin::fetched(bytes.len() as u64))
    }
}

/// Gathers what a stream hands over, as a download's sink does: pieces in order, an earlier
/// offset skipped up to what it holds; `stop_after` bytes, then [`ControlFlow::Break`].
fn gather(
    out: &mut Vec<u8>,
    stop_after: Option<usize>,
) -> impl FnMut(u64, &[u8]) -> std::ops::ControlFlow<()> + '_ {
    move |at, piece| {
        let at = at as usize;
        assert!(at <= out.len(), "a piece past what the sink holds");
        let skip = out.len() - at;
        if skip < piece.len() {
            out.extend_from_slice(&piece[skip..]);
        }
        match stop_after {
            Some(n) if out.len() >= n => std::ops::ControlFlow::Break(()),
            _ => std::ops::ControlFlow::Continue(()),
        }
    }
}

#[test]
fn a_first_download_streams_through_the_cache_and_keeps_the_range() {
    let (_dir, cache, server, bytes, offsets) = cache_and_server();
    let x = XorbHash::from_hex(&"cd".repeat(32)).unwrap();
    let fetch = |r: &FetchRange| server.fetch(r);
    let expect =
        |r: &FetchRange| bytes[*r.bytes.start() as usize..=*r.bytes.end() as usize].to_vec();
    let r = range(&offsets, 0..12);

    // Streamed in small pieces, the source starting over once: the sink gets the range, and
    // the entry holds it.
    let stream = |r: &FetchRange, sink: &mut RangeSink<'_>| server.stream(r, 97, Some(500), sink);
    let mut got = Vec::new();
    let origin = cache
        .stream_through_keeping(&x, &r, true, &stream, &fetch, &mut gather(&mut got, None))
        .unwrap();
    assert!(got == expect(&r));
    assert_eq!(origin.fetched, got.len() as u64);
    assert_eq!(server.asked(), vec![r.chunks.clone()]);
    let (again, fetched) = cache.read_through(&x, &r, &fetch).unwrap();
    assert!(again == expect(&r));
    assert_eq!(fetched, 0, "the streamed range was not kept");
    assert!(server.asked().is_empty());

    // A range partly held: the gap streamed into an entry of its own, then the range handed
    // over from the entries once the xorb's lock is let go (another download of the same
    // chunks, impatient, is served from the cache from inside the sink).
    let r = range(&offsets, 8..16);
    let impatient = ChunkCache {
        patience: Duration::from_millis(200),
        ..ChunkCache::open(&cache.dir).with_min_range(0)
    };
    let mut got = Vec::new();
    let mut inner = None;
    let origin = {
        let mut sink = gather(&mut got, None);
        let mut probe = |at: u64, piece: &[u8]| {
            if inner.is_none() {
                inner = Some(impatient.read_through(&x, &r, &fetch).unwrap());
            }
            sink(at, piece)
        };
        cache
            .stream_through_keeping(&x, &r, true, &stream, &fetch, &mut probe)
            .unwrap()
    };
    assert!(got == expect(&r));
    assert_eq!(
        server.asked(),
        vec![12u32..16],
        "only the gap was fetched, once"
    );
    assert_eq!(origin.fetched, offsets[16] - offsets[12]);
    assert_eq!(origin.local, vec![8u32..12]);
    let (inner_bytes, inner_fetched) = inner.unwrap();
    assert!(inner_bytes == expect(&r));
    assert_eq!(inner_fetched, 0, "the lock was let go before the hand-over");
    let names = std::fs::read_dir(cache.xorb_dir(&x)).unwrap().count();

    // An entry damaged on disk (its length right, its chunk headers not): deleted, and the
    // range still comes whole, from the server.
    let damaged = cache
        .xorb_dir(&x)
        .join(entry_name(&range(&offsets, 12..16)));
    std::fs::write(&damaged, vec![0xff; (offsets[16] - offsets[12]) as usize]).unwrap();
    let r2 = range(&offsets, 4..16);
    let mut got = Vec::new();
    cache
        .stream_through_keeping(&x, &r2, true, &stream, &fetch, &mut gather(&mut got, None))
        .unwrap();
    assert!(got == expect(&r2));
    assert!(!damaged.exists(), "the damaged entry is deleted");
    assert_eq!(server.asked().last(), Some(&(4u32..16)));
    let mut got = Vec::new();
    let origin = cache
        .stream_through_keeping(&x, &r2, true, &stream, &fetch, &mut gather(&mut got, None))
        .unwrap();
    assert!(got == expect(&r2));
    assert_eq!(
        server.asked(),
        vec![12u32..16],
        "then only its chunks are fetched"
    );
    assert_eq!(origin.fetched, offsets[16] - offsets[12]);

    // Without `keep`, and a stream the sink stops half way: nothing new is stored.
    let y = XorbHash::from_hex(&"ef".repeat(32)).unwrap();
    let mut got = Vec::new();
    cache
        .stream_through_keeping(&y, &r, false, &stream, &fetch, &mut gather(&mut got, None))
        .unwrap();
    assert!(got == expect(&r));
    let mut got = Vec::new();
    cache
        .stream_through_keeping(
            &y,
            &r,
            true,
            &stream,
            &fetch,
            &mut gather(&mut got, Some(300)),
        )
        .unwrap();
    assert!(got.len() < expect(&r).len());
    let y_entries = std::fs::read_dir(cache.xorb_dir(&y))
        .map(|d| d.flatten().filter(|f| f.file_name() != ".lock").count())
        .unwrap_or(0);
    assert_eq!(
        y_entries, 0,
        "an incomplete or unkept range was stored (or its temporary file left)"
    );
    assert_eq!(
        std::fs::read_dir(cache.xorb_dir(&x)).unwrap().count(),
        names
    );
}
