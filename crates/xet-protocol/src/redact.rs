//! Making text safe to show: every message, log line and listing that may carry a credential
//! goes through [`redact`] before it reaches a terminal, a log file or git-lfs.
//!
//! Pure text in, text out (no I/O). Two kinds of masking, both replacing the secret with
//! [`MASK`]:
//!
//! - **Known secrets.** Every credential the process learns (tokens from the environment, git
//!   credential helper answers, CAS access tokens, passwords in endpoint URLs, `Authorization`
//!   values handed over by an LFS server) is put in a process-wide registry with
//!   [`register_secret`], and masked wherever it appears.
//! - **Shapes of secrets**, for those nobody registered:
//!   - the password of a URL's userinfo (`http://git:SECRET@host` → `http://git:***@host`), and
//!     a user-only userinfo of [`TOKEN_LIKE_USER_LEN`] characters or more (a token used as user
//!     name, `https://hf_…@host`);
//!   - credential-like query parameters ([`SECRET_QUERY_PARAMS`]: presigned signatures such as
//!     our server's `s`, `sig`, `X-Amz-Signature`, …; our server's `e`, an expiry, stays);
//!   - `Bearer …` and `Basic …` values that look like credentials (not `basic transfer`);
//!   - `key=value` and `"key": "value"` pairs whose key names a credential ([`SECRET_KEYS`]:
//!     `password=` lines of git's credential protocol, `"accessToken"` of a token answer, …).
//!
//! [`clip`] bounds text that echoes untrusted input (a protocol line, a path) before it is put
//! into a message.

use crate::util::sync::RwLockAnyway as _;
use std::borrow::Cow;
use std::sync::RwLock;

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Registered secrets shorter than this are not masked by value (masking every `abc` would
/// wreck messages); their shapes (URL userinfo, `password=`) still are.
pub const MIN_SECRET_LEN: usize = 6;

/// A URL user name without password this long or longer is taken for a token and masked.
pub const TOKEN_LIKE_USER_LEN: usize = 16;

/// Query parameters whose values are masked (compared case-insensitively).
pub const SECRET_QUERY_PARAMS: &[&str] = &[
    "s",
    "sig",
    "signature",
    "token",
    "access_token",
    "auth",
    "key",
    "api_key",
    "apikey",
    "password",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "x-goog-signature",
    "x-goog-credential",
];

/// Keys of `key=value` and `"key": "value"` pairs whose values are masked (case-insensitive).
pub const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "token",
    "access_token",
    "accesstoken",
    "x-xet-access-token",
    "authorization",
    "secret",
    "client_secret",
    "api_key",
    "apikey",
];

/// The process-wide registry of known secrets, longest first.
static KNOWN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Adds `secret` to the secrets masked by [`redact`] (surrounding whitespace is ignored, and so
/// are secrets shorter than [`MIN_SECRET_LEN`]).
pub fn register_secret(secret: &str) {
    let secret = secret.trim();
    if secret.len() < MIN_SECRET_LEN {
        return;
    }
    let mut known = KNOWN.write_anyway();
    if known.iter().any(|k| k == secret) {
        return;
    }
    known.push(secret.to_string());
    known.sort_by_key(|k| std::cmp::Reverse(k.len()));
}

/// Registers the credential in an `Authorization` value: the whole value, and the part after
/// the scheme (`Bearer <token>`).
pub fn register_authorization(value: &str) {
    register_secret(value);
    if let Some((_, credential)) = value.trim().split_once(' ') {
        register_secret(credential);
    }
}

/// `text` with every known secret and every shape of secret masked.
pub fn redact(text: &str) -> String {
    let known = KNOWN.read_anyway();
    redact_with(text, &known)
}

/// [`redact`] with an explicit list of known secrets (longest first) instead of the registry.
pub(crate) fn redact_with(text: &str, known: &[String]) -> String {
    let mut out = Cow::Borrowed(text);
    for secret in known {
        if secret.len() >= MIN_SECRET_LEN && out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), MASK));
        }
    }
    let out = mask_userinfo(&out);
    let out = mask_query(&out);
    let out = mask_auth_schemes(&out);
    mask_pairs(&out)
}

/// At most `max` bytes of `text` (cut at a character boundary), with a note of how much was
/// left out.
pub fn clip(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes in all)", &text[..end], text.len()))
}

/// Characters that end a URL's authority (or a value) in running text.
fn ends_url_part(c: char) -> bool {
    c.is_whitespace() || c.is_control() || matches!(c, '"' | '<' | '>' | '`' | '\\')
}

