//! Xorb format tests: the vectors of docs/test-vectors.md §6 and §7, the reference client's own xorbs
//! (golden fixtures), round-trip properties for every compression policy and every LZ4 encoder
//! option, limits, and never-panic checks on truncated, bit-flipped and mutated input (mutated
//! LZ4 frames are also checked against lz4_flex's FrameDecoder).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::fixtures;

use fixtures::{hex, splitmix64, unhex};
use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameEncoder, FrameInfo};
use proptest::prelude::*;
use std::io::{Read, Write};
use xet_format::hash::{xorb_hash, ChunkHash, ChunkRef, XorbHash};
use xet_format::xorb::bg4::{bg4_recommended, group_sizes, regroup, split};
use xet_format::xorb::compress::lz4_compress;
use xet_format::xorb::*;

fn f32_bytes(n: usize, scale: f32) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (i as f32 * scale).to_le_bytes())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// docs/test-vectors.md §6

#[test]
fn vectors_6_1_chunk_headers() {
    let cases = [
        (
            CompressionScheme::None,
            66051,
            131072,
            "00 030201 00 000002",
        ),
        (CompressionScheme::Lz4, 66051, 131072, "00 030201 01 000002"),
        (CompressionScheme::None, 12, 12, "00 0c0000 00 0c0000"),
        (CompressionScheme::Lz4, 30, 1000, "00 1e0000 01 e80300"),
    ];
    for (scheme, c, u, bytes) in cases {
        let h = ChunkHeader::new(scheme, c, u).unwrap();
        assert_eq!(h.encode().to_vec(), unhex(bytes));
        let raw: [u8; 8] = unhex(bytes).try_into().unwrap();
        assert_eq!(ChunkHeader::decode(&raw), Ok(h));
    }
}

#[test]
fn vectors_6_2_lz4_frames() {
    let frame = "04224d186040820f0000001f000100ffffffd16000000000000000000000";
    let zeros = vec![0u8; 1000];
    assert_eq!(hex(&lz4_compress(&zeros).unwrap()), frame);
    for scheme in [CompressionScheme::Lz4, CompressionScheme::Bg4Lz4] {
        let (used, payload) = compress_chunk(&zeros, scheme);
        assert_eq!((used, hex(&payload)), (scheme, frame.to_string()));
        let header = ChunkHeader::new(scheme, 30, 1000).unwrap();
        assert_eq!(decompress_chunk(&header, &unhex(frame)).unwrap(), zeros);
    }
    let small = "04224d18604082";
    let large = "04224d186050fb";
    for (len, header) in [(1, small), (65536, small), (65537, large), (131072, large)] {
        let data = vec![7u8; len];
        assert_eq!(hex(&lz4_compress(&data).unwrap()[..7]), header, "len {len}");
    }
}

#[test]
fn vectors_6_3_bg4_split() {
    let data: Vec<u8> = (0..10).collect();
    assert_eq!(hex(&split(&data)), "00040801050902060307");
    assert_eq!(regroup(&split(&data)), data);
    for n in [0usize, 1, 2, 3, 4, 8, 12, 64, 4096] {
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
        let s = split(&data);
        let naive: Vec<u8> = (0..4)
            .flat_map(|g| data.iter().skip(g).step_by(4).copied())
            .collect();
        assert_eq!(s, naive, "n = {n}");
        assert_eq!(regroup(&s), data, "n = {n}");
        let sizes = group_sizes(n);
        if n % 4 == 0 {
            assert_eq!(sizes, [n / 4; 4]);
        }
    }
    assert_eq!(split(&[1]), [1]);
    assert_eq!(split(&[1, 2]), [1, 2]);
    assert_eq!(split(&[1, 2, 3]), [1, 2, 3]);
    assert_eq!(split(&[1, 2, 3, 4, 5, 6, 7, 8]), [1, 5, 2, 6, 3, 7, 4, 8]);
}

#[test]
fn vectors_6_4_bg4_predictor() {
    assert!(!bg4_recommended(&[0u8; 1000]));
    assert_eq!(choose_scheme(&[0u8; 1000]), CompressionScheme::Lz4);
    let floats = f32_bytes(4096, 0.001);
    assert_eq!(floats.len(), 16384);
    assert!(bg4_recommended(&floats));
    assert_eq!(choose_scheme(&floats), CompressionScheme::Bg4Lz4);
    let random = splitmix64(0, 111_112);
    assert_eq!((random[0], random[127], random[111_111]), (175, 132, 118));
    assert!(!bg4_recommended(&random[..65536]));
    assert_eq!(choose_scheme(&random[..65536]), CompressionScheme::Lz4);
}

// ---------------------------------------------------------------------------------------------
// docs/test-vectors.md §7

const UPLOAD_58: &str = "000c0000000c000048656c6c6f20576f726c6421001e000001e8030004224d18
    6040820f0000001f000100ffffffd16000000000000000000000";

