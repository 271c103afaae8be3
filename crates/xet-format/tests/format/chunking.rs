//! Known-answer and property tests for content-defined chunking: every chunking vector of
//! docs/test-vectors.md §5 (SplitMix64 seed 0, constant 0x3B, the 128 hitting-data cases, streaming in
//! pieces), and properties tying the streaming and parallel chunkers to the canonical loop.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::fixtures;

use fixtures::splitmix64;
use proptest::prelude::*;
use xet_format::chunking::{
    chunk_boundaries, chunk_boundaries_parallel, Chunker, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE,
};
use xet_format::hash::{file_hash, xorb_hash};
use xet_format::{ChunkHash, ChunkRef, FileHash, XorbHash};

const SEED0_BOUNDARIES: [usize; 19] = [
    84493, 134421, 144853, 243318, 271793, 336457, 467529, 494581, 582000, 596735, 616815, 653164,
    678202, 724510, 815591, 827760, 958832, 991092, 1000000,
];

const SEED0_CHUNK_HASHES: [&str; 19] = [
    "6eca1e7dadaf08cca5d82d318c800f07c2ddcec115a7e8627e5edd9605b94b8d",
    "624ea34d72a06e5d43a1b8dd10763f0d22f165992c397ed97563899b27fdd88a",
    "4411d2ec847c6e3f451a7451ff3933adb4f1c31587421b9f730b698a78313b47",
    "6342bde97433e29e0779ad33eb8040d986679040361b3cc3a06230fe60dd6c9b",
    "405253fcf15bba751adc4f507d3453273daff81ed4d8acd71c521aa1cbddc0b5",
    "4482374af7f8bebfdb5c5df0299f80128d6c58886ad7b218c562b1d74064e4cb",
    "80acc8d39c853b4b8a8c6ad7b63bf2ea68f62c2226b92f06349f92cc84d213cc",
    "a7076d7d343f711fb20fe6cd023248d8d051e8fe7d44172596cd5c7ea7edaf65",
    "44755217bbb4dadc81ea7695765230a34a2e6cb3b55f373f1de35aeba79ae92c",
    "001adc1d302d5f039278325dcbd5ec3b194f4794f1629d6f962f9f4bb78a7bff",
    "f8460a337c186f07c2e225bb287a1d3d3d686dc69d0828e99640f7d8852c5b90",
    "c9bc3da29025dc1ba562d303d815151d9a937367abb766ae842a165e8493d9fe",
    "5044339dfd65e8163bdfe642614a6be604b04d6aeacf222cf219ad287bfc5cf1",
    "163622db0fe0da93f2ef964eed4c485f3c7a9c312f8e8e8a312ab4bb8141f13e",
    "e1730534a858aa0258ad8904ef12b829b8a123a1c611250275c9ca9471e4c650",
    "1fbc6854f9185caba1e1f55393f41f83b895b18f9c99245c029025ca48f1e14b",
    "8a27b66ccf05b864b6bef6fb5c970fe894f73d2330e8e98fe7841dcdbd9e9576",
    "bc70a33e7a9ec820cac24b87023469a57bdae1bf91cc3961b95806c64a525221",
    "03e5b5f5a088269ec4b329f1e04debfac4cb54b9c0facf038f7e8e0f054be7e2",
];

/// The 128-byte PATTERN of the hitting-data cases (format Appendix B).
const HITTING_PATTERN: [u8; 128] = [
    154, 52, 42, 34, 159, 75, 126, 224, 70, 236, 12, 196, 79, 236, 178, 124, 127, 50, 99, 178, 44,
    176, 174, 126, 250, 235, 205, 174, 252, 122, 35, 10, 20, 101, 214, 69, 193, 8, 115, 105, 158,
    228, 120, 111, 136, 162, 198, 251, 211, 183, 253, 252, 164, 147, 63, 16, 186, 162, 117, 23,
    170, 36, 205, 187, 174, 76, 210, 174, 211, 175, 12, 173, 145, 59, 2, 70, 222, 181, 159, 227,
    182, 156, 189, 51, 226, 106, 24, 50, 183, 157, 140, 10, 8, 23, 212, 70, 10, 234, 23, 33, 219,
    254, 39, 236, 70, 49, 191, 116, 9, 115, 15, 101, 26, 159, 165, 220, 15, 170, 56, 125, 92, 163,
    94, 235, 38, 40, 49, 81,
];