/// `scheme://user:PASSWORD@host` → `scheme://user:***@host`.
fn mask_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| ends_url_part(c) || matches!(c, '/' | '?' | '#'))
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..=colon]);
                        out.push_str(MASK);
                    }
                    None if userinfo.len() >= TOKEN_LIKE_USER_LEN => out.push_str(MASK),
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Where a value that starts at the beginning of `text` ends.
fn value_end(text: &str) -> usize {
    text.find(|c: char| {
        ends_url_part(c) || matches!(c, '&' | '#' | '\'' | ')' | ']' | '}' | ',' | ';')
    })
    .unwrap_or(text.len())
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// `?sig=VALUE&…` → `?sig=***&…` for the parameters of [`SECRET_QUERY_PARAMS`].
fn mask_query(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['?', '&']) {
        let (head, tail) = rest.split_at(i + 1);
        out.push_str(head);
        let name_len = tail.find(|c: char| !is_name_char(c)).unwrap_or(tail.len());
        let name = &tail[..name_len];
        let after = &tail[name_len..];
        match after.strip_prefix('=') {
            Some(value)
                if SECRET_QUERY_PARAMS
                    .iter()
                    .any(|p| p.eq_ignore_ascii_case(name)) =>
            {
                out.push_str(name);
                out.push('=');
                let end = value_end(value);
                if end > 0 {
                    out.push_str(MASK);
                }
                rest = &value[end..];
            }
            _ => {
                out.push_str(name);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `value` (an `Authorization` credential) looks like one rather than a word of prose
/// ("basic transfers", "basic HTTP"): six characters or more, not all lowercase letters, or
/// long. Registered secrets are masked whatever their shape.
fn credential_like(value: &str) -> bool {
    value.len() >= 24 || (value.len() >= 6 && value.chars().any(|c| !c.is_ascii_lowercase()))
}

/// `Bearer TOKEN` / `Basic BASE64` → `Bearer ***` / `Basic ***`.
fn mask_auth_schemes(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let at_word_start = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        let scheme = [&b"bearer "[..], &b"basic "[..]].into_iter().find(|s| {
            at_word_start
                && bytes.len() >= i + s.len()
                && bytes[i..i + s.len()].eq_ignore_ascii_case(s)
        });
        let Some(scheme) = scheme else {
            i += 1;
            continue;
        };
        let start = i + scheme.len();
        let value_len = text[start..]
            .find(|c: char| {
                !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '+' | '/' | '='))
            })
            .unwrap_or(text.len() - start);
        let value = &text[start..start + value_len];
        if credential_like(value) {
            out.push_str(&text[copied..start]);
            out.push_str(MASK);
            copied = start + value_len;
        }
        i = start + value_len;
    }
    out.push_str(&text[copied..]);
    out
}

/// `password=VALUE` and `"accessToken": "VALUE"` → masked values, for the keys of
/// [`SECRET_KEYS`].
fn mask_pairs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < text.len() {
        let Some(c) = text[i..].chars().next() else {
            break;
        };
        if !is_name_char(c) {
            i += c.len_utf8();
            continue;
        }
        // A name starts here: it must not continue a longer name.
        let prev = text[..i].chars().next_back();
        let len = text[i..]
            .find(|c: char| !is_name_char(c))
            .unwrap_or(text.len() - i);
        let name = &text[i..i + len];
        let after = i + len;
        i = after;
        if prev.is_some_and(is_name_char)
            || !SECRET_KEYS.iter().any(|k| k.eq_ignore_ascii_case(name))
        {
            continue;
        }
        let rest = &text[after..];
        // key=value
        if let Some(value) = rest.strip_prefix('=') {
            let end = value_end(value);
            if end > 0 && &value[..end] != MASK {
                let start = after + 1;
                out.push_str(&text[copied..start]);
                out.push_str(MASK);
                copied = start + end;
                i = copied;
            }
            continue;
        }
        // "key": "value" (the name was quoted)
        if prev == Some('"') {
            if let Some(after_quote) = rest.strip_prefix('"') {
                let trimmed = after_quote.trim_start();
                if let Some(colon) = trimmed.strip_prefix(':') {
                    let value = colon.trim_start();
                    if let Some(inner) = value.strip_prefix('"') {
                        let start = text.len() - inner.len();
                        let end = string_end(inner);
                        if end > 0 && &inner[..end] != MASK {
                            out.push_str(&text[copied..start]);
                            out.push_str(MASK);
                            copied = start + end;
                            i = copied;
                        }
                    }
                }
            }
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The length of a JSON string's contents (up to its closing unescaped quote, or all of it).
fn string_end(inner: &str) -> usize {
    let bytes = inner.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i,
            _ => i += 1,
        }
    }
    inner.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> String {
        redact_with(text, &[])
    }

    #[test]
    fn url_passwords() {
        assert_eq!(r("http://git:SECRET@host:8/x"), "http://git:***@host:8/x");
        assert_eq!(
            r("push to https://u:p%40ss@h.example/a?b and http://h/c"),
            "push to https://u:***@h.example/a?b and http://h/c"
        );
        assert_eq!(r("(http://u:pw@h)"), "(http://u:***@h)");
        assert_eq!(r("ssh://git@github.com/a"), "ssh://git@github.com/a");
        assert_eq!(
            r("https://hf_abcdefghijklmnopqrstuvwxyz@hf.co/x"),
            "https://***@hf.co/x"
        );
        assert_eq!(r("http://host/path@x"), "http://host/path@x");
        assert_eq!(
            r("endpoint \"http://a:b:c@h\""),
            "endpoint \"http://a:***@h\""
        );
        assert_eq!(r("no url here: a@b"), "no url here: a@b");
    }

    #[test]
    fn query_signatures() {
        assert_eq!(
            r("GET http://h/v1/xorb-data/ab?e=1700000000&s=c2lnbmF0dXJl"),
            "GET http://h/v1/xorb-data/ab?e=1700000000&s=***"
        );
        assert_eq!(
            r("https://b.s3/x?X-Amz-Credential=AK%2F1&X-Amz-Date=2024&X-Amz-Signature=deadbeef&X-Amz-Security-Token=tok#f"),
            "https://b.s3/x?X-Amz-Credential=***&X-Amz-Date=2024&X-Amz-Signature=***&X-Amz-Security-Token=***#f"
        );
        assert_eq!(r("x?sig=abc def"), "x?sig=*** def");
        assert_eq!(
            r("x?access_token=abc&token=def"),
            "x?access_token=***&token=***"
        );
        assert_eq!(r("x?size=10&sigma=2"), "x?size=10&sigma=2");
        assert_eq!(r("why? because & so on"), "why? because & so on");
    }

    #[test]
    fn authorization_values() {
        assert_eq!(
            r("Authorization: Bearer eyJhbG.c.d"),
            "Authorization: Bearer ***"
        );
        assert_eq!(r("sent Bearer hf_AbC123 to x"), "sent Bearer *** to x");
        assert_eq!(r("Basic dXNlcjpwYXNz"), "Basic ***");
        assert_eq!(
            r("git-lfs's basic transfer; a bearer token; basic HTTP auth"),
            "git-lfs's basic transfer; a bearer token; basic HTTP auth"
        );
        assert_eq!(r("Bearer "), "Bearer ");
    }

    #[test]
    fn credential_pairs() {
        assert_eq!(
            r("protocol=https\nhost=h\nusername=git\npassword=s3cret!\n"),
            "protocol=https\nhost=h\nusername=git\npassword=***\n"
        );
        assert_eq!(
            r(r#"{"casUrl":"http://c","accessToken":"abc.def","exp":5}"#),
            r#"{"casUrl":"http://c","accessToken":"***","exp":5}"#
        );
        assert_eq!(
            r(r#"header: {"X-Xet-Access-Token": "tok\"en", "X-Xet-Cas-Url": "u"}"#),
            r#"header: {"X-Xet-Access-Token": "***", "X-Xet-Cas-Url": "u"}"#
        );
        assert_eq!(r("token=abcdef rest"), "token=*** rest");
        assert_eq!(r("token_hint=abc mytoken=x"), "token_hint=abc mytoken=x");
        assert_eq!(r("the token expired"), "the token expired");
    }

    #[test]
    fn known_secrets_anywhere() {
        let known = vec!["longer-secret-value".to_string(), "s3cr3t".to_string()];
        assert_eq!(
            redact_with("a s3cr3t in longer-secret-value and s3cr3t", &known),
            "a *** in *** and ***"
        );
        // Short ones are not masked by value.
        assert_eq!(redact_with("git abc", &["abc".into()]), "git abc");
        register_secret("  registry-secret-42 ");
        register_secret("abc");
        assert_eq!(redact("x registry-secret-42 y abc"), "x *** y abc");
        register_authorization("Bearer tok-registered-7");
        assert_eq!(redact("tok-registered-7"), "***");
    }

    #[test]
    fn utf8_and_clipping() {
        assert_eq!(r("é password=é€ ü"), "é password=*** ü");
        assert_eq!(clip("short", 10), "short");
        let long = "é".repeat(100);
        let c = clip(&long, 11);
        assert!(
            c.starts_with(&"é".repeat(5)) && c.contains("200 bytes in all"),
            "{c}"
        );
    }
}