const STORED_234: &str = "000c0000000c000048656c6c6f20576f726c6421001e000001e8030004224d18
    6040820f0000001f000100ffffffd16000000000000000000000584554424c4f
    4201f06abd0eb6e2d626b7eb19994d492b525b86d5394556fa3a5611ac78c6ee
    a33d58424c424853480002000000a29cfb08e608d4d8726dd8659a90b9134b32
    40d5d8e42d5fcb28e2a6e763a3e87a51bffb1e5e5f145018b3907f6e4cb8f087
    85a88aaccf11e12dc25ce4a28b2058424c42424e440102000000140000003a00
    00000c000000f403000002000000840000003800000000000000000000000000
    000000000000ac000000";

const EXAMPLE_HASH: &str = "26d6e2b60ebd6af0522b494d9919ebb73afa564539d5865b3da3eec678ac1156";

fn worked_example(policy: CompressionPolicy, second_file: bool) -> BuiltXorb {
    let mut b = XorbBuilder::new(policy);
    assert_eq!(b.add_chunk(b"Hello World!").unwrap(), Push::Added(0));
    if second_file {
        b.start_file();
    }
    assert_eq!(b.add_chunk(&[0u8; 1000]).unwrap(), Push::Added(1));
    b.finish().unwrap()
}

#[test]
fn vectors_7_builder_writes_the_worked_example() {
    for (policy, second_file) in [
        (CompressionPolicy::Auto, false),
        (CompressionPolicy::Auto, true),
        (CompressionPolicy::Lz4, false),
    ] {
        let x = worked_example(policy, second_file);
        assert_eq!(x.hash().to_hex(), EXAMPLE_HASH);
        assert_eq!(
            hex(x.hash().as_bytes()),
            "f06abd0eb6e2d626b7eb19994d492b525b86d5394556fa3a5611ac78c6eea33d"
        );
        assert_eq!(x.upload_body(), unhex(UPLOAD_58));
        assert_eq!(x.stored_form(), unhex(STORED_234));
        assert_eq!(x.url_range(0..2).unwrap(), 0..=57);
        assert_eq!(x.url_range(0..1).unwrap(), 0..=19);
        assert_eq!(x.url_range(1..2).unwrap(), 20..=57);
        let schemes: Vec<_> = x.chunks().iter().map(|c| c.scheme).collect();
        assert_eq!(schemes, [CompressionScheme::None, CompressionScheme::Lz4]);
        assert_eq!(x.footer().chunk_boundary_offsets, [20, 58]);
        assert_eq!(x.footer().unpacked_chunk_offsets, Some(vec![12, 1012]));
    }
    // With BG4 forced, chunk B's bytes are the same but its header says scheme 2.
    let x = worked_example(CompressionPolicy::Bg4Lz4, false);
    let mut expected = unhex(UPLOAD_58);
    expected[24] = 2;
    assert_eq!(x.upload_body(), expected);
    // With compression off, both chunks are raw.
    let x = worked_example(CompressionPolicy::None, false);
    assert_eq!(x.upload_body().len(), 8 + 12 + 8 + 1000);
    assert_eq!(x.hash().to_hex(), EXAMPLE_HASH);
}