/// Expected chunk end offsets of hitting-data case `p` (row `p`).
const HITTING_ROWS: [[usize; 8]; 128] = [
    [8256, 16448, 24640, 32832, 41024, 49216, 57408, 65536],
    [8320, 16576, 24832, 33088, 41344, 49600, 57856, 65536],
    [8254, 16574, 24894, 33214, 41534, 49854, 58174, 65536],
    [8317, 16570, 24823, 33076, 41329, 49582, 57835, 65536],
    [8248, 16564, 24880, 33196, 41512, 49828, 58144, 65536],
    [8310, 16556, 24802, 33048, 41294, 49540, 57786, 65536],
    [8238, 16546, 24854, 33162, 41470, 49778, 58086, 65536],
    [8299, 16534, 24769, 33004, 41239, 49474, 57709, 65536],
    [8224, 16520, 24816, 33112, 41408, 49704, 58000, 65536],
    [8284, 16504, 24724, 32944, 41164, 49384, 57604, 65536],
    [8206, 16486, 24766, 33046, 41326, 49606, 57886, 65536],
    [8265, 16466, 24667, 32868, 41069, 49270, 57471, 65536],
    [8324, 16584, 24844, 33104, 41364, 49624, 57884, 65536],
    [8242, 16561, 24880, 33199, 41518, 49837, 58156, 65536],
    [8300, 16536, 24772, 33008, 41244, 49480, 57716, 65536],
    [8215, 16509, 24803, 33097, 41391, 49685, 57979, 65536],
    [8272, 16480, 24688, 32896, 41104, 49312, 57520, 65536],
    [8329, 16594, 24859, 33124, 41389, 49654, 57919, 65536],
    [8240, 16562, 24884, 33206, 41528, 49850, 58172, 65536],
    [8296, 16528, 24760, 32992, 41224, 49456, 57688, 65536],
    [8204, 16492, 24780, 33068, 41356, 49644, 57932, 65536],
    [8259, 16454, 24649, 32844, 41039, 49234, 57429, 65536],
    [8314, 16564, 24814, 33064, 41314, 49564, 57814, 65536],
    [8218, 16523, 24828, 33133, 41438, 49743, 58048, 65536],
    [8272, 16480, 24688, 32896, 41104, 49312, 57520, 65536],
    [8326, 16588, 24850, 33112, 41374, 49636, 57898, 65536],
    [8226, 16542, 24858, 33174, 41490, 49806, 58122, 65536],
    [8279, 16494, 24709, 32924, 41139, 49354, 57569, 65536],
    [8332, 16600, 24868, 33136, 41404, 49672, 57940, 65536],
    [8228, 16549, 24870, 33191, 41512, 49833, 58154, 65536],
    [8280, 16496, 24712, 32928, 41144, 49360, 57576, 65536],
    [8332, 16600, 24868, 33136, 41404, 49672, 57940, 65536],
    [8224, 16544, 24864, 33184, 41504, 49824, 58144, 65536],
    [8275, 16486, 24697, 32908, 41119, 49330, 57541, 65536],
    [8326, 16588, 24850, 33112, 41374, 49636, 57898, 65536],
    [8214, 16527, 24840, 33153, 41466, 49779, 58092, 65536],
    [8264, 16464, 24664, 32864, 41064, 49264, 57464, 65536],
    [8314, 16564, 24814, 33064, 41314, 49564, 57814, 65536],
    [8198, 16498, 24798, 33098, 41398, 49698, 57998, 65536],
    [8247, 16597, 24947, 33297, 41647, 49997, 58347, 65536],
    [8296, 16528, 24760, 32992, 41224, 49456, 57688, 65536],
    [8345, 16626, 24907, 33188, 41469, 49750, 58031, 65536],
    [8224, 16554, 24884, 33214, 41544, 49874, 58204, 65536],
    [8272, 16480, 24688, 32896, 41104, 49312, 57520, 65536],
    [8320, 16576, 24832, 33088, 41344, 49600, 57856, 65536],
    [8195, 16499, 24803, 33107, 41411, 49715, 58019, 65536],
    [8242, 16594, 24946, 33298, 41650, 50002, 58354, 65536],
    [8289, 16514, 24739, 32964, 41189, 49414, 57639, 65536],
    [8336, 16608, 24880, 33152, 41424, 49696, 57968, 65536],
    [8206, 16525, 24844, 33163, 41482, 49801, 58120, 65536],
    [8252, 16618, 24984, 33350, 41716, 50082, 58448, 65536],
    [8298, 16532, 24766, 33000, 41234, 49468, 57702, 65536],
    [8344, 16624, 24904, 33184, 41464, 49744, 58024, 65536],
    [8209, 16535, 24861, 33187, 41513, 49839, 58165, 65536],
    [8254, 16626, 24998, 33370, 41742, 50114, 58486, 65536],
    [8299, 16534, 24769, 33004, 41239, 49474, 57709, 65536],
    [8344, 16624, 24904, 33184, 41464, 49744, 58024, 65536],
    [8204, 16529, 24854, 33179, 41504, 49829, 58154, 65536],
    [8248, 16618, 24988, 33358, 41728, 50098, 58468, 65536],
    [8292, 16520, 24748, 32976, 41204, 49432, 57660, 65536],
    [8336, 16608, 24880, 33152, 41424, 49696, 57968, 65536],
    [8380, 16696, 25012, 33328, 41644, 49960, 58276, 65536],
    [8234, 16594, 24954, 33314, 41674, 50034, 58394, 65536],
    [8277, 16490, 24703, 32916, 41129, 49342, 57555, 65536],
    [8320, 16576, 24832, 33088, 41344, 49600, 57856, 65536],
    [8363, 16662, 24961, 33260, 41559, 49858, 58157, 65536],
    [8212, 16554, 24896, 33238, 41580, 49922, 58264, 65536],
    [8254, 16639, 25024, 33409, 41794, 50179, 58564, 65536],
    [8296, 16528, 24760, 32992, 41224, 49456, 57688, 65536],
    [8338, 16612, 24886, 33160, 41434, 49708, 57982, 65536],
    [8380, 16696, 25012, 33328, 41644, 49960, 58276, 65536],
    [8223, 16581, 24939, 33297, 41655, 50013, 58371, 65536],
    [8264, 16464, 24664, 32864, 41064, 49264, 57464, 65536],
    [8305, 16546, 24787, 33028, 41269, 49510, 57751, 65536],
    [8346, 16628, 24910, 33192, 41474, 49756, 58038, 65536],
    [8387, 16710, 25033, 33356, 41679, 50002, 58325, 65536],
    [8224, 16588, 24952, 33316, 41680, 50044, 58408, 65536],
    [8264, 16464, 24664, 32864, 41064, 49264, 57464, 65536],
    [8304, 16544, 24784, 33024, 41264, 49504, 57744, 65536],
    [8344, 16624, 24904, 33184, 41464, 49744, 58024, 65536],
    [8384, 16704, 25024, 33344, 41664, 49984, 58304, 65536],
    [8215, 16575, 24935, 33295, 41655, 50015, 58375, 65536],
    [8254, 16654, 25054, 33454, 41854, 50254, 58654, 65536],
    [8293, 16522, 24751, 32980, 41209, 49438, 57667, 65536],
    [8332, 16600, 24868, 33136, 41404, 49672, 57940, 65536],
    [8371, 16678, 24985, 33292, 41599, 49906, 58213, 65536],
    [8196, 16542, 24888, 33234, 41580, 49926, 58272, 65536],
    [8234, 16619, 25004, 33389, 41774, 50159, 58544, 65536],
    [8272, 16480, 24688, 32896, 41104, 49312, 57520, 65536],
    [8310, 16556, 24802, 33048, 41294, 49540, 57786, 65536],
    [8348, 16632, 24916, 33200, 41484, 49768, 58052, 65536],
    [8386, 16708, 25030, 33352, 41674, 49996, 58318, 65536],
    [8204, 16564, 24924, 33284, 41644, 50004, 58364, 65536],
    [8241, 16639, 25037, 33435, 41833, 50231, 58629, 65536],
    [8278, 16492, 24706, 32920, 41134, 49348, 57562, 65536],
    [8315, 16566, 24817, 33068, 41319, 49570, 57821, 65536],
    [8352, 16640, 24928, 33216, 41504, 49792, 58080, 65536],
    [8389, 16714, 25039, 33364, 41689, 50014, 58339, 65536],
    [8200, 16562, 24924, 33286, 41648, 50010, 58372, 65536],
    [8236, 16635, 25034, 33433, 41832, 50231, 58630, 65536],
    [8272, 16480, 24688, 32896, 41104, 49312, 57520, 65536],
    [8308, 16552, 24796, 33040, 41284, 49528, 57772, 65536],
    [8344, 16624, 24904, 33184, 41464, 49744, 58024, 65536],
    [8380, 16696, 25012, 33328, 41644, 49960, 58276, 65536],
    [8416, 16768, 25120, 33472, 41824, 50176, 58528, 65536],
    [8219, 16607, 24995, 33383, 41771, 50159, 58547, 65536],
    [8254, 16678, 25102, 33526, 41950, 50374, 58798, 65536],
    [8289, 16514, 24739, 32964, 41189, 49414, 57639, 65536],
    [8324, 16584, 24844, 33104, 41364, 49624, 57884, 65536],
    [8359, 16654, 24949, 33244, 41539, 49834, 58129, 65536],
    [8394, 16724, 25054, 33384, 41714, 50044, 58374, 65536],
    [8429, 16794, 25159, 33524, 41889, 50254, 58619, 65536],
    [8224, 16624, 25024, 33424, 41824, 50224, 58624, 65536],
    [8258, 16452, 24646, 32840, 41034, 49228, 57422, 65536],
    [8292, 16520, 24748, 32976, 41204, 49432, 57660, 65536],
    [8326, 16588, 24850, 33112, 41374, 49636, 57898, 65536],
    [8360, 16656, 24952, 33248, 41544, 49840, 58136, 65536],
    [8394, 16724, 25054, 33384, 41714, 50044, 58374, 65536],
    [8428, 16792, 25156, 33520, 41884, 50248, 58612, 65536],
    [8215, 16613, 25011, 33409, 41807, 50205, 58603, 65536],
    [8248, 16680, 25112, 33544, 41976, 50408, 58840, 65536],
    [8281, 16498, 24715, 32932, 41149, 49366, 57583, 65536],
    [8314, 16564, 24814, 33064, 41314, 49564, 57814, 65536],
    [8347, 16630, 24913, 33196, 41479, 49762, 58045, 65536],
    [8380, 16696, 25012, 33328, 41644, 49960, 58276, 65536],
    [8413, 16762, 25111, 33460, 41809, 50158, 58507, 65536],
    [8192, 16574, 24956, 33338, 41720, 50102, 58484, 65536],
    [8224, 16639, 25054, 33469, 41884, 50299, 58714, 65536],
];

