//! `git xet push-summary`: what the uploads of a push sent and what deduplication saved, from
//! the transfer journal ([`crate::lfs::journal`]). The pre-push hook prints it after git-lfs's
//! own pre-push, in the user's terminal; the agent itself cannot (git-lfs shows its stderr only
//! with `GIT_TRACE`).

use std::io::Write;
use std::process::ExitCode;

use super::CmdResult;
use crate::git::Git;
use crate::lfs::journal::{self, Direction};
use xet_client::util::size::format_size;

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Reads the uploads recorded in .git/xet/transfers.jsonl since \
--since (unix seconds; default: all) and prints one line: how many objects and bytes were \
pushed, how many bytes went over the wire, and how much was deduplicated (and of that, how much \
through an earlier version of the same file found in the history). Prints nothing when \
no upload was recorded. --after-byte counts only records appended after the journal had that \
length. The pre-push hook installed by `git xet install --local` runs it after \
each push.\n\nExample:\n  git xet push-summary --since $(date +%s)"
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
            })
        )?;
    } else if let Some(l) = line(&t) {
        writeln!(out, "{l}")?;
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