#[test]
fn vectors_7_reader_parses_the_worked_example() {
    let stored = unhex(STORED_234);
    let upload = unhex(UPLOAD_58);
    let hash = XorbHash::from_hex(EXAMPLE_HASH).unwrap();
    let opts = ReadOptions {
        expected_hash: Some(hash),
        ..ReadOptions::default()
    };
    for (bytes, form) in [
        (&stored[..], XorbForm::Stored),
        (&upload[..], XorbForm::Upload),
        (&stored[..230], XorbForm::UploadWithFooter),
    ] {
        let p = ParsedXorb::parse_with(bytes, &opts).unwrap();
        assert_eq!(p.form(), form);
        assert_eq!(p.hash(), hash);
        assert_eq!(p.chunk_region(), &upload[..]);
        let chunks = p.chunks();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].hash, ChunkHash::of(b"Hello World!"));
        assert_eq!((chunks[0].start, chunks[0].end), (0, 20));
        assert_eq!((chunks[1].start, chunks[1].end), (20, 58));
        assert_eq!(chunks[1].compressed_len(), 30);
        assert_eq!(chunks[1].uncompressed_len, 1000);
        assert_eq!(chunks[1].unpacked_start, 12);
        assert_eq!(chunks[1].scheme, CompressionScheme::Lz4);
        assert_eq!(p.extract(0..1).unwrap(), b"Hello World!");
        assert_eq!(p.extract(1..2).unwrap(), vec![0u8; 1000]);
        assert_eq!(p.extract(0..2).unwrap().len(), 1012);
        assert_eq!(p.url_range(0..2).unwrap(), 0..=57);
        assert_eq!(p.url_range(0..1).unwrap(), 0..=19);
        assert_eq!(p.url_range(1..2).unwrap(), 20..=57);
        assert!(p.url_range(1..1).is_err());
        assert_eq!(p.to_stored([0; 4]).unwrap(), stored);
    }

    // The footer-only parse.
    let (footer, start) = XorbFooter::from_stored(&stored).unwrap();
    assert_eq!(start, 58);
    assert_eq!(footer.version(), FooterVersion::V1);
    assert_eq!(footer.hash, hash);
    assert_eq!(footer.chunk_boundary_offsets, [20, 58]);
    assert_eq!(footer.unpacked_chunk_offsets, Some(vec![12, 1012]));
    assert_eq!(footer.encoded_len(), 172);
    assert_eq!(footer.url_range(1..2).unwrap(), 20..=57);
    assert_eq!(footer.encode_v1().unwrap(), &stored[58..]);

    // The server's rebuild from the upload body, with a nonce.
    let (h, with_nonce) = stored_from_upload(&upload, [9, 8, 7, 6], &opts).unwrap();
    assert_eq!(h, hash);
    assert_eq!(&with_nonce[214..218], &[9, 8, 7, 6]);
    assert_eq!(&with_nonce[..214], &stored[..214]);
    assert_eq!(&with_nonce[218..], &stored[218..]);
    let p = ParsedXorb::parse(&with_nonce).unwrap();
    assert_eq!(p.footer().unwrap().nonce(), [9, 8, 7, 6]);

    // The wrong expected hash is refused.
    let wrong = ReadOptions {
        expected_hash: Some(XorbHash::ZERO),
        ..ReadOptions::default()
    };
    assert!(matches!(
        ParsedXorb::parse_with(&stored, &wrong),
        Err(XorbError::HashMismatch { .. })
    ));
}

#[test]
fn legacy_v0_footer_is_read_and_rewritten_as_v1() {
    let stored = unhex(STORED_234);
    let mut v0 = stored[..58].to_vec();
    v0.extend_from_slice(b"XETBLOB\x00");
    v0.extend_from_slice(&stored[66..98]); // xorb hash
    v0.extend_from_slice(&2u32.to_le_bytes());
    v0.extend_from_slice(&20u32.to_le_bytes());
    v0.extend_from_slice(&58u32.to_le_bytes());
    v0.extend_from_slice(&stored[110..174]); // two chunk hashes
    v0.extend_from_slice(&[0xaa; 16]);
    v0.extend_from_slice(&(60u32 + 36 * 2).to_le_bytes());
    let p = ParsedXorb::parse(&v0).unwrap();
    assert_eq!(p.form(), XorbForm::Stored);
    assert_eq!(p.footer().unwrap().version(), FooterVersion::V0);
    assert_eq!(p.to_stored([0; 4]).unwrap(), stored);
    let (f, start) = XorbFooter::from_stored(&v0).unwrap();
    assert_eq!((f.version(), start), (FooterVersion::V0, 58));
    // A V0 footer that disagrees with the chunks is refused.
    let mut bad = v0.clone();
    bad[58 + 8 + 32 + 4] = 21;
    assert!(matches!(
        ParsedXorb::parse(&bad),
        Err(XorbError::Chunk {
            index: 0,
            problem: ChunkProblem::BoundaryMismatch { .. },
            ..
        })
    ));
}

// ---------------------------------------------------------------------------------------------
// Errors name the chunk and the offset.

/// Three valid chunks, then `header` at offset 3 × 20 = 60.
fn body_with_bad_fourth_chunk(header: [u8; 8]) -> Vec<u8> {
    let mut b = XorbBuilder::new(CompressionPolicy::None);
    for i in 0..3u8 {
        let _ = b.add_chunk(&[i; 12]).unwrap();
    }
    let mut body = b.finish().unwrap().into_upload_body();
    body.extend_from_slice(&header);
    body.extend_from_slice(&[0; 64]);
    body
}