/// Hitting-data case `p`: PATTERN, `p` zero bytes, then the data so far repeated up to 65536.
fn hitting_data(p: usize) -> Vec<u8> {
    let mut data = HITTING_PATTERN.to_vec();
    data.resize(128 + p, 0);
    while data.len() < 65536 {
        let take = (65536 - data.len()).min(data.len());
        data.extend_from_within(..take);
    }
    data
}

/// Streams `data` through `chunker` in blocks of `piece` bytes.
fn streamed(mut chunker: Chunker, data: &[u8], piece: usize) -> Vec<usize> {
    let mut ends = Vec::new();
    for block in data.chunks(piece.max(1)) {
        chunker.update(block, &mut ends);
    }
    ends.extend(chunker.finish());
    ends.into_iter().map(|e| e as usize).collect()
}

/// Streams `data` split at the given cut points (sorted, within bounds; repeats give empty
/// blocks).
fn streamed_at(mut chunker: Chunker, data: &[u8], cuts: &[usize]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&data.len())) {
        chunker.update(&data[from..cut], &mut ends);
        from = cut;
    }
    ends.extend(chunker.finish());
    ends.into_iter().map(|e| e as usize).collect()
}

fn chunk_refs(data: &[u8], ends: &[usize]) -> Vec<ChunkRef> {
    let mut start = 0;
    ends.iter()
        .map(|&end| {
            let c = ChunkRef::new(ChunkHash::of(&data[start..end]), (end - start) as u64);
            start = end;
            c
        })
        .collect()
}

