//! Unit tests of the shard cache's endpoint keys (the cache itself is tested in
//! tests/store/shard_cache.rs).

use super::*;

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