#[test]
fn error_messages_name_chunk_and_offset() {
    let cases: [([u8; 8], &str); 5] = [
        (
            [0, 0xe0, 0x93, 0x04, 1, 0, 0, 1],
            "chunk 3 at offset 60: compressed_length 300000 exceeds 262144",
        ),
        (
            [0, 0, 0, 0, 1, 0x01, 0x00, 0x02],
            "chunk 3 at offset 60: uncompressed_length 131073 exceeds 131072",
        ),
        (
            [1, 0, 0, 0, 0, 0, 0, 0],
            "chunk 3 at offset 60: chunk header version 1 is not supported (only 0)",
        ),
        (
            [0, 0, 0, 0, 3, 0, 0, 0],
            "chunk 3 at offset 60: unknown compression scheme 3 (expected 0, 1 or 2)",
        ),
        (
            [0, 100, 0, 0, 0, 100, 0, 0],
            "chunk 3 at offset 60: truncated chunk payload at offset 68: need 100 bytes, only 64 left",
        ),
    ];
    for (header, message) in cases {
        let err = ParsedXorb::parse(&body_with_bad_fourth_chunk(header)).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    let message = |header| {
        ParsedXorb::parse(&body_with_bad_fourth_chunk(header))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        message([0, 64, 0, 0, 0, 63, 0, 0]),
        "chunk 3 at offset 60: scheme none with compressed_length 64 != uncompressed_length 63"
    );
    assert!(message([0, 64, 0, 0, 1, 63, 0, 0])
        .starts_with("chunk 3 at offset 60: invalid LZ4 frame: "));

    // A corrupted payload is caught by the footer's hash.
    let mut stored = unhex(STORED_234);
    stored[8] ^= 0x20; // "hello World!"
    let err = ParsedXorb::parse(&stored).unwrap_err();
    assert!(
        err.to_string().starts_with("chunk 0 at offset 0: hash is "),
        "{err}"
    );
    // A wrong xorb hash in the footer.
    let mut stored = unhex(STORED_234);
    stored[66] ^= 1;
    let err = ParsedXorb::parse(&stored).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("footer at offset 58: xorb hash is "),
        "{err}"
    );
    // A truncated footer.
    let err = ParsedXorb::parse(&unhex(STORED_234)[..100]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "truncated hashes section ident at offset 98: need 7 bytes, only 2 left"
    );
}

#[test]
fn lz4_frame_errors_name_chunk_block_and_offset() {
    // Chunk 3 at offset 60: a 64 KiB-block frame whose blocks 0 and 1 each hold 100 zero bytes
    // and whose block 2 (at payload offset 7 + 2 × 16 = 39) claims 300000 bytes.
    let zeros_100 = unhex("0c000000 1f0001004a6000000000 0000");
    let mut payload = unhex("04224d18 60 40 82");
    payload.extend_from_slice(&zeros_100);
    payload.extend_from_slice(&zeros_100);
    payload.extend_from_slice(&300_000u32.to_le_bytes());
    payload.extend_from_slice(&[0; 20]);
    let mut b = XorbBuilder::new(CompressionPolicy::None);
    for i in 0..3u8 {
        let _ = b.add_chunk(&[i; 12]).unwrap();
    }
    let mut body = b.finish().unwrap().into_upload_body();
    let header = ChunkHeader::new(CompressionScheme::Lz4, payload.len() as u32, 300).unwrap();
    body.extend_from_slice(&header.encode());
    body.extend_from_slice(&payload);
    assert_eq!(
        ParsedXorb::parse(&body).unwrap_err().to_string(),
        "chunk 3 at offset 60: invalid LZ4 frame: block 2 at offset 39: block size 300000 \
         exceeds the declared maximum 65536"
    );
    // Cut after block 1: no end mark.
    let cut = 60 + 8 + 39;
    let header = ChunkHeader::new(CompressionScheme::Lz4, 39, 200).unwrap();
    body[60..68].copy_from_slice(&header.encode());
    assert_eq!(
        ParsedXorb::parse(&body[..cut]).unwrap_err().to_string(),
        "chunk 3 at offset 60: invalid LZ4 frame: end of frame at offset 39: the payload ends \
         without an end mark"
    );
}

// ---------------------------------------------------------------------------------------------
// Limits

#[test]
fn default_limits_chunk_count() {
    let mut b = XorbBuilder::new(CompressionPolicy::None);
    for i in 0..MAX_XORB_CHUNKS {
        assert_eq!(b.add_chunk(&[i as u8]).unwrap(), Push::Added(i));
    }
    assert_eq!(b.add_chunk(&[0]).unwrap(), Push::Full);
    let x = b.finish().unwrap();
    assert_eq!(x.chunks().len(), 8192);
    let stored = x.stored_form();
    let p = ParsedXorb::parse(&stored).unwrap();
    assert_eq!(p.num_chunks(), 8192);
    // One more chunk than the server allows.
    let mut body = x.into_upload_body();
    body.extend_from_slice(&[0, 1, 0, 0, 0, 1, 0, 0, 42]);
    assert!(matches!(
        ParsedXorb::parse(&body),
        Err(XorbError::Chunk {
            index: 8192,
            problem: ChunkProblem::TooManyChunks { limit: 8192 },
            ..
        })
    ));
}

