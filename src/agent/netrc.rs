//! The user's netrc file, read as git-lfs reads it (its `creds/netrc.go` with the
//! `git-lfs/go-netrc` parser), so that a machine whose LFS credentials live there authenticates
//! git-xet's own requests too.
//!
//! - The file is `$HOME/.netrc` (on Windows `$HOME/_netrc` when `.netrc` is missing); `$NETRC`
//!   is not read (git-lfs does not read it). [`crate::agent::settings::netrc_path`] finds it.
//! - Tokens are separated by white space; `#` starts a comment to the end of the line; `machine
//!   NAME`, `default`, `login`, `password`, `account` and `macdef NAME` (whose body runs to the
//!   next blank line) are the keywords; other words are skipped, as go-netrc skips them.
//! - A file go-netrc refuses (a second `default`, a `machine` after `default`, a second `login`,
//!   `password` or `account` in one entry, one of them before any entry) gives no credentials at
//!   all, as in git-lfs (which logs "bad netrc file").
//! - Lookup: the first `machine` whose name is the URL's host (without the port, compared
//!   exactly) and, when the URL names a user, whose `login` is that user; else the `default`
//!   entry.
//!
//! Written here rather than taken from a crate: the netrc crates on crates.io are unmaintained
//! or differ from go-netrc in the cases above (which entry wins, what makes a file bad, macros),
//! and the format is small. The parser never panics, and nothing here logs or shows a password.

use xet_protocol::util::secret::Secret;

/// One entry of a netrc file (a `machine` or the `default`).
#[derive(Clone)]
pub(crate) struct Entry {
    /// The machine's name; `None` for the `default` entry.
    pub machine: Option<String>,
    pub login: String,
    pub password: Secret,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("machine", &self.machine)
            .field("login", &self.login)
            .finish_non_exhaustive()
    }
}

/// A netrc file the parser refused: the line and what was wrong (never the file's text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub(crate) struct NetrcError {
    pub line: usize,
    pub why: &'static str,
}

/// The entries of a netrc file, in file order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Netrc {
    entries: Vec<Entry>,
}

/// What the next word of the file is expected to be.
enum Expect {
    Keyword,
    MachineName,
    Login,
    Password,
    Account,
    MacroName,
}

/// An entry being read: its fields as far as they were given.
#[derive(Default)]
struct Partial {
    machine: Option<String>,
    login: Option<String>,
    password: Option<String>,
    account: bool,
}

impl Partial {
    fn finish(self) -> Entry {
        Entry {
            machine: self.machine,
            login: self.login.unwrap_or_default(),
            password: Secret::new(self.password.unwrap_or_default()),
        }
    }
}

impl Netrc {
    /// Parses the text of a netrc file (see the module documentation).
    pub(crate) fn parse(text: &str) -> Result<Self, NetrcError> {
        let mut entries = Vec::new();
        let mut current: Option<Partial> = None;
        let mut default_seen = false;
        let mut expect = Expect::Keyword;
        let mut line = 1;
        let mut rest = text;
        loop {
            // Skip white space, counting lines; a macro body ends at a blank line.
            let trimmed = rest.trim_start();
            let skipped = &rest[..rest.len() - trimmed.len()];
            line += skipped.matches('\n').count();
            rest = trimmed;
            if rest.is_empty() {
                break;
            }
            if matches!(expect, Expect::Keyword) && rest.starts_with('#') {
                let end = rest.find('\n').unwrap_or(rest.len());
                rest = &rest[end..];
                continue;
            }
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let word = &rest[..end];
            rest = &rest[end..];
            let bad = |why| Err(NetrcError { line, why });
            match expect {
                Expect::Keyword => match word {
                    "machine" => {
                        if default_seen {
                            return bad("default token must appear after all machine tokens");
                        }
                        entries.extend(current.take().map(Partial::finish));
                        current = Some(Partial::default());
                        expect = Expect::MachineName;
                    }
                    "default" => {
                        if default_seen {
                            return bad("multiple default token");
                        }
                        default_seen = true;
                        entries.extend(current.take().map(Partial::finish));
                        current = Some(Partial::default());
                    }
                    "login" => match &current {
                        Some(p) if p.login.is_none() => expect = Expect::Login,
                        _ => return bad("unexpected token login"),
                    },
                    "password" => match &current {
                        Some(p) if p.password.is_none() => expect = Expect::Password,
                        _ => return bad("unexpected token password"),
                    },
                    "account" => match &current {
                        Some(p) if !p.account => expect = Expect::Account,
                        _ => return bad("unexpected token account"),
                    },
                    "macdef" => expect = Expect::MacroName,
                    // Words that are no keyword are skipped, as go-netrc skips them.
                    _ => {}
                },
                Expect::MachineName => {
                    if let Some(p) = current.as_mut() {
                        p.machine = Some(word.to_string());
                    }
                    expect = Expect::Keyword;
                }
                Expect::Login => {
                    if let Some(p) = current.as_mut() {
                        p.login = Some(word.to_string());
                    }
                    expect = Expect::Keyword;
                }
                Expect::Password => {
                    if let Some(p) = current.as_mut() {
                        p.password = Some(word.to_string());
                    }
                    expect = Expect::Keyword;
                }
                Expect::Account => {
                    if let Some(p) = current.as_mut() {
                        p.account = true;
                    }
                    expect = Expect::Keyword;
                }
                Expect::MacroName => {
                    // The body runs to the next blank line (or the end of the file).
                    let end = blank_line(rest).unwrap_or(rest.len());
                    line += rest[..end].matches('\n').count();
                    rest = &rest[end..];
                    expect = Expect::Keyword;
                }
            }
        }
        entries.extend(current.take().map(Partial::finish));
        Ok(Netrc { entries })
    }

