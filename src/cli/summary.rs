//! `git xet push-summary`: what the uploads of a push sent and what deduplication saved, from
//! the transfer journal ([`crate::agent::journal`]). The pre-push hook prints it after git-lfs's
//! own pre-push, in the user's terminal; the agent itself cannot (git-lfs shows its stderr only
//! with `GIT_TRACE`).
//!
//! With `--refs` and `--state`, run by the hook before git-lfs's pre-push, it instead checks
//! whether git-lfs will upload the push's LFS objects without git-xet and notes why in the state
//! file ([`super::without_xet`]); after the push, `--state` makes it print that instead when
//! git-xet uploaded nothing.

use std::io::Write;
use std::process::ExitCode;

use super::{without_xet, CmdResult};
use crate::agent::journal::{self, Direction};
use crate::git::Git;
use xet_protocol::util::size::format_size;

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Reads the uploads recorded in .git/xet/transfers.jsonl since \
--since (unix seconds; default: all) and prints one line: how many objects and bytes were \
pushed, how many bytes went over the wire, and how much was deduplicated (and of that, how much \
through an earlier version of the same file found in the history). Prints nothing when \
no upload was recorded. --after-byte counts only records appended after the journal had that \
length. The pre-push hook installed by `git xet install --local` runs it after \
each push.\n\nWhen git-lfs uploads a push's LFS objects without git-xet (the LFS server does \
not offer Xet, git-xet is not registered, or lfs.basictransfersonly is set), the hook says so \
instead, in one line: before git-lfs's pre-push it runs `git xet push-summary --remote NAME \
--refs FILE --state FILE` (FILE: the hook's standard input), which asks the LFS server once \
(at most 10 s, never prompting for a credential) which of the push's objects it lacks and \
whether it offers Xet, and notes the answer in the state file; after the push, --state FILE \
prints it when the journal shows no upload of git-xet. Nothing is printed when in doubt.\n\nExample:\n  git xet push-summary --since $(date +%s)"
)]
pub(crate) struct SummaryArgs {
    /// Only uploads recorded at this time (unix seconds) or later.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub since: u64,
    /// Only uploads appended after the journal was this many bytes long (the pre-push hook
    /// notes its length before the push, which tells two pushes in one second apart).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub after_byte: u64,
    /// Print one JSON object instead.
    #[arg(long)]
    pub json: bool,
    /// The remote being pushed to (the pre-push hook's first argument), with --refs.
    #[arg(long, value_name = "NAME", requires = "refs")]
    pub remote: Option<String>,
    /// A file holding the pre-push hook's standard input (the ref updates): check, before
    /// git-lfs's pre-push, whether git-lfs will upload the push's LFS objects without git-xet,
    /// and note it in --state; print nothing.
    #[arg(long, value_name = "FILE", requires_all = ["remote", "state"])]
    pub refs: Option<std::path::PathBuf>,
    /// The file the check before the push writes (with --refs) or reads (without): when
    /// git-xet uploaded nothing, its finding is printed instead of the summary.
    #[arg(long, value_name = "FILE")]
    pub state: Option<std::path::PathBuf>,
}

/// What the recorded uploads add up to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub objects: u64,
    pub bytes: u64,
    pub sent: u64,
    pub deduplicated: u64,
    /// Of `deduplicated`, bytes matched through earlier versions of the files.
    pub from_history: u64,
    /// Every upload went to a directory store (no server): "stored", "in the store".
    pub to_directory: bool,
}

/// The line the hook prints, or `None` when nothing was uploaded.
pub fn line(t: &Totals) -> Option<String> {
    if t.objects == 0 {
        return None;
    }
    let percent = if t.bytes == 0 {
        0.0
    } else {
        t.deduplicated as f64 * 100.0 / t.bytes as f64
    };
    let history = if t.from_history > 0 {
        format!(
            ", {} of it found through earlier versions",
            format_size(t.from_history)
        )
    } else {
        String::new()
    };
    let (sent, there) = if t.to_directory {
        ("stored", "in the store")
    } else {
        ("sent", "on the server")
    };
    Some(format!(
        "git-xet: pushed {} object{} ({}): {sent} {}, {} ({percent:.0}%) was already {there}{history}",
        t.objects,
        if t.objects == 1 { "" } else { "s" },
        format_size(t.bytes),
        format_size(t.sent),
        format_size(t.deduplicated),
    ))
}

pub fn run(args: &SummaryArgs) -> CmdResult {
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let git = Git::in_dir(&cwd);
    if !git.in_repository() {
        return Err(
            "not inside a git repository: run `git xet push-summary` in the repository \
                    you pushed from (the pre-push hook of `git xet install --local` runs it \
                    there after each push)"
                .into(),
        );
    }
    if let (Some(refs), Some(remote), Some(state)) = (&args.refs, &args.remote, &args.state) {
        without_xet::check_and_save(&cwd, remote, refs, state);
        return Ok(ExitCode::SUCCESS);
    }
    let common = git.common_dir()?;
    let mut t = Totals {
        to_directory: true,
        ..Totals::default()
    };
    for r in journal::read_since(&common, args.since, args.after_byte)? {
        if r.direction != Direction::Upload {
            continue;
        }
        t.to_directory &= !r.endpoint.is_empty() && !r.endpoint.contains("://");
        t.objects += 1;
        t.bytes += r.size;
        t.sent += r.transferred_bytes;
        t.deduplicated += r.dedup_bytes.min(r.size);
        t.from_history += r.history_bytes.min(r.dedup_bytes);
    }
    // Nothing went through git-xet: what the check before the push found, if anything.
    let without = match &args.state {
        Some(state) if t.objects == 0 => without_xet::load(state),
        _ => None,
    };
    if let Some(w) = &without {
        // The agent's log says it too (git-lfs never started the agent for these objects).
        super::fetch::start_logging();
        tracing::info!(
            objects = w.objects,
            bytes = w.bytes,
            "push without git-xet: {}",
            w.why
        );
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "objects": t.objects,
                "bytes": t.bytes,
                "sent_bytes": t.sent,
                "deduplicated_bytes": t.deduplicated,
                "history_deduplicated_bytes": t.from_history,
                "without_xet": without,
            })
        )?;
    } else if let Some(l) = line(&t) {
        writeln!(out, "{l}")?;
    } else if let Some(w) = &without {
        writeln!(out, "{}", without_xet::line(w))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line() {
        assert_eq!(line(&Totals::default()), None);
        let t = Totals {
            objects: 4,
            bytes: 400 << 20,
            sent: 43 << 20,
            deduplicated: 357 << 20,
            from_history: 0,
            to_directory: false,
        };
        let l = line(&t).unwrap();
        assert!(l.contains("pushed 4 objects"), "{l}");
        assert!(l.contains("(89%)"), "{l}");
        assert!(!l.contains("earlier"), "{l}");
        let l = line(&Totals {
            from_history: 300 << 20,
            ..t
        })
        .unwrap();
        assert!(
            l.ends_with("on the server, 300.0 MiB of it found through earlier versions"),
            "{l}"
        );
        let l = line(&Totals {
            to_directory: true,
            ..t
        })
        .unwrap();
        assert!(
            l.contains(": stored 43.0 MiB, ") && l.ends_with("was already in the store"),
            "{l}"
        );
    }
}
