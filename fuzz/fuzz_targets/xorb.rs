//! Any bytes given to the xorb reader: an error or a valid xorb, never a panic or a hang. A valid
//! parse must also survive the operations the server and client perform on it.
#![no_main]
use xet_format::xorb::{footer::XorbFooter, ParsedXorb};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = XorbFooter::from_stored(data);
    if let Ok(x) = ParsedXorb::parse(data) {
        let n = x.num_chunks();
        let all = x.extract(0..n).expect("a valid xorb extracts whole");
        assert_eq!(all.len() as u64, x.uncompressed_len());
        let stored = x.to_stored([0; 4]).expect("a valid xorb re-serialises");
        let again = ParsedXorb::parse(&stored).expect("our stored form parses");
        assert_eq!(again.hash(), x.hash());
        let _ = x.url_range(0..n);
    }
});
