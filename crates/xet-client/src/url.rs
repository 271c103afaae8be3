//! URL pieces shown to users and compared for credentials: the origin, the authority without
//! user info, the URL without query.

/// `scheme://host[:port]` of a URL that has a host (lowercased by parsing; the port only when
/// it is not the scheme's default), without user info, path or query. `None` when `url` does not
/// parse or has no host.
pub fn origin(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url.trim()).ok()?;
    let host = u.host_str().filter(|h| !h.is_empty())?;
    Some(match u.port() {
        Some(p) => format!("{}://{host}:{p}", u.scheme()),
        None => format!("{}://{host}", u.scheme()),
    })
}

/// The origin of an `http` or `https` URL ([`origin`]); `None` for other schemes.
pub fn http_origin(url: &str) -> Option<String> {
    origin(url).filter(|o| o.starts_with("http://") || o.starts_with("https://"))
}

/// `url` without its query string and fragment, which may carry signatures.
pub(crate) fn without_query(url: &str) -> &str {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    &url[..end]
}

/// The host part of an authority (`user:password@host:port` → `host:port`): everything after
/// the last `@`, so that user info, and a password in it, is never shown or compared.
pub fn without_userinfo(authority: &str) -> &str {
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

/// Whether the signature of a presigned URL covers the `Range` header (an S3 URL whose
/// `X-Amz-SignedHeaders` lists `range`): such a URL serves exactly the range it was signed
/// for, so it must be fetched with that range and no part of it.
pub fn signs_range(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    u.query_pairs().any(|(name, value)| {
        name.eq_ignore_ascii_case("x-amz-signedheaders")
            && value.split(';').any(|h| h.eq_ignore_ascii_case("range"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_signing_urls() {
        assert!(signs_range(
            "http://s3.test/b/xorbs/x?X-Amz-Expires=9&X-Amz-SignedHeaders=host%3Brange&X-Amz-Signature=1"
        ));
        assert!(!signs_range(
            "http://s3.test/b/xorbs/x?X-Amz-SignedHeaders=host&X-Amz-Signature=1"
        ));
        assert!(!signs_range("http://cas.test/v1/xorb-data/x?e=1&r=0-9&s=2"));
        assert!(!signs_range("not a url"));
    }

    #[test]
    fn origins_and_parts() {
        assert_eq!(
            origin("https://u:p@H.example:8080/a/info/lfs?x#y").as_deref(),
            Some("https://h.example:8080")
        );
        assert_eq!(
            origin("http://127.0.0.1:80/a").as_deref(),
            Some("http://127.0.0.1")
        );
        assert_eq!(origin("/tmp/x/info/lfs"), None);
        assert_eq!(origin("file:///tmp/x"), None);
        assert_eq!(
            origin("ssh://git@h.example:22/r").as_deref(),
            Some("ssh://h.example:22")
        );
        assert_eq!(http_origin("ssh://git@h.example/r"), None);
        assert_eq!(
            http_origin("HTTPS://h.example/r").as_deref(),
            Some("https://h.example")
        );
        assert_eq!(without_query("https://h/x?s=secret#f"), "https://h/x");
        assert_eq!(without_query("https://h/x"), "https://h/x");
        assert_eq!(without_userinfo("u:p@w@h:1"), "h:1");
        assert_eq!(without_userinfo("h:1"), "h:1");
    }
}