#[test]
fn default_limits_bytes() {
    // 64 MiB of uncompressed data, compressible: the data limit cuts.
    let zeros = vec![0u8; MAX_CHUNK_LEN as usize];
    let mut b = XorbBuilder::new(CompressionPolicy::Lz4);
    for i in 0..512 {
        assert_eq!(b.add_chunk(&zeros).unwrap(), Push::Added(i));
    }
    assert_eq!(b.uncompressed_len(), MAX_XORB_BYTES);
    assert_eq!(b.add_chunk(&[0]).unwrap(), Push::Full);
    assert_eq!(b.add_chunk(&[]).unwrap(), Push::Added(512));

    // Incompressible data: the 64 MiB body limit cuts first, at 511 chunks.
    let mut data = splitmix64(1, MAX_CHUNK_LEN as usize);
    let mut b = XorbBuilder::new(CompressionPolicy::None);
    for i in 0..511usize {
        data[..8].copy_from_slice(&(i as u64).to_le_bytes());
        assert_eq!(b.add_chunk(&data).unwrap(), Push::Added(i));
    }
    assert_eq!(b.body_len(), 511 * 131_080);
    assert_eq!(b.add_chunk(&data).unwrap(), Push::Full);
    // The server still accepts the 512th chunk (64 MiB + 64 KiB slack) but not our client limit.
    let mut body = b.finish().unwrap().into_upload_body();
    body.extend_from_slice(
        &ChunkHeader::new(CompressionScheme::None, 131_072, 131_072)
            .unwrap()
            .encode(),
    );
    body.extend_from_slice(&data);
    assert_eq!(ParsedXorb::parse(&body).unwrap().num_chunks(), 512);
    let client = ReadOptions {
        expected_hash: None,
        limits: XorbLimits::CLIENT,
    };
    assert!(matches!(
        ParsedXorb::parse_with(&body, &client),
        Err(XorbError::Chunk {
            index: 511,
            problem: ChunkProblem::BodyTooLong { .. },
            ..
        })
    ));
}

// ---------------------------------------------------------------------------------------------
// The reference client's own xorbs (crates/xet-format/tests/fixtures/reference, written by hf-xet 1.8.0 through
// local://): every one parses, and the builder reproduces it byte for byte from its chunks.

#[test]
fn reference_fixture_xorbs_parse_and_rebuild_identically() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reference");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("manifest.json")).unwrap()).unwrap();
    let mut seen = 0;
    for session in manifest["sessions"].as_array().unwrap() {
        let inputs: Vec<Vec<u8>> = session["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| std::fs::read(root.join("inputs").join(f["name"].as_str().unwrap())).unwrap())
            .collect();
        for path in session["xorbs"].as_array().unwrap() {
            let path = path.as_str().unwrap();
            let bytes = std::fs::read(root.join(path)).unwrap();
            let name = path.rsplit('/').next().unwrap().trim_end_matches(".xorb");
            let p = ParsedXorb::parse(&bytes).unwrap();
            assert_eq!(p.form(), XorbForm::Stored);
            assert_eq!(p.hash().to_hex(), name);
            assert_eq!(
                XorbFooter::from_stored(&bytes).unwrap().0,
                *p.footer().unwrap()
            );

            // These sessions' files are stored whole, so a file segment starts at every chunk
            // that begins one of the session's files.
            let mut b = XorbBuilder::new(CompressionPolicy::Auto);
            for i in 0..p.num_chunks() {
                let data = p.extract(i..i + 1).unwrap();
                if inputs.iter().any(|f| f.starts_with(&data)) {
                    b.start_file();
                }
                assert_eq!(b.add_chunk(&data).unwrap(), Push::Added(i));
            }
            let built = b.finish().unwrap();
            assert_eq!(built.stored_form(), bytes, "{path}");
            let (h, stored) =
                stored_from_upload(p.chunk_region(), [0; 4], &ReadOptions::default()).unwrap();
            assert_eq!((h, stored), (p.hash(), bytes));
            seen += 1;
        }
    }
    assert!(seen >= 5, "only {seen} fixture xorbs");
}

// ---------------------------------------------------------------------------------------------
// Round trips

fn chunk_data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..3000),
        (0usize..6000).prop_map(|n| vec![0u8; n]),
        (0usize..1500, 1u32..1000).prop_map(|(n, s)| f32_bytes(n, s as f32 * 1e-4)),
        (prop::collection::vec(any::<u8>(), 1..9), 0usize..6000).prop_map(|(pattern, n)| pattern
            .iter()
            .copied()
            .cycle()
            .take(n)
            .collect()),
    ]
}

