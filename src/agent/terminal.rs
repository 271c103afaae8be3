//! What the agent says on the user's terminal, and which git-lfs process started it.
//!
//! git-lfs shows nothing of an agent's stderr (only with `GIT_TRACE=1`) and only a short
//! message for a failed `init`, and it starts up to `lfs.concurrenttransfers` agents at once.
//! For the few things a user must see while a command runs (a refused prune check, a server
//! that does not answer), the first agent of a git-lfs process to claim a marker file in
//! git-lfs's temp directory writes one line to `/dev/tty` ([`tell_user_once`]). Without a
//! terminal the message is only in the agent's log.
//!
//! The caller is found through the process tree (`/proc` on Linux, `ps` elsewhere on Unix);
//! on Windows it is not found and nothing is shown.

use std::path::Path;
use std::time::Duration;

use crate::git::Git;

/// How many ancestors to look through: git-lfs starts the agent through `sh -c`.
const MAX_ANCESTORS: usize = 4;

/// The nearest `git-lfs` among this process's ancestors: its pid and command line.
pub(crate) fn git_lfs_ancestor() -> Option<(u32, Vec<String>)> {
    let mut pid = parent_of(std::process::id())?;
    for _ in 0..MAX_ANCESTORS {
        if pid <= 1 {
            return None;
        }
        let args = command_line(pid)?;
        if is_git_lfs(args.first().map(String::as_str).unwrap_or_default()) {
            return Some((pid, args));
        }
        pid = parent_of(pid)?;
    }
    None
}

/// Prefix of the marker files that make only one of git-lfs's agent processes speak.
const NOTICE_PREFIX: &str = "xet-notice-";

/// Shows `message` on the user's terminal once per git-lfs process `pid` and `topic`: the
/// first agent to create the marker file for both in git-lfs's temp directory writes it to
/// `/dev/tty`. Without a terminal, nothing is shown (the caller logs the message too).
pub(crate) fn tell_user_once(git: &Git, pid: u32, topic: &str, message: &str) {
    let Ok(dir) = super::settings::lfs_temp_dir(git) else {
        return;
    };
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    remove_old_notices(&dir);
    let marker = dir.join(format!("{NOTICE_PREFIX}{topic}-{pid}"));
    if std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
        .is_err()
    {
        return;
    }
    if let Ok(mut tty) = std::fs::OpenOptions::new().write(true).open("/dev/tty") {
        use std::io::Write;
        let _ = writeln!(
            tty,
            "\ngit-xet: {}\n",
            xet_protocol::redact::redact(message)
        );
    }
}

/// Removes the notice markers of earlier runs (older than a minute).
fn remove_old_notices(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(NOTICE_PREFIX) {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(60));
        if old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(target_os = "linux")]
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid …": comm may hold spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(target_os = "linux")]
pub(crate) fn command_line(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

#[cfg(all(unix, not(target_os = "linux")))]
fn ps(pid: u32, field: &str) -> Option<String> {
    let out = std::process::Command::new("ps")
        .args(["-o", &format!("{field}="), "-p", &pid.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(all(unix, not(target_os = "linux")))]
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    ps(pid, "ppid")?.parse().ok()
}

#[cfg(all(unix, not(target_os = "linux")))]
pub(crate) fn command_line(pid: u32) -> Option<Vec<String>> {
    // Arguments with spaces are split wrongly; git-lfs's subcommand and flags have none.
    Some(
        ps(pid, "args")?
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

#[cfg(not(unix))]
pub(crate) fn parent_of(_pid: u32) -> Option<u32> {
    None
}

#[cfg(not(unix))]
pub(crate) fn command_line(_pid: u32) -> Option<Vec<String>> {
    None
}

/// Whether `argv0` names git-lfs.
pub(crate) fn is_git_lfs(argv0: &str) -> bool {
    let name = argv0.rsplit(['/', '\\']).next().unwrap_or(argv0);
    name == "git-lfs" || name == "git-lfs.exe"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_lfs_is_recognised_by_its_program_name() {
        assert!(is_git_lfs("/usr/bin/git-lfs") && is_git_lfs("git-lfs"));
        assert!(is_git_lfs(r"C:\Program Files\Git LFS\git-lfs.exe"));
        assert!(!is_git_lfs("/usr/bin/git") && !is_git_lfs("git-lfs-helper"));
    }
}
