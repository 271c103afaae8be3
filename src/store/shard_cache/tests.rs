//! Unit tests of the shard cache's helpers (the cache itself is tested in tests/shard_cache.rs).

use super::*;

#[test]
fn sizes_parse() {
    assert_eq!(parse_size("500M"), Some(500 << 20));
    assert_eq!(parse_size("2G"), Some(2 << 30));
    assert_eq!(parse_size("2g"), Some(2 << 30));
    assert_eq!(parse_size("2GiB"), Some(2 << 30));
    assert_eq!(parse_size("2GB"), Some(2 << 30));
    assert_eq!(parse_size("10k"), Some(10 << 10));
    assert_eq!(parse_size("1.5G"), Some(3 << 29));
    assert_eq!(parse_size("1234"), Some(1234));
    assert_eq!(parse_size("1234B"), Some(1234));
    assert_eq!(parse_size(" 0 "), Some(0));
    for bad in ["", "G", "-1G", "12X", "1 2", "abc", "1e3", "99999999999T"] {
        assert_eq!(parse_size(bad), None, "{bad}");
    }
    assert_eq!(format_size(0), "0 B");
    assert_eq!(format_size(1536), "1.5 KiB");
    assert_eq!(format_size(3 << 29), "1.5 GiB");
}

#[test]
fn endpoint_keys_are_readable_safe_and_distinct() {
    let a = ShardCache::endpoint_key("https://cas.example.com:8443/xet");
    assert!(a.starts_with("cas.example.com_8443-"), "{a}");
    assert_eq!(a.len(), "cas.example.com_8443-".len() + 16);
    // Credentials, case of the host and trailing slashes do not matter...
    assert_eq!(
        ShardCache::endpoint_key("https://user:secret@CAS.example.com:8443/xet/"),
        a
    );
    // ...the path does.
    assert_ne!(
        ShardCache::endpoint_key("https://cas.example.com:8443/other"),
        a
    );
    let d = ShardCache::endpoint_key("/srv/data/xet store");
    assert!(d.starts_with("xet_store-"), "{d}");
    assert_ne!(ShardCache::endpoint_key("/other/xet store"), d);
    for odd in ["", "/", "..", "https://", "C:\\data\\..\\x", "../../etc"] {
        let k = ShardCache::endpoint_key(odd);
        assert!(
            k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')),
            "{k}"
        );
        assert!(!k.starts_with('.'), "{k}");
    }
}