fn policy() -> impl Strategy<Value = CompressionPolicy> {
    prop_oneof![
        Just(CompressionPolicy::Auto),
        Just(CompressionPolicy::None),
        Just(CompressionPolicy::Lz4),
        Just(CompressionPolicy::Bg4Lz4),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn build_read_extract_round_trip(
        chunks in prop::collection::vec((chunk_data(), any::<bool>()), 1..40),
        policy in policy(),
        retest in prop_oneof![Just(AUTO_RETEST_INTERVAL), 0usize..4],
        range in (any::<prop::sample::Index>(), any::<prop::sample::Index>()),
    ) {
        let mut b = XorbBuilder::new(policy).with_retest_interval(retest);
        let mut starts = vec![0];
        for (i, (data, new_file)) in chunks.iter().enumerate() {
            if *new_file && i > 0 {
                b.start_file();
                starts.push(i);
            }
            prop_assert_eq!(b.add_chunk(data).unwrap(), Push::Added(i));
        }
        prop_assert_eq!(b.segment_starts(), &starts[..]);
        let x = b.finish().unwrap();
        let data: Vec<&[u8]> = chunks.iter().map(|(d, _)| &d[..]).collect();
        let all: Vec<u8> = data.concat();
        let refs: Vec<ChunkRef> = data.iter().map(|d| ChunkRef::new(ChunkHash::of(d), d.len() as u64)).collect();
        prop_assert_eq!(x.hash(), xorb_hash(&refs));

        // Every chunk used the planned scheme, or None by the fallback.
        let plan = plan_schemes(policy, &data, &starts, retest);
        for (i, c) in x.chunks().iter().enumerate() {
            prop_assert_eq!(c.scheme, compress_chunk(data[i], plan[i]).0);
        }

        let stored = x.stored_form_with_nonce([1, 2, 3, 4]);
        for bytes in [x.upload_body(), &stored[..]] {
            let p = ParsedXorb::parse(bytes).unwrap();
            prop_assert_eq!(p.hash(), x.hash());
            prop_assert_eq!(p.chunks(), x.chunks());
            prop_assert_eq!(p.extract(0..data.len()).unwrap(), all.clone());
            let (i, j) = (range.0.index(data.len()), range.1.index(data.len() + 1));
            let (i, j) = (i.min(j), i.max(j));
            prop_assert_eq!(p.extract(i..j).unwrap(), data[i..j].concat());
            if i < j {
                let r = p.url_range(i..j).unwrap();
                prop_assert_eq!(*r.start(), x.chunks()[i].start);
                prop_assert_eq!(*r.end() + 1, x.chunks()[j - 1].end);
            }
        }
        let (h, rebuilt) = stored_from_upload(x.upload_body(), [1, 2, 3, 4], &ReadOptions::default()).unwrap();
        prop_assert_eq!(h, x.hash());
        prop_assert_eq!(rebuilt, stored);
    }

    #[test]
    fn compressed_chunks_round_trip(data in chunk_data(), policy in policy()) {
        let scheme = policy.fixed_scheme().unwrap_or_else(|| choose_scheme(&data));
        let c = CompressedChunk::new(&data, scheme).unwrap();
        prop_assert!(c.payload().len() <= data.len());
        prop_assert_eq!(decompress_chunk(c.header(), c.payload()).unwrap(), data);
    }
}

// ---------------------------------------------------------------------------------------------
// Never panic, never hang: truncated and corrupted input gives an error or a valid parse.

/// Parses `bytes`; if that succeeds, checks the result is self-consistent.
fn parse_checked(bytes: &[u8]) -> Option<ParsedXorb<'_>> {
    let p = ParsedXorb::parse(bytes).ok()?;
    let data = p.extract(0..p.num_chunks()).unwrap();
    assert_eq!(data.len() as u64, p.uncompressed_len());
    let refs: Vec<ChunkRef> = p.chunks().iter().map(|c| c.chunk_ref()).collect();
    assert_eq!(xorb_hash(&refs), p.hash());
    let again = p.to_stored([0; 4]).unwrap();
    assert_eq!(ParsedXorb::parse(&again).unwrap().hash(), p.hash());
    Some(p)
}

/// A xorb of a few hundred KiB with every scheme and several file segments.
fn bigger_xorb() -> BuiltXorb {
    let mut b = XorbBuilder::new(CompressionPolicy::Auto).with_retest_interval(3);
    let random = splitmix64(7, 200_000);
    let floats = f32_bytes(40_000, 0.001);
    let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog; "
        .iter()
        .copied()
        .cycle()
        .take(100_000)
        .collect();
    for (k, source) in [&random[..], &floats[..], &text[..], &[0u8; 9000][..]]
        .iter()
        .enumerate()
    {
        b.start_file();
        for piece in source.chunks(7919 + 1000 * k) {
            assert!(matches!(b.add_chunk(piece).unwrap(), Push::Added(_)));
        }
    }
    let x = b.finish().unwrap();
    for scheme in [
        CompressionScheme::None,
        CompressionScheme::Lz4,
        CompressionScheme::Bg4Lz4,
    ] {
        assert!(
            x.chunks().iter().any(|c| c.scheme == scheme),
            "no {scheme} chunk"
        );
    }
    x
}

