//! Dedup probes: chunks of a file, besides the first and the globally eligible ones
//! (docs/format.md §5.1), that this project's server indexes for global dedup queries and that
//! its client asks about (docs/format.md §5.5).
//!
//! **File-start probes.** An edit at the very start of a file (a safetensors header rewritten,
//! bytes inserted) changes the first chunk, and the next eligible chunk (one in 1024) is
//! typically tens of megabytes further: a client that asks only about those sends everything in
//! between again. Content-defined chunking re-synchronises within a chunk or two after an edit,
//! so asking about the next few chunks, and about the chunks that span the first megabyte marks,
//! finds the file after a small edit or insertion near its start. A server that does not index
//! probes simply answers "not found"; a client asks at most [`MAX_PROBES`] of them per file.
//!
//! **Run probes.** Anywhere in a file, a *run* of chunks the client cannot match (after chunks
//! an earlier version of the file covered, say) may hold a region another file stored: tensors
//! another repository pushed, inserted in the middle of a model. The region's chunks sit at
//! other positions in that file, so position-keyed probes cannot find them. A server that
//! indexes *dense keys* ([`is_dense_key`]: every stored chunk whose hash is `0 mod`
//! [`DENSE_KEY_MODULUS`], about one every 4 MiB) and says so can be asked about a run's first
//! chunks (a region copied from the start of a stored file meets that file's first chunk or
//! file-start probes) and its dense keys (a region from anywhere in a stored file);
//! [`RunProbes`] decides which, within a budget per run and per file.

use crate::ChunkHash;

/// The chunks at these positions (0-based, in file order) are probes: the first chunk's
/// neighbours.
pub const LEADING_PROBES: usize = 3;

/// The chunk that spans each of these file offsets is a probe.
pub const PROBE_OFFSETS: [u64; 6] = [1 << 20, 2 << 20, 3 << 20, 4 << 20, 6 << 20, 8 << 20];

/// Files smaller than this are not probed: an edit costs at most the file itself, and a push
/// of many small files would otherwise pay requests for each.
pub const MIN_PROBED_FILE: u64 = 1 << 20;

/// No chunk that starts past this offset is a probe (the largest of [`PROBE_OFFSETS`]).
pub const LAST_PROBE_OFFSET: u64 = 8 << 20;

/// At most this many probe queries per file, besides the first chunk's.
pub const MAX_PROBES: usize = LEADING_PROBES - 1 + PROBE_OFFSETS.len();

/// Whether the chunk at `position` in its file, covering file bytes `start..end`, is a probe
/// (the first chunk included).
pub fn is_probe(position: usize, start: u64, end: u64) -> bool {
    position < LEADING_PROBES || PROBE_OFFSETS.iter().any(|&o| start <= o && o < end)
}

/// The server's dense keys are the stored chunks whose hash is `0 mod` this (a power of two
/// that divides 1024: every globally eligible chunk is a dense key).
pub const DENSE_KEY_MODULUS: u64 = 64;

/// Whether a server that indexes dense keys indexes the chunk `hash` (see the module
/// documentation).
pub fn is_dense_key(hash: &ChunkHash) -> bool {
    hash.modulo(DENSE_KEY_MODULUS) == 0
}

/// The first chunks of each run that are asked about.
pub const RUN_LEADING_PROBES: usize = 3;

/// Dense-key misses in one run after which its dense probes thin out: each time, only the dense
/// keys whose hash is `0 mod` twice the modulus before are asked about, until that is 1024 (the
/// globally eligible chunks, asked about anyway). A run of new data costs at most
/// `DENSE_MISSES_PER_LEVEL × log2(1024 / modulus)` dense queries (32 with the modulus 64) over
/// its first 480 MiB or so, then none.
pub const DENSE_MISSES_PER_LEVEL: u32 = 8;

/// At most this many run probes per file, leading and dense (an eligible chunk asked about ahead
/// as a dense key counts too; the first chunk and the file-start probes do not).
pub const MAX_RUN_PROBES: usize = 64;

/// Which chunks of one file's runs are asked about (see the module documentation). Pure
/// bookkeeping: the caller says which chunks matched, asks whether a chunk is a probe, and
/// reports each probe it sent.
///
/// A run opens at the first chunk that matched nothing the client knew when it reached it
/// ([`Self::unmatched`]), and ends at the next chunk that matched ([`Self::matched`]). Within a
/// run, the leading probes are its first [`RUN_LEADING_PROBES`] chunks, and the dense probes
/// its dense keys (thinned as [`DENSE_MISSES_PER_LEVEL`] says). A run whose probe found
/// something asks nothing more: what the answer taught matches the chunks that follow. At most
/// [`MAX_RUN_PROBES`] probes per file.
#[derive(Debug, Clone)]
pub struct RunProbes {
    /// The dense-key modulus the server indexes (`None`: it indexes none, and runs are not
    /// probed).
    modulus: Option<u64>,
    run: Option<Run>,
    sent: usize,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    start: usize,
    dense_misses: u32,
    hit: bool,
}

