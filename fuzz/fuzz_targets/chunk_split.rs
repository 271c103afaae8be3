//! Any bytes, cut into pieces at any places, given to the chunk splitter: an error or chunks,
//! never a panic, and the same chunks (or the same refusal) as the range index finds in the
//! bytes whole.
#![no_main]
use libfuzzer_sys::fuzz_target;
use xet_format::xorb::{ChunkRange, ChunkSplitter, XorbError, XorbLimits};

fuzz_target!(|data: &[u8]| {
    // The first byte sets the piece size, the rest is the range.
    let Some((&size, bytes)) = data.split_first() else { return };
    let size = usize::from(size).max(1);
    let mut splitter = ChunkSplitter::new(XorbLimits::SERVER);
    let mut lens = Vec::new();
    let mut result = Ok(());
    for piece in bytes.chunks(size) {
        result = splitter.feed(piece, &mut |c, payload| {
            assert_eq!(payload.len() as u32, c.header.compressed_len());
            lens.push(c.header.uncompressed_len());
            Ok::<(), XorbError>(())
        });
        if result.is_err() {
            break;
        }
    }
    let split = result.and_then(|()| splitter.finish());
    let index = ChunkRange::index(bytes, &XorbLimits::SERVER);
    match (split, index) {
        (Ok(n), Ok(index)) => {
            assert_eq!(n, index.len());
            for (i, len) in lens.iter().enumerate() {
                assert_eq!(index.uncompressed_len(i), Some(*len));
            }
        }
        (Err(_), Err(_)) => {}
        (s, i) => panic!("splitter {s:?} and index {i:?} disagree"),
    }
});
