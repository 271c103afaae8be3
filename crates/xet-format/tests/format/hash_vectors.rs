//! Every hashing known-answer vector of docs/test-vectors.md §1–§4: the string form, chunk hashes, the
//! aggregated-hash reference table (18 cases, 54 salted file hashes, sizes beyond 32 bits),
//! verification, keyed and SHA-256 values.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::collections::HashMap;
use xet_format::hash::{
    aggregated_hash, file_hash, file_hash_with_salt, keyed_chunk_hash, verification_hash,
    xorb_hash, ChunkHash, ChunkRef, HmacKey, LfsOid, VerificationHash, XorbHash,
};
use xet_format::FileHash;

fn raw(hex: &str) -> [u8; 32] {
    let v: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

#[test]
fn string_form_rows() {
    let rows = [
        (
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918",
        ),
        (
            "16af3a84044b83d6be998a42e20399f2cc5650eaf99950639f50418aece7954e",
            "d6834b04843aaf16f29903e2428a99be635099f9ea5056cc4e95e7ec8a41509f",
        ),
        (
            "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
            "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        ),
    ];
    for (r, s) in rows {
        let h = ChunkHash::from_bytes(raw(r));
        assert_eq!(h.to_hex(), s);
        assert_eq!(ChunkHash::from_hex(s).unwrap(), h);
    }
}

#[test]
fn chunk_hash_rows() {
    let all: Vec<u8> = (0..=255u8).collect();
    let rows: [(&[u8], &str); 5] = [
        (
            b"Hello World!",
            "a29cfb08e608d4d8726dd8659a90b9134b3240d5d8e42d5fcb28e2a6e763a3e8",
        ),
        (
            b"",
            "105f7e4e78cff2e05f9a0e15af844fc315d9bade164266f9670f874910744d36",
        ),
        (
            &[0],
            "d57cf6db8c2993dfcfc090628dd2ae0729a6df88aaa09a7f1094658086f9fccf",
        ),
        (
            &all,
            "95c2fba78e22579f963f0fdececd019bf3522344cccff0882202e2dfa9d420b0",
        ),
        (
            &[0; 1000],
            "7a51bffb1e5e5f145018b3907f6e4cb8f08785a88aaccf11e12dc25ce4a28b20",
        ),
    ];
    for (input, r) in rows {
        assert_eq!(
            ChunkHash::of(input).to_bytes(),
            raw(r),
            "{} bytes",
            input.len()
        );
    }
}

#[test]
fn small_aggregate_cases() {
    let a = ChunkHash::from_hex("c28f58387a60d4aa200c311cda7c7f77f686614864f5869eadebf765d0a14a69")
        .unwrap();
    let b = ChunkHash::from_hex("6e4e3263e073ce2c0e78cc770c361e2778db3b054b98ab65e277fc084fa70f22")
        .unwrap();
    assert_eq!(
        xorb_hash(&[ChunkRef::new(a, 100), ChunkRef::new(b, 200)]).to_hex(),
        "be64c7003ccd3cf4357364750e04c9592b3c36705dee76a71590c011766b6c14"
    );
    let hello = ChunkRef::new(ChunkHash::of(b"Hello World!"), 12);
    let zeros = ChunkRef::new(ChunkHash::of(&[0; 1000]), 1000);
    assert_eq!(
        xorb_hash(&[hello, zeros]).to_hex(),
        "26d6e2b60ebd6af0522b494d9919ebb73afa564539d5865b3da3eec678ac1156"
    );
    assert_eq!(
        file_hash(&[hello, zeros]).to_hex(),
        "fcb28549853d84712bafa219d1e50ac48310c68b7d101b8740b21e7f86b37c93"
    );
    assert_eq!(xorb_hash(&[]), XorbHash::ZERO);
    assert_eq!(file_hash(&[]), FileHash::ZERO);
}

/// The reference table of §3.2, read from crates/xet-format/tests/fixtures/vectors/aggregated.txt.
#[test]
fn aggregated_hash_reference_table() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/vectors/aggregated.txt"),
    )
    .unwrap();
    let mut names: HashMap<String, ChunkRef> = HashMap::new();
    let mut current: Option<Vec<ChunkRef>> = None;
    let (mut cases, mut salted, mut big) = (0, 0, 0);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[0] {
            "name" => {
                let size: u64 = f[2].parse().unwrap();
                big += usize::from(size > u64::from(u32::MAX));
                names.insert(
                    f[1].into(),
                    ChunkRef::new(ChunkHash::from_hex(f[3]).unwrap(), size),
                );
            }
            "case" => {
                assert_eq!(f[2], "inputs");
                current = Some(f[3..].iter().map(|n| names[*n]).collect());
                cases += 1;
            }
            "xorb" => {
                let inputs = current.as_ref().unwrap();
                assert_eq!(xorb_hash(inputs).to_hex(), f[1], "case {cases}");
                // The raw-pair entry point agrees with the typed one.
                let pairs: Vec<([u8; 32], u64)> =
                    inputs.iter().map(|c| (c.hash.to_bytes(), c.len)).collect();
                assert_eq!(aggregated_hash(&pairs), xorb_hash(inputs).to_bytes());
            }
            "salt" => {
                assert_eq!(f[2], "file");
                let salt = ChunkHash::from_hex(f[1]).unwrap().to_bytes();
                let got = file_hash_with_salt(current.as_ref().unwrap(), &salt);
                assert_eq!(got.to_hex(), f[3], "case {cases}, salt {}", f[1]);
                salted += 1;
            }
            other => panic!("unexpected line kind {other}"),
        }
    }
    assert_eq!((names.len(), cases, salted, big), (108, 18, 54, 100));
}

