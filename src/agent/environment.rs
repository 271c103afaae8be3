//! The process environment as the command line captured it when it started. The agent and the
//! `git xet` commands read their variables (`GIT_XET_*`, `HF_TOKEN`, `HOME`, the proxy
//! variables) from this snapshot and never from the process, so that only `cli` reads the
//! environment, once, and a program embedding the library hands in what it wants. Nothing
//! installed is an empty environment (in unit tests, which have no command line: the
//! process's).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::sync::OnceLock;

type Vars = BTreeMap<OsString, OsString>;

static INSTALLED: OnceLock<Vars> = OnceLock::new();

/// Makes `vars` the environment every later read sees (the command line calls it first
/// thing with the process's). Only the first call counts, and only before any read.
pub fn install(vars: impl IntoIterator<Item = (OsString, OsString)>) {
    let _ = INSTALLED.set(vars.into_iter().collect());
}

fn installed() -> &'static Vars {
    INSTALLED.get_or_init(|| {
        if cfg!(test) {
            std::env::vars_os().collect()
        } else {
            Vars::new()
        }
    })
}

/// `name` in `vars`, if it is set (possibly empty).
fn lookup(vars: &Vars, name: &str) -> Option<OsString> {
    vars.get(OsStr::new(name)).cloned()
}

/// The variable `name`, if it is set (possibly empty).
pub(crate) fn var_os(name: &str) -> Option<OsString> {
    lookup(installed(), name)
}

/// The variable `name`, if it is set and valid UTF-8.
pub(crate) fn var(name: &str) -> Option<String> {
    var_os(name)?.into_string().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_looked_up_by_exact_name() {
        let vars: Vars = [
            ("GIT_XET_A".into(), "a".into()),
            ("GIT_XET_EMPTY".into(), OsString::new()),
        ]
        .into_iter()
        .collect();
        assert_eq!(lookup(&vars, "GIT_XET_A"), Some("a".into()));
        assert_eq!(lookup(&vars, "GIT_XET_EMPTY"), Some(OsString::new()));
        assert_eq!(lookup(&vars, "git_xet_a"), None);
        assert_eq!(lookup(&vars, "GIT_XET_UNSET"), None);
        // Unit tests read the process's environment.
        assert_eq!(var_os("HOME"), std::env::var_os("HOME"));
    }
}
