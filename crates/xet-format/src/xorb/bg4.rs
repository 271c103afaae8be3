//! BG4 byte grouping and the BG4 predictor (docs/format.md §3.5).
//!
//! Hand-written: both are specific to Xet, no crate implements them.
//!
//! *Split* writes the bytes at positions `i % 4 == 0`, then those at `i % 4 == 1`, `== 2` and
//! `== 3`, each group in order. With `n` bytes, `q = n / 4` and `r = n % 4`, the groups hold
//! `q + (r ≥ 1)`, `q + (r ≥ 2)`, `q + (r ≥ 3)` and `q` bytes. *Regroup* is the inverse; it needs
//! only the length, so a decoder recomputes the group sizes from the decompressed length.
//!
//! The *predictor* decides whether BG4 is likely to help: it compares the popcount histogram of
//! each byte position mod 4 with the pooled histogram (KL divergence) and recommends BG4 above
//! 0.02. Its arithmetic follows xet-core's `BG4Predictor::bg4_recommended` operation for
//! operation, including a NaN quirk (see [`max_kl_divergence`]), so that Auto scheme selection
//! agrees with the reference client chunk for chunk.

/// Sizes of the four groups of an `n`-byte input.
pub fn group_sizes(n: usize) -> [usize; 4] {
    let (q, r) = (n / 4, n % 4);
    [
        q + usize::from(r >= 1),
        q + usize::from(r >= 2),
        q + usize::from(r >= 3),
        q,
    ]
}

/// Splits `out` (whose length is the input length) into its four group slices.
fn groups_mut(out: &mut [u8]) -> [&mut [u8]; 4] {
    let [s0, s1, s2, _] = group_sizes(out.len());
    // The sizes sum to `out.len()`, so every split point is in range.
    let (g0, rest) = out.split_at_mut(s0);
    let (g1, rest) = rest.split_at_mut(s1);
    let (g2, g3) = rest.split_at_mut(s2);
    [g0, g1, g2, g3]
}

/// Same as [`groups_mut`] for reading.
fn groups(data: &[u8]) -> [&[u8]; 4] {
    let [s0, s1, s2, _] = group_sizes(data.len());
    let (g0, rest) = data.split_at(s0);
    let (g1, rest) = rest.split_at(s1);
    let (g2, g3) = rest.split_at(s2);
    [g0, g1, g2, g3]
}

/// The BG4 split: byte `i` goes to group `i % 4`.
pub fn split(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    let [g0, g1, g2, g3] = groups_mut(&mut out);
    let quads = data.chunks_exact(4);
    let tail = quads.remainder();
    for ((((q, a), b), c), d) in quads
        .zip(g0.iter_mut())
        .zip(g1.iter_mut())
        .zip(g2.iter_mut())
        .zip(g3.iter_mut())
    {
        if let [q0, q1, q2, q3] = *q {
            (*a, *b, *c, *d) = (q0, q1, q2, q3);
        }
    }
    // The last `r` bytes go to the last slot of groups 0..r.
    for (group, &byte) in [g0, g1, g2].into_iter().zip(tail) {
        if let Some(slot) = group.last_mut() {
            *slot = byte;
        }
    }
    out
}

/// The inverse of [`split`].
pub fn regroup(grouped: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; grouped.len()];
    let [g0, g1, g2, g3] = groups(grouped);
    let mut quads = out.chunks_exact_mut(4);
    for ((((q, &a), &b), &c), &d) in quads
        .by_ref()
        .zip(g0.iter())
        .zip(g1.iter())
        .zip(g2.iter())
        .zip(g3.iter())
    {
        if let [q0, q1, q2, q3] = q {
            (*q0, *q1, *q2, *q3) = (a, b, c, d);
        }
    }
    let tail = quads.into_remainder();
    for (slot, group) in tail.iter_mut().zip([g0, g1, g2]) {
        if let Some(&byte) = group.last() {
            *slot = byte;
        }
    }
    out
}

