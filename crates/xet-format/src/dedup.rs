//! Dedup probes: chunks of a file, besides the first and the globally eligible ones
//! (docs/format.md §5.1), that this project's server indexes for global dedup queries and that
//! its client asks about while nothing of a file has matched yet (docs/format.md §5.5).
//!
//! An edit at the very start of a file (a safetensors header rewritten, bytes inserted)
//! changes the first chunk, and the next eligible chunk (one in 1024) is typically tens of
//! megabytes further: a client that asks only about those sends everything in between again.
//! Content-defined chunking re-synchronises within a chunk or two after an edit, so asking
//! about the next few chunks, and about the chunks that span the first megabyte marks, finds
//! the file after a small edit or insertion near its start. A server that does not index
//! probes simply answers "not found"; a client asks at most [`MAX_PROBES`] of them per file.

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
}
