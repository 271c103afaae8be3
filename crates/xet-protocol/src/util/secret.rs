//! [`Secret`]: a token, password or `Authorization` value that never shows itself. Its `Debug`
//! and `Display` print `<redacted>`; the value comes out only through [`Secret::expose`], where
//! it is put into a request header or compared. Every secret is also registered with
//! [`crate::redact`] when made, so that text from third parties (a server's error body, git's
//! output) that echoes it is masked too.

use std::fmt;

/// A secret value. See the module documentation.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret holding `value` (registered with [`crate::redact`]).
    pub fn new(value: impl Into<String>) -> Self {
        let value = value.into();
        crate::redact::register_secret(&value);
        Self(value)
    }

    /// `value` without surrounding whitespace, or `None` if nothing is left.
    pub fn non_blank(value: &str) -> Option<Self> {
        let value = value.trim();
        (!value.is_empty()).then(|| Self::new(value))
    }

    /// The value itself, for the one place that sends or compares it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_shows_itself() {
        let s = Secret::new("tok-0123456789abcdef-secret");

        assert_eq!(format!("{s}"), "<redacted>");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(format!("{:?}", Some(&s)), "Some(Secret(<redacted>))");
        assert_eq!(s.expose(), "tok-0123456789abcdef-secret");
        assert!(!crate::redact::redact("said tok-0123456789abcdef-secret").contains("abcdef"));
        assert_eq!(Secret::non_blank("  \n"), None);
        assert_eq!(
            Secret::non_blank(" tok-0123456789abcdef-other ").map(|s| s.expose().to_string()),
            Some("tok-0123456789abcdef-other".to_string())
        );
    }
}