/// Every way this crate chunks must give `expected`.
fn assert_all_methods(data: &[u8], expected: &[usize], what: &str) {
    assert_eq!(chunk_boundaries(data), expected, "{what}: canonical");
    assert_eq!(
        chunk_boundaries_parallel(data),
        expected,
        "{what}: parallel"
    );
    assert_eq!(
        streamed(Chunker::new(), data, data.len()),
        expected,
        "{what}: streaming"
    );
    assert_eq!(
        streamed(Chunker::parallel_with_segment_len(1000), data, 300_001),
        expected,
        "{what}: parallel, small segments"
    );
}

#[test]
fn splitmix_spot_checks() {
    let data = splitmix64(0, 1_000_000);
    assert_eq!(data[0], 175);
    assert_eq!(data[127], 132);
    assert_eq!(data[111_111], 118);
}

#[test]
fn seed0_boundaries_hashes_and_file_hash() {
    let data = splitmix64(0, 1_000_000);
    assert_all_methods(&data, &SEED0_BOUNDARIES, "seed 0");
    let chunks = chunk_refs(&data, &SEED0_BOUNDARIES);
    for (i, (chunk, want)) in chunks.iter().zip(SEED0_CHUNK_HASHES).enumerate() {
        assert_eq!(chunk.hash.to_hex(), want, "chunk {i}");
    }
    let lens: Vec<u64> = chunks.iter().map(|c| c.len).collect();
    assert_eq!(lens[6], MAX_CHUNK_SIZE as u64);
    assert_eq!(lens[16], MAX_CHUNK_SIZE as u64);
    assert_eq!(
        xorb_hash(&chunks),
        XorbHash::from_hex("6f2ce16ca5e317f0100ff0e7e5bf40a0de9032e9ee1ad04b6b8ff4e36cdfbf6c")
            .unwrap()
    );
    let want_file =
        FileHash::from_hex("3d17b2d7d64a0e011b6717a52d9a16bd2c3f05b743fa8adf52a7d75dafab6d89")
            .unwrap();
    assert_eq!(file_hash(&chunks), want_file);
}

