//! Property tests for LFS pointers: canonical round trips, and no panic on arbitrary bytes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use proptest::prelude::*;
use xet_format::pointer::{Pointer, PointerExtension};
use xet_format::LfsOid;

fn arb_pointer() -> impl Strategy<Value = Pointer> {
    let ext = (any::<[u8; 32]>(), "[A-Za-z0-9_]{1,12}");
    (
        any::<[u8; 32]>(),
        0..=i64::MAX as u64,
        proptest::collection::btree_map(0u8..10, ext, 0..4),
    )
        .prop_map(|(oid, size, exts)| Pointer {
            oid: LfsOid::from_digest(oid),
            size,
            extensions: exts
                .into_iter()
                .map(|(priority, (oid, name))| PointerExtension {
                    priority,
                    name,
                    oid: LfsOid::from_digest(oid),
                })
                .collect(),
        })
}

proptest! {
    #[test]
    fn encode_then_parse_is_identity(p in arb_pointer()) {
        let text = p.encode();
        prop_assert!(text.len() < 1024);
        prop_assert_eq!(Pointer::parse(text.as_bytes()).unwrap(), p);
    }

    #[test]
    fn parse_accepts_only_what_encode_writes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(p) = Pointer::parse(&bytes) {
            // Anything accepted re-encodes to the same bytes (version aliases aside, which
            // random bytes cannot produce with a valid oid line).
            prop_assert_eq!(p.encode().into_bytes(), bytes);
        }
    }

    #[test]
    fn mutated_pointers_never_panic(p in arb_pointer(), pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = p.encode().into_bytes();
        let i = pos.index(bytes.len());
        bytes[i] = byte;
        if let Ok(q) = Pointer::parse(&bytes) {
            prop_assert_eq!(q.encode().into_bytes(), bytes);
        }
    }
}
