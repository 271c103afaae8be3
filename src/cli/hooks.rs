//! The git hooks `git xet install --local` puts in a repository, and their removal.
//!
//! There is one, `pre-push` (text in `hooks/pre-push`, embedded here): when the repository
//! expects git-xet but git-lfs cannot use the agent, it stops the push with a message instead of
//! letting git-lfs fall back to whole-object uploads; otherwise it hands over to the hook it
//! replaced or to `git lfs pre-push`, then prints the push's summary (`git xet push-summary`),
//! or that git-lfs uploaded the push's LFS objects without git-xet, and why (checked before
//! handing over: [`super::without_xet`]).
//!
//! Rules, for each hook:
//!
//! - none there: ours is written.
//! - ours there (it carries the [`MARKER`] line): rewritten if its text changed, else left alone.
//! - another hook there (git-lfs's standard one, or the user's own): it is never overwritten. It
//!   is moved to `<hook>.before-xet` in the same directory and ours runs it, with the same
//!   arguments and standard input, after its check, so the push does exactly what it did before
//!   plus the check. If `<hook>.before-xet` already exists with other contents, nothing is
//!   changed and install says so.
//!
//! The hook names are recorded in `xet.managedhooks` (local configuration). Uninstall removes a
//! hook only if it still carries the marker, and moves `<hook>.before-xet` back, so the hooks
//! directory ends as it was before install. Hooks live where git runs them (`git rev-parse
//! --git-path hooks`, which honours `core.hooksPath`), except that a `core.hooksPath` set outside
//! the repository's own configuration is shared with other repositories and is left alone.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::git::Git;

/// The line that marks a hook file as git-xet's.
pub(crate) const MARKER: &str = "# git-xet-hook:";
/// Suffix of a replaced hook, kept and run by ours.
pub(crate) const BEFORE_SUFFIX: &str = ".before-xet";
/// Local configuration key listing the hooks install wrote.
pub(crate) const MANAGED_HOOKS: &str = "xet.managedhooks";

/// The hooks install writes: name and text.
pub(crate) const HOOKS: &[(&str, &str)] = &[("pre-push", include_str!("../../hooks/pre-push"))];

type Error = Box<dyn std::error::Error>;

/// Who wrote a hook file (as `git xet status --json` names it: `none`, `git-xet`, `git-lfs`,
/// `other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum HookKind {
    /// No hook file.
    None,
    /// git-xet's (carries [`MARKER`]).
    GitXet,
    /// git-lfs's standard hook: `command -v git-lfs … || …` then `git lfs <hook> "$@"`.
    GitLfs,
    /// Anything else.
    Other,
}

/// Classifies the text of hook `name`.
pub(crate) fn classify(name: &str, text: &str) -> HookKind {
    if text.lines().any(|l| l.trim_start().starts_with(MARKER)) {
        return HookKind::GitXet;
    }
    // git-lfs's template, in every version since 2.x: a shebang, an optional line that checks
    // for git-lfs, and the call. Anything more is someone's own hook.
    let call = format!("git lfs {name} \"$@\"");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("#!"))
        .collect();
    match lines.as_slice() {
        [only] if *only == call => HookKind::GitLfs,
        [check, last] if check.starts_with("command -v git-lfs") && *last == call => {
            HookKind::GitLfs
        }
        _ => HookKind::Other,
    }
}

/// Where git runs this repository's hooks, absolute.
pub(crate) fn hooks_dir(git: &Git) -> Result<PathBuf, Error> {
    let dir = git.run(&["rev-parse", "--path-format=absolute", "--git-path", "hooks"])?;
    Ok(PathBuf::from(dir))
}

/// The kind of hook `name` in `dir`.
pub(crate) fn kind_in(dir: &Path, name: &str) -> HookKind {
    match std::fs::read_to_string(dir.join(name)) {
        Ok(text) => classify(name, &text),
        Err(e) if e.kind() == ErrorKind::NotFound => HookKind::None,
        // Unreadable or not text: not ours, and not to be touched.
        Err(_) => HookKind::Other,
    }
}

/// Whether git-xet's pre-push hook is in the repository's hooks directory.
pub(crate) fn ours_installed(git: &Git) -> bool {
    hooks_dir(git).is_ok_and(|d| kind_in(&d, "pre-push") == HookKind::GitXet)
}