impl RunProbes {
    /// For a file uploaded to a server that indexes dense keys with `modulus` (as it said; see
    /// [`Self::usable_modulus`]), or to one that does not (`None`): no run is probed then.
    pub fn new(modulus: Option<u64>) -> Self {
        Self {
            modulus: modulus.and_then(Self::usable_modulus),
            run: None,
            sent: 0,
        }
    }

    /// The modulus a server announced, if this client can use it: a power of two between 2 and
    /// 1024 (so that every eligible chunk is a dense key and thinning ends at the eligible ones).
    pub fn usable_modulus(modulus: u64) -> Option<u64> {
        (modulus.is_power_of_two() && (2..=1024).contains(&modulus)).then_some(modulus)
    }

    /// The chunk at this point of the file matched: the open run, if any, ends.
    pub fn matched(&mut self) {
        self.run = None;
    }

    /// The chunk at `position` matched nothing known: it opens a run unless one is open.
    pub fn unmatched(&mut self, position: usize) {
        if self.run.is_none() {
            self.run = Some(Run {
                start: position,
                dense_misses: 0,
                hit: false,
            });
        }
    }

    /// Takes the modulus the server announced now (see [`Self::new`]): a remote server says it
    /// on every dedup answer.
    pub fn set_modulus(&mut self, modulus: Option<u64>) {
        self.modulus = modulus.and_then(Self::usable_modulus);
    }

    /// The position of the open run's first chunk, if a run is open.
    pub fn run_start(&self) -> Option<usize> {
        self.run.map(|run| run.start)
    }

    /// Whether the open run may still be probed (the server indexes dense keys, no probe of the
    /// run hit, the file's budget is not spent).
    pub fn may_probe(&self) -> bool {
        self.probing().is_some()
    }

    /// The open run, if it may still be probed.
    fn probing(&self) -> Option<Run> {
        self.modulus?;
        let run = self.run?;
        (!run.hit && self.sent < MAX_RUN_PROBES).then_some(run)
    }

    /// Whether the unmatched chunk at `position` is a leading probe of the open run.
    pub fn is_leading(&self, position: usize) -> bool {
        self.probing()
            .is_some_and(|run| position.saturating_sub(run.start) < RUN_LEADING_PROBES)
    }

    /// Whether a chunk of the open run (the current one, or one ahead of it) with this hash is
    /// a dense probe to ask about now.
    pub fn is_dense(&self, hash: &ChunkHash) -> bool {
        let (Some(run), Some(modulus)) = (self.probing(), self.modulus) else {
            return false;
        };
        let level = run.dense_misses / DENSE_MISSES_PER_LEVEL;
        let thinned = modulus.checked_shl(level).unwrap_or(u64::MAX);
        thinned < 1024 && hash.modulo(thinned) == 0
    }

    /// A run probe was sent (`dense`: a dense one); `hit`: the server had the chunk. After a
    /// hit the run asks nothing more.
    pub fn sent(&mut self, dense: bool, hit: bool) {
        self.sent += 1;
        if let Some(run) = &mut self.run {
            run.hit |= hit;
            if dense && !hit {
                run.dense_misses += 1;
            }
        }
    }

