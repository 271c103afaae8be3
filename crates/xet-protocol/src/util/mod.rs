//! Small helpers every layer above [`format`](xet_format) shares, each written once: the
//! clock ([`now_unix`], [`now_ms`]), byte sizes ([`size`]), durations ([`duration`]), error chains ([`error`]), HTTP
//! `Range` headers ([`range`]), atomic file writes ([`fs`]), large buffers kept for reuse
//! ([`buffers`]), locks taken after a panic too ([`sync`]), secrets that never show themselves ([`secret`]), blocking work caught on async workers ([`worker`]), and the crate's only unsafe code, file mappings, system calls and allocator
//! settings ([`os`]).
//!
//! Nothing here knows about Xet, git or the agent; the format layer stays free of it (it reads
//! no clock and writes no file).

pub mod buffers;
pub mod duration;
pub mod error;
pub mod fs;
pub mod os;
pub mod range;
pub mod secret;
pub mod size;
pub mod sync;
pub mod worker;

/// Seconds since the Unix epoch (0 if the clock is set before it).
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_clock_is_past_2020() {
        assert!(super::now_unix() > 1_577_836_800);
    }
}