/// `core.hooksPath` and its scope, when it is set outside the repository's own configuration:
/// then the hooks directory is shared with other repositories.
fn shared_hooks_path(git: &Git) -> Result<Option<(String, String)>, Error> {
    let out = git.output(["config", "--show-scope", "--get", "core.hooksPath"])?;
    if !out.status.success() {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (scope, value) = text
        .trim_end_matches(['\n', '\r'])
        .split_once('\t')
        .unwrap_or(("", ""));
    Ok(match scope {
        "local" | "worktree" => None,
        _ => Some((scope.to_string(), value.to_string())),
    })
}

fn write_hook(path: &Path, text: &str) -> std::io::Result<()> {
    // Written beside and renamed, so a push running now sees the old hook or the new one.
    xet_protocol::util::fs::AtomicWrite::new()
        .temp_name(".git-xet-", ".tmp")
        .mode(0o755)
        .write(path, text.as_bytes())
}

/// Installs the hooks in the current repository; returns one line per hook saying what was done.
pub fn install(git: &Git) -> Result<Vec<String>, Error> {
    if let Some((scope, value)) = shared_hooks_path(git)? {
        return Ok(vec![format!(
            "hooks not installed: core.hooksPath is set in the {scope} configuration ({value}), \
             a hooks directory other repositories share; add git-xet's pre-push check there \
             yourself if you want it (see hooks/pre-push in git-xet's source)"
        )]);
    }
    let dir = hooks_dir(git)?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create the hooks directory {}: {e}", dir.display()))?;
    let mut report = Vec::new();
    let mut managed: Vec<String> = git
        .config_get_in(Some(crate::git::Scope::Local), MANAGED_HOOKS)?
        .map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    for (name, text) in HOOKS {
        if !install_hook(&dir, name, text, &mut report)? {
            continue;
        }
        if !managed.iter().any(|m| m == name) {
            managed.push(name.to_string());
        }
    }
    record_managed(git, managed)?;
    Ok(report)
}

/// Installs hook `name` with `text` in `dir` (writing it, updating ours, or moving another
/// hook aside to run after ours), adding what was done to `report`. False when it was left
/// alone because its `.before-xet` place is taken.
fn install_hook(
    dir: &Path,
    name: &str,
    text: &str,
    report: &mut Vec<String>,
) -> Result<bool, Error> {
    let path = dir.join(name);
    let shown = path.display();
    match std::fs::read(&path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            write_hook(&path, text)?;
            report.push(format!("hook {shown} installed"));
        }
        Err(e) => return Err(format!("cannot read {shown}: {e}").into()),
        Ok(current) => {
            let current_text = String::from_utf8_lossy(&current);
            match classify(name, &current_text) {
                HookKind::GitXet if current == text.as_bytes() => {
                    report.push(format!("hook {shown} (unchanged)"));
                }
                HookKind::GitXet => {
                    write_hook(&path, text)?;
                    report.push(format!("hook {shown} updated"));
                }
                kind => return replace_hook(dir, name, text, kind, &current, report),
            }
        }
    }
    Ok(true)
}

/// Puts ours in place of hook `name` in `dir`, another program's of kind `kind` whose bytes are
/// `current`: that one is moved to `<name>.before-xet` (unless a different file is there
/// already: then nothing is changed and false returned) and ours runs it after its check.
fn replace_hook(
    dir: &Path,
    name: &str,
    text: &str,
    kind: HookKind,
    current: &[u8],
    report: &mut Vec<String>,
) -> Result<bool, Error> {
    let path = dir.join(name);
    let before = dir.join(format!("{name}{BEFORE_SUFFIX}"));
    let shown = path.display();
    let whose = if kind == HookKind::GitLfs {
        "git-lfs's"
    } else {
        "your"
    };
    match std::fs::read(&before) {
        Ok(saved) if saved != current => {
            report.push(format!(
                "hook {shown} not installed: it exists and so does {}, \
                 with other contents; move one of them away and run \
                 `git xet install --local` again",
                before.display()
            ));
            return Ok(false);
        }
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", before.display()).into()),
    }
    std::fs::rename(&path, &before)
        .map_err(|e| format!("cannot move {shown} to {}: {e}", before.display()))?;
    write_hook(&path, text)?;
    report.push(format!(
        "hook {shown} installed; {whose} hook moved to {} and runs after \
         git-xet's check",
        before.display()
    ));
    let lfs_call = format!("lfs {name}");
    if kind == HookKind::Other && !String::from_utf8_lossy(current).contains(&lfs_call) {
        report.push(format!(
            "note: your {name} hook does not run `git lfs {name}`, so git-lfs \
             does not upload LFS objects on push; add `git lfs {name} \"$@\"` \
             to it (see `git lfs update --manual`)"
        ));
    }
    Ok(true)
}

