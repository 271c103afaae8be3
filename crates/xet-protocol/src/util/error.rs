//! Walking an error's chain of sources: the root cause, a type somewhere in the chain, and the
//! whole chain as one line with each cause said once.

use std::error::Error;

/// The error and its sources, outermost first.
pub fn chain<'a>(e: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(e), |e: &&'a (dyn Error + 'static)| (*e).source())
}

/// The innermost source of `e` (`e` itself when it has none).
pub fn root_cause<'a>(e: &'a (dyn Error + 'static)) -> &'a (dyn Error + 'static) {
    chain(e).last().unwrap_or(e)
}

/// The first error of type `T` in `e`'s chain.
pub fn find<'a, T: Error + 'static>(e: &'a (dyn Error + 'static)) -> Option<&'a T> {
    chain(e).find_map(|e| e.downcast_ref::<T>())
}

/// The root cause worded for a user: the operating system's usual network failures in a few
/// words, else the innermost message (the outermost one if that is empty).
pub fn root_cause_text(e: &(dyn Error + 'static)) -> String {
    let cause = root_cause(e);
    if let Some(io) = cause.downcast_ref::<std::io::Error>() {
        match io.kind() {
            std::io::ErrorKind::ConnectionRefused => return "connection refused".into(),
            std::io::ErrorKind::ConnectionReset => return "connection reset".into(),
            std::io::ErrorKind::TimedOut => return "timed out".into(),
            _ => {}
        }
    }
    let text = cause.to_string();
    if text.is_empty() {
        e.to_string()
    } else {
        text
    }
}

/// `e` and its sources as one line, `outer: inner: …`, leaving out a source whose message the
/// text so far already contains (errors that repeat their cause in their own message).
pub fn chain_text(e: &(dyn Error + 'static)) -> String {
    let mut text = String::new();
    for part in chain(e).map(|e| e.to_string()) {
        if text.is_empty() {
            text = part;
        } else if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("cannot open the store")]
        Plain(#[source] std::io::Error),
        #[error("cannot read the index: {0}")]
        Repeats(#[source] std::io::Error),
    }

    #[test]
    fn causes_are_found_and_said_once() {
        let refused = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "os words");
        let plain = Outer::Plain(refused());
        assert_eq!(chain(&plain).count(), 2);
        assert_eq!(root_cause(&plain).to_string(), "os words");
        assert_eq!(root_cause_text(&plain), "connection refused");
        assert!(find::<std::io::Error>(&plain).is_some());
        assert!(find::<std::fmt::Error>(&plain).is_none());
        assert_eq!(chain_text(&plain), "cannot open the store: os words");

        let repeats = Outer::Repeats(std::io::Error::other("disk on fire"));
        assert_eq!(chain_text(&repeats), "cannot read the index: disk on fire");
        assert_eq!(root_cause_text(&repeats), "disk on fire");
        let alone = std::io::Error::other("alone");
        assert_eq!(chain_text(&alone), "alone");
        assert_eq!(root_cause(&alone).to_string(), "alone");
    }
}