#[test]
fn constant_0x3b_is_cut_at_the_maximum() {
    let data = vec![0x3B; 1_000_000];
    let expected = [
        131072, 262144, 393216, 524288, 655360, 786432, 917504, 1000000,
    ];
    assert_all_methods(&data, &expected, "0x3B");
    let chunks = chunk_refs(&data, &expected);
    for chunk in &chunks[..7] {
        assert_eq!(
            chunk.hash.to_hex(),
            "d3b528b30528f3ad802a015cdf93c531d4da754a1f8c0d341a8f111fd8b6f04e"
        );
    }
    assert_eq!(
        chunks[7].hash.to_hex(),
        "99d04e49b71237231d47669f3eec84c90eb6b6be12b364ce326c05c6d71c3a9f"
    );
    let want = "53f845640fcd1c7440befff65bd93434c83a30c6559a705597d61f2ef64e2f88";
    assert_eq!(file_hash(&chunks).to_hex(), want);
}

#[test]
fn hitting_data_all_128_cases() {
    for (p, row) in HITTING_ROWS.iter().enumerate() {
        let data = hitting_data(p);
        assert_eq!(data.len(), 65536);
        assert_all_methods(&data, row, &format!("hitting case {p}"));
    }
    // Row 126 cuts at exactly the minimum size.
    assert_eq!(HITTING_ROWS[126][0], MIN_CHUNK_SIZE);
}