    /// Run probes sent for this file.
    pub fn count(&self) -> usize {
        self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_the_first_chunks_and_those_spanning_the_marks() {
        assert!(is_probe(0, 0, 100));
        assert!(is_probe(2, 200, 300));
        assert!(!is_probe(3, 300, 400));
        assert!(is_probe(17, (1 << 20) - 5, (1 << 20) + 5));
        assert!(is_probe(17, 1 << 20, (1 << 20) + 5), "starts on the mark");
        assert!(!is_probe(17, (1 << 20) - 5, 1 << 20), "ends on the mark");
        assert!(!is_probe(500, 9 << 20, 10 << 20));
        // Consecutive chunks of a file: exactly one spans each mark.
        let mut start = 0u64;
        let mut probes = 0;
        for i in 0..300 {
            let end = start + 40_000 + (i as u64 * 7919) % 50_000;
            probes += usize::from(is_probe(i, start, end));
            start = end;
        }
        assert!(start > 9 << 20);
        assert_eq!(probes, LEADING_PROBES + PROBE_OFFSETS.len());
        assert_eq!(MAX_PROBES, probes - 1);
        assert_eq!(PROBE_OFFSETS.iter().max(), Some(&LAST_PROBE_OFFSET));
    }

    /// A chunk hash whose `hash % n` word (§1.2) is `word`.
    fn hash_with(word: u64) -> ChunkHash {
        let mut bytes = [7u8; 32];
        bytes[24..].copy_from_slice(&word.to_le_bytes());
        ChunkHash::from_bytes(bytes)
    }

    #[test]
    fn dense_keys_include_every_eligible_chunk() {
        for word in [0u64, 1024, 5 << 10, 64, 3 * 64] {
            assert!(is_dense_key(&hash_with(word)), "{word}");
        }
        for word in [1u64, 32, 65, 1000] {
            assert!(!is_dense_key(&hash_with(word)), "{word}");
        }
        for word in 0..100_000u64 {
            let h = hash_with(word * 7);
            assert!(!h.is_global_dedup_eligible() || is_dense_key(&h));
        }
        assert_eq!(RunProbes::usable_modulus(DENSE_KEY_MODULUS), Some(64));
        for bad in [0, 1, 3, 96, 2048] {
            assert_eq!(RunProbes::usable_modulus(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_server_without_dense_keys_gets_no_run_probes() {
        for modulus in [None, Some(0), Some(100)] {
            let mut runs = RunProbes::new(modulus);
            runs.unmatched(5);
            assert!(!runs.is_leading(5));
            assert!(!runs.is_dense(&hash_with(0)));
        }
    }

    #[test]
    fn each_run_asks_about_its_first_chunks_until_one_hits() {
        let mut runs = RunProbes::new(Some(DENSE_KEY_MODULUS));
        assert!(!runs.is_leading(0), "no run is open");
        // Chunks 0..9 matched (an earlier version's), then a run opens at 10.
        runs.matched();
        assert_eq!(runs.run_start(), None);
        runs.unmatched(10);
        runs.unmatched(11);
        assert_eq!(runs.run_start(), Some(10));
        assert!(runs.is_leading(10) && runs.is_leading(11) && runs.is_leading(12));
        assert!(!runs.is_leading(13));
        runs.sent(false, false);
        runs.sent(false, false);
        // The run ends at a matched chunk; the next run has leading probes of its own.
        runs.matched();
        runs.unmatched(40);
        assert!(runs.is_leading(40) && runs.is_leading(42) && !runs.is_leading(43));
        // A hit ends the run's probing, its dense probes too; the next run probes again.
        runs.sent(false, true);
        assert!(!runs.is_leading(41));
        assert!(!runs.is_dense(&hash_with(0)));
        runs.unmatched(41);
        assert!(!runs.is_leading(41), "still the same run");
        runs.matched();
        runs.unmatched(90);
        assert!(runs.is_leading(90));
        assert!(runs.is_dense(&hash_with(64)));
        assert_eq!(runs.count(), 3);
    }

    #[test]
    fn dense_probes_thin_out_as_a_run_misses_and_stop_at_the_eligible_chunks() {
        let mut runs = RunProbes::new(Some(DENSE_KEY_MODULUS));
        runs.unmatched(0);
        assert!(!runs.is_dense(&hash_with(32)), "not a dense key");
        // Each level: DENSE_MISSES_PER_LEVEL misses at modulus 64, then 128, 256, 512.
        let mut asked = 0;
        for level in 0..4u32 {
            let modulus = DENSE_KEY_MODULUS << level;
            assert!(runs.is_dense(&hash_with(modulus)), "level {level}");
            if level > 0 {
                assert!(!runs.is_dense(&hash_with(modulus / 2)), "level {level}");
            }
            for _ in 0..DENSE_MISSES_PER_LEVEL {
                assert!(runs.is_dense(&hash_with(modulus * 3)));
                runs.sent(true, false);
                asked += 1;
            }
        }
        // Past 512, only eligible chunks would remain: those are asked about anyway.
        assert!(!runs.is_dense(&hash_with(1024)));
        assert!(!runs.is_dense(&hash_with(512)));
        assert_eq!(asked, 32);
        // Misses of leading probes do not thin the dense ones.
        let mut runs = RunProbes::new(Some(DENSE_KEY_MODULUS));
        runs.unmatched(0);
        for _ in 0..RUN_LEADING_PROBES {
            runs.sent(false, false);
        }
        assert!(runs.is_dense(&hash_with(64)));
    }

    #[test]
    fn a_file_gets_at_most_max_run_probes() {
        let mut runs = RunProbes::new(Some(DENSE_KEY_MODULUS));
        let mut sent = 0;
        // Many short runs, each asking its leading chunks.
        for run in 0..1000usize {
            runs.matched();
            runs.unmatched(run * 10);
            for position in run * 10..run * 10 + 5 {
                if runs.is_leading(position) {
                    runs.sent(false, false);
                    sent += 1;
                }
            }
        }
        assert_eq!(sent, MAX_RUN_PROBES);
        assert_eq!(runs.count(), MAX_RUN_PROBES);
        assert!(!runs.is_dense(&hash_with(0)));
    }
}
