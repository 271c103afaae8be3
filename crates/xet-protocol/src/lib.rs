//! What both sides of the Xet protocol share, above the pure formats of [`xet_format`] and
//! below the HTTP client (`xet-client`) and the storage engine (`xet-store`), so that neither
//! of those depends on the other:
//!
//! | module | owns |
//! |---|---|
//! | [`wire`] | the JSON bodies and error codes of the CAS API, as servers send them and clients read them |
//! | [`target`] | the traits every place objects live implements: [`CasTarget`] (uploads), [`XorbSource`] (downloads), [`Endpoint`] (both, plus reconstruction plans) |
//! | [`reconstruction`] | planning a file's (ranged) reconstruction from its terms and xorb footers (pure) |
//! | [`redact`] | text made safe to show: secrets masked (pure) |
//! | [`util`] | the clock, sizes, durations, error chains, `Range` headers, atomic writes, buffers, secrets, and the workspace's only unsafe code |
//!
//! Nothing here speaks HTTP, opens a database or knows about git.

// Tests may unwrap, expect and panic: a failing test should stop right there.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod reconstruction;
pub mod redact;
pub mod target;
pub mod util;
pub mod wire;

pub use reconstruction::{FetchRange, PlannedTerm, ReconstructionPlan};
pub use target::{
    CasTarget, Endpoint, Origin, RangeSink, ReadOnce, Tallied, TargetError, UploadClaim, XorbPut,
    XorbSource,
};

/// `n` random bytes as hex, for unique temporary names and secrets.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    // The OS random source failing is not recoverable; fall back to the clock so that names stay
    // unique enough (secrets use `random_bytes`, which reports the failure).
    if getrandom::fill(&mut bytes).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (t >> ((i % 16) * 8)) as u8;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` bytes from the operating system's random source, for keys and secrets.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], getrandom::Error> {
    let mut out = [0u8; N];
    getrandom::fill(&mut out)?;
    Ok(out)
}