#[test]
fn streaming_in_pieces_of_1_37_255() {
    let seed0 = splitmix64(0, 1_000_000);
    let constant = vec![0x3B; 1_000_000];
    let mut inputs: Vec<(String, Vec<u8>, Vec<usize>)> = vec![
        ("seed 0".into(), seed0, SEED0_BOUNDARIES.to_vec()),
        (
            "0x3B".into(),
            constant,
            vec![
                131072, 262144, 393216, 524288, 655360, 786432, 917504, 1000000,
            ],
        ),
    ];
    for (p, row) in HITTING_ROWS.iter().enumerate() {
        inputs.push((format!("hitting case {p}"), hitting_data(p), row.to_vec()));
    }
    for (what, data, expected) in &inputs {
        for piece in [1, 37, 255] {
            assert_eq!(
                &streamed(Chunker::new(), data, piece),
                expected,
                "{what}, pieces of {piece}"
            );
        }
        // Parallel scanning splits only blocks of two segments or more; use blocks that do.
        assert_eq!(
            &streamed(Chunker::parallel_with_segment_len(64), data, 255),
            expected,
            "{what}, parallel, pieces of 255"
        );
    }
}

/// 64 bytes whose window hash is a boundary candidate: the end of seed-0 chunk 0, which is cut by
/// a candidate (it is shorter than the maximum).
fn candidate_window() -> Vec<u8> {
    splitmix64(0, 84493)[84493 - 64..].to_vec()
}

#[test]
fn boundary_exactly_at_the_minimum_size() {
    let mut data = vec![0x3B; MIN_CHUNK_SIZE - 64];
    data.extend(candidate_window());
    data.extend(vec![0x3B; 300_000]);
    let ends = chunk_boundaries(&data);
    assert_eq!(ends[0], MIN_CHUNK_SIZE);
    assert_all_methods(&data, &ends, "candidate at the minimum");
}

#[test]
fn candidate_one_byte_short_of_the_minimum_is_not_a_cut() {
    let mut data = vec![0x3B; MIN_CHUNK_SIZE - 65];
    data.extend(candidate_window());
    data.extend(vec![0x3B; 300_000]);
    let ends = chunk_boundaries(&data);
    assert!(!ends.contains(&(MIN_CHUNK_SIZE - 1)));
    assert_all_methods(&data, &ends, "candidate before the minimum");
}

#[test]
fn candidate_exactly_at_the_maximum_and_just_after() {
    for extra in [0usize, 1] {
        // A first chunk of 10_000 bytes, then a candidate `MAX + extra` bytes later.
        let mut data = vec![0x3B; 10_000 - 64];
        data.extend(candidate_window());
        data.extend(vec![0x3B; MAX_CHUNK_SIZE + extra - 64]);
        data.extend(candidate_window());
        data.extend(vec![0x3B; 1000]);
        let ends = chunk_boundaries(&data);
        assert_eq!(ends[0], 10_000);
        assert_eq!(ends[1], 10_000 + MAX_CHUNK_SIZE);
        assert_all_methods(&data, &ends, "candidate at the maximum");
    }
}