/// `H[g][k]`: how many bytes at positions `i % 4 == g` have `k` bits set.
pub fn popcount_histograms(data: &[u8]) -> [[u64; 9]; 4] {
    let mut h = [[0u64; 9]; 4];
    let quads = data.chunks_exact(4);
    let tail = quads.remainder();
    for q in quads {
        for (g, &byte) in h.iter_mut().zip(q) {
            g[byte.count_ones() as usize] += 1;
        }
    }
    for (g, &byte) in h.iter_mut().zip(tail) {
        g[byte.count_ones() as usize] += 1;
    }
    h
}

/// The largest KL divergence between a position group's popcount distribution and the pooled
/// one (+1 smoothing in the pooled counts, not in its total), exactly as xet-core computes it.
///
/// The quirk: a group with an empty bin contributes `0 · ln(0) = 0 · −∞ = NaN`, which makes that
/// group's divergence NaN, and `f64::max` ignores NaN. So groups with any empty bin are left out;
/// if every group has one (1000 zero bytes, say), the result is 0. Written literally, the
/// arithmetic below reproduces this without a special case.
pub fn max_kl_divergence(h: &[[u64; 9]; 4]) -> f64 {
    let mut pooled = [1u64; 9];
    let mut totals = [0u64; 4];
    for (g, total) in h.iter().zip(totals.iter_mut()) {
        for (k, &count) in g.iter().enumerate() {
            pooled[k] += count;
            *total += count;
        }
    }
    let pooled_total: u64 = totals.iter().sum();
    let mut best = 0f64;
    for (g, &total) in h.iter().zip(totals.iter()) {
        let mut kl = 0f64;
        for (&count, &base) in g.iter().zip(pooled.iter()) {
            let p = count as f64 / total as f64;
            let q = base as f64 / pooled_total as f64;
            kl += p * (p / q).ln();
        }
        best = best.max(kl);
    }
    best
}

/// The divergence above which the predictor recommends BG4.
pub const BG4_THRESHOLD: f64 = 0.02;

/// True if the predictor recommends BG4-LZ4 over LZ4 for `data`.
pub fn bg4_recommended(data: &[u8]) -> bool {
    max_kl_divergence(&popcount_histograms(data)) > BG4_THRESHOLD
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of §3.5 written in the most obvious way, to check the fast version against.
    fn split_naive(data: &[u8]) -> Vec<u8> {
        (0..4)
            .flat_map(|g| data.iter().skip(g).step_by(4).copied())
            .collect()
    }

    #[test]
    fn split_matches_the_rule_for_every_small_length() {
        for n in 0..=41usize {
            let data: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37)).collect();
            let s = split(&data);
            assert_eq!(s, split_naive(&data), "n = {n}");
            assert_eq!(regroup(&s), data, "n = {n}");
            assert_eq!(group_sizes(n).iter().sum::<usize>(), n);
        }
    }

    #[test]
    fn illustration_of_the_spec() {
        let data: Vec<u8> = (0..10).collect();
        assert_eq!(split(&data), [0, 4, 8, 1, 5, 9, 2, 6, 3, 7]);
        assert_eq!(group_sizes(10), [3, 3, 2, 2]);
    }

    #[test]
    fn histograms_count_by_position() {
        let h = popcount_histograms(&[0xff, 0, 1, 3, 0xff]);
        assert_eq!(h[0][8], 2);
        assert_eq!(h[1][0], 1);
        assert_eq!(h[2][1], 1);
        assert_eq!(h[3][2], 1);
    }

    #[test]
    fn empty_bins_make_a_group_drop_out() {
        // All groups have empty bins: every divergence is NaN and ignored.
        assert_eq!(max_kl_divergence(&popcount_histograms(&[0u8; 1000])), 0.0);
        assert!(!bg4_recommended(&[0u8; 1000]));
        assert!(!bg4_recommended(&[]));
    }
}