#[test]
fn truncated_prefixes_of_the_worked_example() {
    let stored = unhex(STORED_234);
    for n in 0..stored.len() {
        match parse_checked(&stored[..n]) {
            None => {}
            Some(p) => {
                // Only whole chunk regions and the footer without info_length parse.
                assert!(
                    (n == 20 || n == 58 || n == 230),
                    "prefix of {n} bytes parsed as {:?}",
                    p.form()
                );
            }
        }
    }
    assert!(parse_checked(&stored).is_some());
}

#[test]
fn truncated_prefixes_of_a_bigger_xorb() {
    let x = bigger_xorb();
    let stored = x.stored_form();
    let ends: Vec<u64> = x.chunks().iter().map(|c| c.end).collect();
    let footer_start = x.upload_body().len();
    let mut lengths: Vec<usize> = (0..stored.len()).step_by(997).collect();
    lengths.extend(footer_start.saturating_sub(64)..stored.len());
    for n in lengths {
        if let Some(p) = parse_checked(&stored[..n]) {
            let ok = ends.contains(&(n as u64)) || n == stored.len() - 4 || n == stored.len();
            assert!(ok, "prefix of {n} bytes parsed as {:?}", p.form());
        }
    }
}

#[test]
fn every_bit_flip_of_the_worked_example() {
    for original in [unhex(STORED_234), unhex(UPLOAD_58)] {
        let mut bytes = original.clone();
        for i in 0..bytes.len() * 8 {
            bytes[i / 8] ^= 1 << (i % 8);
            if let Some(p) = parse_checked(&bytes) {
                // In the stored form only the ignored buffer bytes may change freely; anything
                // else that still parses must describe data with the same hash.
                let in_buffer = (214..230).contains(&(i / 8));
                if original.len() == 234 && !in_buffer {
                    assert_eq!(p.hash().to_hex(), EXAMPLE_HASH, "bit {i}");
                }
            }
            bytes[i / 8] ^= 1 << (i % 8);
        }
    }
}