#[test]
fn verification_keyed_and_sha256_rows() {
    let a = ChunkHash::from_bytes(raw(
        "aad4607a38588fc2777f7cda1c310c209e86f564486186f6694aa1d065f7ebad",
    ));
    let b = ChunkHash::from_bytes(raw(
        "2cce73e063324e6e271e360c77cc780e65ab984b053bdb78220fa74f08fc77e2",
    ));
    assert_eq!(
        a.to_hex(),
        "c28f58387a60d4aa200c311cda7c7f77f686614864f5869eadebf765d0a14a69"
    );
    assert_eq!(
        verification_hash([&a, &b]).to_hex(),
        "eb06a8ad81d588ac05d1d9a079232d9c1e7d0b07232fa58091caa7bf333a2768"
    );
    let term = [ChunkHash::of(b"Hello World!"), ChunkHash::of(&[0; 1000])];
    let v = verification_hash(&term);
    assert_eq!(
        v.to_bytes(),
        raw("c9594cadadd2bdc76a809a00dc35dc49a60c82b8528c265a5491ae3eb528c02e")
    );
    assert_eq!(
        v,
        VerificationHash::from_hex(
            "c7bdd2adad4c59c949dc35dc009a806a5a268c52b8820ca62ec028b53eae9154"
        )
        .unwrap()
    );

    let key = HmacKey::from_bytes([7; 32]);
    assert_eq!(
        keyed_chunk_hash(&key, &ChunkHash::of(b"Hello World!")).to_hex(),
        "382f6e4c9d9b34ce24b403ecc189256135b31bd7dcfc69e85819bf43b65a0416"
    );
    // A zero key means "not keyed".
    assert_eq!(keyed_chunk_hash(&HmacKey::ZERO, &term[0]), term[0]);

    let oid = LfsOid::of(b"Hello World!");
    assert_eq!(
        oid.to_metadata_ext_bytes(),
        raw("53fcf17f65b1837f5dd6a14881c12db92877d6a31f4b2dfc69906d1200d2dd4a")
    );
    // The string form of the stored (word-reversed) bytes is the ordinary SHA-256 hex.
    let some = LfsOid::of(b"some data");
    let stored = ChunkHash::from_bytes(some.to_metadata_ext_bytes());
    assert_eq!(
        stored.to_hex(),
        "1307990e6ba5ca145eb35e99182a9bec46531bc54ddf656a602c780fa0240dee"
    );
    assert_eq!(some.to_hex(), stored.to_hex());

    // The IETF draft's empty-file value, which the reference does NOT use (docs/format.md §6, item 1).
    let draft = blake3_keyed_zero();
    assert_eq!(
        draft.to_hex(),
        "638a6bc391964a85939d48f008e8bdbae6a7975e7ca2d87a3ce2492f4e4d8a4c"
    );
    assert_ne!(file_hash(&[]), FileHash::from_bytes(draft.to_bytes()));
}

/// `blake3_keyed(0, 0)` computed through the salted file hash of a one-item list whose only hash
/// is zero (the aggregate of one item is that item).
fn blake3_keyed_zero() -> FileHash {
    file_hash(&[ChunkRef::new(ChunkHash::ZERO, 0)])
}
