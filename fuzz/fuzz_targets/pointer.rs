//! Any bytes given to the pointer parser: an error or a pointer whose canonical encoding is
//! exactly the input (the only accepted variation is a historical version URL).
#![no_main]
use xet_format::pointer::Pointer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Pointer::parse(data) {
        let encoded = p.encode();
        if data.starts_with(b"version https://git-lfs.github.com/spec/v1\n") {
            assert_eq!(encoded.as_bytes(), data);
        }
        assert_eq!(Pointer::parse(encoded.as_bytes()).unwrap(), p);
    }
});