#[test]
fn random_bit_flips_of_a_bigger_xorb() {
    let x = bigger_xorb();
    for original in [x.stored_form(), x.upload_body().to_vec()] {
        let positions = splitmix64(99, 8 * 400);
        for (k, word) in positions.chunks_exact(8).enumerate() {
            let r = u64::from_le_bytes(word.try_into().unwrap());
            let mut bytes = original.clone();
            let bit = (r % (bytes.len() as u64 * 8)) as usize;
            bytes[bit / 8] ^= 1 << (bit % 8);
            if k % 2 == 1 {
                // A second flip somewhere else.
                let bit2 = ((r >> 32) % (bytes.len() as u64 * 8)) as usize;
                bytes[bit2 / 8] ^= 1 << (bit2 % 8);
            }
            if let Some(p) = parse_checked(&bytes) {
                if original.len() > x.upload_body().len() {
                    assert_eq!(p.hash(), x.hash());
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// LZ4 frames from every encoder option decode; mutated frames never panic, and whatever we
// accept the reference decoder (lz4_flex's FrameDecoder, as xet-core reads) decodes the same.

fn encoder_options() -> impl Strategy<Value = (FrameInfo, bool, usize)> {
    (
        prop_oneof![
            Just(BlockSize::Auto),
            Just(BlockSize::Max64KB),
            Just(BlockSize::Max256KB),
            Just(BlockSize::Max1MB),
            Just(BlockSize::Max4MB),
        ],
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(usize::MAX), 1usize..70_000],
    )
        .prop_map(
            |(size, linked, block_sums, content_sum, content_size, piece)| {
                let mode = if linked {
                    BlockMode::Linked
                } else {
                    BlockMode::Independent
                };
                let info = FrameInfo::new()
                    .block_size(size)
                    .block_mode(mode)
                    .block_checksums(block_sums)
                    .content_checksum(content_sum);
                (info, content_size, piece)
            },
        )
}

/// Chunk-sized data of a few kinds, generated from a seed (cheaper than proptest byte vectors).
fn frame_data(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    (0usize..=max_len, any::<u64>(), 0u8..4).prop_map(|(len, seed, kind)| match kind {
        0 => splitmix64(seed, len),
        1 => vec![(seed % 3) as u8; len],
        2 => f32_bytes(len / 4 + 1, (seed % 1000 + 1) as f32 * 1e-4)[..len].to_vec(),
        _ => {
            let pattern = splitmix64(seed, 1 + (seed % 5000) as usize);
            pattern.iter().copied().cycle().take(len).collect()
        }
    })
}

/// One frame of `data`, flushing (ending a block) every `piece` bytes.
fn encode_frame(info: FrameInfo, content_size: bool, piece: usize, data: &[u8]) -> Vec<u8> {
    let info = if content_size {
        info.content_size(Some(data.len() as u64))
    } else {
        info
    };
    let mut enc = FrameEncoder::with_frame_info(info, Vec::new());
    for part in data.chunks(piece.max(1)) {
        enc.write_all(part).unwrap();
        enc.flush().unwrap();
    }
    enc.finish().unwrap()
}

fn reference_decode(frame: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    FrameDecoder::new(frame).read_to_end(&mut out).ok()?;
    Some(out)
}

/// Rewrites the header checksum of a frame whose descriptor is still whole, so that mutations
/// of the descriptor reach the checks behind it.
fn fix_header_checksum(frame: &mut [u8]) {
    if frame.len() < 7 || frame[..4] != [0x04, 0x22, 0x4d, 0x18] {
        return;
    }
    let flg = frame[4];
    let end = 6 + if flg & 8 != 0 { 8 } else { 0 } + if flg & 1 != 0 { 4 } else { 0 };
    if end < frame.len() {
        frame[end] = (twox_hash::XxHash32::oneshot(0, &frame[4..end]) >> 8) as u8;
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(prop::sample::Index, u8),
    SetByte(prop::sample::Index, u8),
    /// Overwrites 4 bytes: block sizes, checksums, magic numbers.
    SetWord(prop::sample::Index, u32),
    Truncate(prop::sample::Index),
    Insert(prop::sample::Index, u8),
    Remove(prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, v)| Mutation::SetByte(i, v)),
        (
            any::<prop::sample::Index>(),
            prop_oneof![
                any::<u32>(),
                0u32..300_000,
                (0u32..300_000).prop_map(|v| v | 1 << 31)
            ]
        )
            .prop_map(|(i, v)| Mutation::SetWord(i, v)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, v)| Mutation::Insert(i, v)),
        any::<prop::sample::Index>().prop_map(Mutation::Remove),
    ]
}

fn apply(frame: &mut Vec<u8>, m: &Mutation) {
    if frame.is_empty() {
        return;
    }
    let len = frame.len();
    match *m {
        Mutation::FlipBit(ref i, b) => frame[i.index(len)] ^= 1 << b,
        Mutation::SetByte(ref i, v) => frame[i.index(len)] = v,
        Mutation::SetWord(ref i, v) => {
            let at = i.index(frame.len());
            for (k, byte) in v.to_le_bytes().into_iter().enumerate() {
                if let Some(slot) = frame.get_mut(at + k) {
                    *slot = byte;
                }
            }
        }
        Mutation::Truncate(ref i) => frame.truncate(i.index(frame.len())),
        Mutation::Insert(ref i, v) => frame.insert(i.index(frame.len() + 1), v),
        Mutation::Remove(ref i) => {
            frame.remove(i.index(frame.len()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn lz4_frames_of_every_encoder_option_round_trip(
        data in frame_data(131_072),
        (info, content_size, piece) in encoder_options(),
    ) {
        let frame = encode_frame(info.clone(), content_size, piece, &data);
        let header = ChunkHeader::new(CompressionScheme::Lz4, frame.len() as u32, data.len() as u32).unwrap();
        prop_assert_eq!(decompress_chunk(&header, &frame).unwrap(), data.clone());
        // BG4-LZ4: the frame holds the split bytes.
        let frame = encode_frame(info, content_size, piece, &split(&data));
        let header = ChunkHeader::new(CompressionScheme::Bg4Lz4, frame.len() as u32, data.len() as u32).unwrap();
        prop_assert_eq!(decompress_chunk(&header, &frame).unwrap(), data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn mutated_lz4_frames_never_panic_and_decode_like_the_reference(
        data in frame_data(3000),
        (info, content_size, piece) in encoder_options(),
        mutations in prop::collection::vec(mutation(), 1..4),
        fix_checksum in any::<bool>(),
        claimed in prop_oneof![3 => Just(None), 1 => (0u32..=131_072).prop_map(Some)],
        bg4 in any::<bool>(),
    ) {
        let mut frame = encode_frame(info, content_size, piece.min(1000), &data);
        for m in &mutations {
            apply(&mut frame, m);
        }
        if fix_checksum {
            fix_header_checksum(&mut frame);
        }
        let expected = claimed.unwrap_or(data.len() as u32);
        let scheme = if bg4 { CompressionScheme::Bg4Lz4 } else { CompressionScheme::Lz4 };
        let header = ChunkHeader::new(scheme, frame.len() as u32, expected).unwrap();
        let mut out = b"prefix".to_vec();
        match decompress_chunk_into(&header, &frame, &mut out) {
            Ok(()) => {
                prop_assert_eq!(out.len(), 6 + expected as usize);
                let mut reference = reference_decode(&frame);
                if bg4 {
                    reference = reference.map(|grouped| regroup(&grouped));
                }
                prop_assert_eq!(reference.as_deref(), Some(&out[6..]));
            }
            Err(_) => prop_assert_eq!(&out, b"prefix"),
        }
    }
}