/// Records the names of the hooks install wrote in `xet.managedhooks` (sorted; set only when
/// it changes).
fn record_managed(git: &Git, mut managed: Vec<String>) -> Result<(), Error> {
    managed.sort();
    let value = managed.join(" ");
    if git
        .config_get_in(Some(crate::git::Scope::Local), MANAGED_HOOKS)?
        .as_deref()
        != Some(value.as_str())
    {
        git.config_set(crate::git::Scope::Local, MANAGED_HOOKS, &value)?;
    }
    Ok(())
}

/// Removes the hooks install wrote (those still carrying the marker) and puts back the ones they
/// replaced; returns one line per change.
pub fn uninstall(git: &Git) -> Result<Vec<String>, Error> {
    let dir = hooks_dir(git)?;
    let mut names: Vec<String> = git
        .config_get_in(Some(crate::git::Scope::Local), MANAGED_HOOKS)?
        .map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    for (name, _) in HOOKS {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    let mut report = Vec::new();
    for name in &names {
        let path = dir.join(name);
        let before = dir.join(format!("{name}{BEFORE_SUFFIX}"));
        let kind = kind_in(&dir, name);
        let has_before = before.exists();
        match kind {
            HookKind::GitXet | HookKind::None => {
                if has_before {
                    std::fs::rename(&before, &path).map_err(|e| {
                        format!(
                            "cannot move {} back to {}: {e}",
                            before.display(),
                            path.display()
                        )
                    })?;
                    report.push(format!(
                        "hook {} restored: git-xet's hook removed, the one it had replaced put back",
                        path.display()
                    ));
                } else if kind == HookKind::GitXet {
                    std::fs::remove_file(&path)
                        .map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
                    report.push(format!("hook {} removed", path.display()));
                }
            }
            HookKind::GitLfs | HookKind::Other => {
                if has_before {
                    report.push(format!(
                        "hook {} left as it is: it was replaced after git-xet installed it; \
                         the hook git-xet had replaced is still in {}",
                        path.display(),
                        before.display()
                    ));
                }
            }
        }
    }
    git.config_unset(crate::git::Scope::Local, MANAGED_HOOKS)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_are_told_apart() {
        let ours = HOOKS[0].1;
        assert_eq!(classify("pre-push", ours), HookKind::GitXet);
        let lfs_3 = "#!/bin/sh\ncommand -v git-lfs >/dev/null 2>&1 || { echo >&2 \"\\nThis \
repository is configured for Git LFS but 'git-lfs' was not found on your path. If you no longer \
wish to use Git LFS, remove this hook by deleting '.git/hooks/pre-push'.\\n\"; exit 2; }\n\
git lfs pre-push \"$@\"\n";
        assert_eq!(classify("pre-push", lfs_3), HookKind::GitLfs);
        assert_eq!(
            classify("pre-push", "#!/bin/sh\ngit lfs pre-push \"$@\"\n"),
            HookKind::GitLfs
        );
        assert_eq!(
            classify("post-commit", lfs_3),
            HookKind::Other,
            "another hook's call"
        );
        assert_eq!(
            classify("pre-push", &format!("{lfs_3}make lint\n")),
            HookKind::Other
        );
        assert_eq!(classify("pre-push", "#!/bin/sh\nexit 0\n"), HookKind::Other);
    }

    #[test]
    fn the_hook_text_is_posix_sh() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pre-push");
        std::fs::write(&path, HOOKS[0].1).unwrap();
        let out = std::process::Command::new("sh")
            .arg("-n")
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(HOOKS[0].1.starts_with("#!/bin/sh\n"));
    }
}