    /// The entry for `host` (a host name without port) and, if given, the user `login` (see the
    /// module documentation).
    pub(crate) fn find(&self, host: &str, login: Option<&str>) -> Option<&Entry> {
        let login = login.filter(|l| !l.is_empty());
        self.entries
            .iter()
            .find(|e| e.machine.as_deref() == Some(host) && login.is_none_or(|l| e.login == l))
            .or_else(|| self.entries.iter().find(|e| e.machine.is_none()))
    }
}

/// Where the first blank line (`\n` followed by optional spaces and `\n`) in `text` starts.
fn blank_line(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find('\n') {
        let start = i + at;
        let mut j = start + 1;
        while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\r') {
            j += 1;
        }
        if j < bytes.len() && bytes[j] == b'\n' {
            return Some(start);
        }
        i = start + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_as_go_netrc_finds_them() {
        let text = "# my machines\nmachine h.example login alice password s3cret\n\
                    machine h.example\n  login bob\n  password other # trailing comment\n\
                    machine x.example login carol password p port 443\n\
                    macdef init\ncd /pub\nmachine evil.example login m password macro\n\n\
                    default login anon password guest\n";
        let n = Netrc::parse(text).unwrap();
        let e = n.find("h.example", None).unwrap();
        assert_eq!((e.login.as_str(), e.password.expose()), ("alice", "s3cret"));
        let e = n.find("h.example", Some("bob")).unwrap();
        assert_eq!((e.login.as_str(), e.password.expose()), ("bob", "other"));
        // An unknown word (`port 443`) is skipped; so is a macro's body.
        let e = n.find("x.example", Some("carol")).unwrap();
        assert_eq!(e.password.expose(), "p");
        assert_eq!(n.find("evil.example", None).unwrap().login, "anon");
        // Names are compared exactly; anything else gets the default.
        assert_eq!(n.find("H.example", None).unwrap().login, "anon");
        assert_eq!(n.find("h.example", Some("mallory")).unwrap().login, "anon");
        assert!(!format!("{e:?}").contains("\"p\""), "{e:?}");
        let n = Netrc::parse("machine a login u password p").unwrap();
        assert!(n.find("b", None).is_none());
        assert!(Netrc::parse("").unwrap().find("a", None).is_none());
    }

    #[test]
    fn bad_files_are_refused_and_nothing_panics() {
        for (text, line) in [
            ("default login a\nmachine h login b", 2),
            ("default\ndefault", 2),
            ("machine h login a login b", 1),
            ("login a", 1),
            ("machine h\npassword a\npassword b", 3),
        ] {
            assert_eq!(Netrc::parse(text).unwrap_err().line, line, "{text:?}");
        }
        for text in [
            "machine",
            "machine h login",
            "macdef",
            "macdef x",
            "#",
            "\u{0}\u{ffff} machine é login ü password 😀\r\n",
            "machine h password",
            "\n\n\n",
        ] {
            let _ = Netrc::parse(text);
        }
        let n = Netrc::parse("machine h login u password").unwrap();
        assert_eq!(n.find("h", None).unwrap().password.expose(), "");
    }
}
