//! Deterministic test data for this crate's tests and, with the `test-util` feature, for the
//! tests of crates built on it.

/// `n` bytes from a cheap deterministic generator seeded with `s` (an LCG's top byte).
pub fn pseudo_random(n: usize, mut s: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect()
}
