//! `git xet cat [--ref REF] [--range START-END] PATH`: the bytes of one file at a ref, or a byte
//! range of it, on stdout, read as `git xet mount` reads them ([`crate::mount::view`]): an LFS
//! file from the local LFS store if it is there, else only the chunks the range needs from the
//! remote, every chunk checked. A path git would not check out (`.git/config`, `a/../b`, …) is
//! refused with the reason ([`crate::git::checkout`]).

use std::io::Write;
use std::process::ExitCode;

use super::CmdResult;
use crate::git::{checkout, Git};
use crate::mount::view::{Node, View};

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Prints the content of PATH (from the repository's root) as it is at \
REF (HEAD by default), or bytes START to END of it (inclusive; `START-` for the rest), without \
checking anything out. A Git LFS file comes from the local LFS store if its object is there, \
else from the remote's server, which sends only the chunks covering the range; every chunk is \
checked against the file's chunk list. Ordinary files come from git's objects.\n\n\
Examples:\n  git xet cat model.safetensors | head -c 8\n  git xet cat --range 0-1048575 \
--ref v1.0 data/train.parquet > head.bin"
)]
pub(crate) struct CatArgs {
    /// The commit, branch or tag to read from.
    #[arg(long = "ref", value_name = "REF", default_value = "HEAD")]
    pub rev: String,
    /// Only bytes START to END (inclusive), or `START-` to the end.
    #[arg(long, value_name = "START-END")]
    pub range: Option<String>,
    /// The remote whose server holds the objects (default: the one git-lfs uses).
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// The file, from the repository's root.
    #[arg(value_name = "PATH")]
    pub path: String,
}

/// Why `path` cannot be read at `rev`: git would not check it out.
fn refused(path: &str, rev: &str, refusal: &checkout::Refusal) -> String {
    format!(
        "{path:?} at {rev} is not read: git does not check it out ({refusal}); `git xet cat` \
         and `git xet mount` read only what a checkout writes"
    )
}

/// Bytes read and written at a time.
const PIECE: u64 = 8 << 20;

/// `START-END` or `START-` as an inclusive range, with the end clamped to `size`.
fn parse_range(text: &str, size: u64) -> Result<(u64, u64), String> {
    let bad = || format!("--range {text:?}: use START-END (inclusive bytes) or START-");
    let (a, b) = text.trim().split_once('-').ok_or_else(bad)?;
    let start: u64 = a.trim().parse().map_err(|_| bad())?;
    let end: u64 = if b.trim().is_empty() {
        u64::MAX
    } else {
        b.trim().parse().map_err(|_| bad())?
    };
    if end < start {
        return Err(bad());
    }
    Ok((start, end.min(size.saturating_sub(1))))
}

pub fn run(args: &CatArgs) -> CmdResult {
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let git = Git::in_dir(&cwd);
    let path = args.path.trim_start_matches("./").trim_matches('/');
    if let Err(refusal) = checkout::check_path(path) {
        return Err(refused(path, &args.rev, &refusal).into());
    }
    let view = View::open(&git, &args.rev, args.remote.as_deref())?;
    let Some(id) = view.lookup(path) else {
        if let Some(left) = view.left_out(path) {
            return Err(refused(&left.path, &args.rev, &left.refusal).into());
        }
        return Err(format!(
            "{path:?} is not in {} (paths start at the repository's root)",
            args.rev
        )
        .into());
    };
    let Node::File { size, .. } = &view.nodes[id] else {
        return Err(format!("{path:?} at {} is not a file", args.rev).into());
    };
    let size = *size;
    let (start, end) = match &args.range {
        None => (0, size.saturating_sub(1)),
        Some(text) => parse_range(text, size)?,
    };
    let opened = view.open_file(id)?;
    let mut out = std::io::stdout().lock();
    if size == 0 || start >= size {
        return Ok(ExitCode::SUCCESS);
    }
    let mut at = start;
    while at <= end {
        let len = PIECE.min(end - at + 1);
        let bytes = opened.read(at, len)?;
        if bytes.is_empty() {
            break;
        }
        out.write_all(&bytes)?;
        at += bytes.len() as u64;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("0-9", 100), Ok((0, 9)));
        assert_eq!(parse_range("90-", 100), Ok((90, 99)));
        assert_eq!(parse_range("50-1000", 100), Ok((50, 99)));
        for bad in ["", "5", "a-b", "9-1", "-5"] {
            assert!(parse_range(bad, 100).is_err(), "{bad}");
        }
    }
}