/// Pieces that proptest assembles into inputs: random bytes, constant runs (no candidates, so
/// maximum-size cuts), short repeating patterns (low entropy), and candidate windows (cuts at
/// chosen places, including exactly the minimum size).
#[derive(Debug, Clone)]
enum Piece {
    Random {
        seed: u64,
        len: usize,
    },
    Constant {
        byte: u8,
        len: usize,
    },
    Pattern {
        seed: u64,
        period: usize,
        len: usize,
    },
    /// Constant filler then a candidate window, so that a cut falls `len` bytes after the piece
    /// starts (`len` near the minimum chunk size).
    Candidate {
        len: usize,
    },
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        (any::<u64>(), 0usize..200_000).prop_map(|(seed, len)| Piece::Random { seed, len }),
        (any::<u8>(), 0usize..300_000).prop_map(|(byte, len)| Piece::Constant { byte, len }),
        (any::<u64>(), 1usize..300, 0usize..150_000)
            .prop_map(|(seed, period, len)| Piece::Pattern { seed, period, len }),
        (MIN_CHUNK_SIZE - 3..MIN_CHUNK_SIZE + 3).prop_map(|len| Piece::Candidate { len }),
    ]
}

fn build(pieces: &[Piece]) -> Vec<u8> {
    let mut data = Vec::new();
    for piece in pieces {
        match *piece {
            Piece::Random { seed, len } => data.extend(splitmix64(seed, len)),
            Piece::Constant { byte, len } => data.resize(data.len() + len, byte),
            Piece::Pattern { seed, period, len } => {
                let unit = splitmix64(seed, period);
                data.extend(unit.iter().cycle().take(len));
            }
            Piece::Candidate { len } => {
                data.resize(data.len() + len - 64, 0x3B);
                data.extend(candidate_window());
            }
        }
    }
    data
}

fn input() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(piece(), 1..8).prop_map(|pieces| build(&pieces))
}

/// Input plus sorted cut points into it.
fn input_with_cuts() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    (
        input(),
        prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    )
        .prop_map(|(data, idx)| {
            let mut cuts: Vec<usize> = idx.iter().map(|i| i.index(data.len() + 1)).collect();
            cuts.sort_unstable();
            (data, cuts)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn streaming_is_split_invariant((data, cuts) in input_with_cuts(), segment in 64usize..20_000) {
        let expected = chunk_boundaries(&data);
        prop_assert_eq!(streamed_at(Chunker::new(), &data, &cuts), expected.clone());
        prop_assert_eq!(
            streamed_at(Chunker::parallel_with_segment_len(segment), &data, &cuts),
            expected
        );
    }

    #[test]
    fn parallel_equals_canonical(data in input(), segment in 64usize..100_000) {
        let expected = chunk_boundaries(&data);
        prop_assert_eq!(chunk_boundaries_parallel(&data), expected.clone());
        prop_assert_eq!(
            streamed(Chunker::parallel_with_segment_len(segment), &data, data.len()),
            expected
        );
    }

    #[test]
    fn chunks_tile_the_input_within_size_limits(data in input()) {
        let ends = chunk_boundaries(&data);
        prop_assert_eq!(ends.is_empty(), data.is_empty());
        let mut start = 0;
        for (i, &end) in ends.iter().enumerate() {
            prop_assert!(end > start);
            prop_assert!(end - start <= MAX_CHUNK_SIZE);
            if i + 1 < ends.len() {
                prop_assert!(end - start >= MIN_CHUNK_SIZE);
            }
            start = end;
        }
        prop_assert_eq!(start, data.len());
    }
}
