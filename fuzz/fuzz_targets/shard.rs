//! Any bytes given to the shard reader: an error or a valid shard, never a panic or a hang. A valid
//! shard must re-serialise and read back to the same model.
#![no_main]
use xet_format::shard::ParsedShard;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = ParsedShard::parse(data) {
        // The writer may refuse models the reader tolerates (duplicate hashes): that is an error,
        // not a panic. What it does write must read back identically.
        if let Ok(bytes) = parsed.to_bytes() {
            // The writer emits blocks in xet-core order; the reader keeps input order.
            let mut again = ParsedShard::parse(&bytes).expect("our own output parses").shard;
            let mut original = parsed.shard.clone();
            again.sort();
            original.sort();
            assert_eq!(again.files, original.files);
            assert_eq!(again.xorbs, original.xorbs);
        }
        let _ = parsed.shard.to_upload_bytes();
    }
});
