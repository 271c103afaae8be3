//! `git xet upload-ahead`: what the pre-push hook runs before git-lfs's own pre-push in a
//! standalone repository, so that a push of many small files costs a few packs, not a round
//! per handful of files.
//!
//! git-lfs hands each of its agents one object at a time and waits for its `complete`, so
//! without a batch answer to name packs (negotiated mode, docs/lfs-agent.md §12.4) the agents
//! can only gather the few objects in their hands (§12.6). Before git-lfs starts, this step
//! lists the push's LFS objects as git-lfs's pre-push selects them (the pointers in the pushed
//! commits that the remote's refs do not reach, [`super::without_xet::pushed_pointers`]) and
//! has the agent upload the small ones in packs of up to 64 files and 1 MiB, two at once
//! (§12.7); the agents git-lfs then hands them to find each registered and answer at once.
//! Nothing here can fail the push: anything it did not upload is uploaded by git-lfs's agents
//! as before.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::CmdResult;
use crate::git::Git;

/// How long listing the push's objects may take before this step gives up (the push then goes
/// as before).
const LIST_TIME: Duration = Duration::from_secs(60);

/// Packs uploaded at once (each by an agent of its own).
const WORKERS: usize = 2;

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Run by the pre-push hook that `git xet install --local` writes, before \
git-lfs's pre-push, in standalone mode only (elsewhere it does nothing): lists the LFS objects \
the push carries (those of the pushed commits that the remote's refs do not reach, as git-lfs \
selects them), uploads the small ones (under 1 MiB) to the repository's Xet endpoint in packs \
of up to 64 files and 1 MiB, two at once, and marks them for git-lfs's agents, which then answer for them at once. \
Anything it did not upload, git-lfs's agents upload as usual. `git config xet.packUploads \
false` turns it off. Always exits 0.\n\nExample (what the hook runs):\n  git xet upload-ahead \
--remote origin --refs .git/xet/pre-push-123.refs"
)]
pub(crate) struct UploadAheadArgs {
    /// The remote being pushed to (the pre-push hook's first argument).
    #[arg(long, value_name = "NAME")]
    pub remote: String,
    /// A file holding the pre-push hook's standard input (the ref updates).
    #[arg(long, value_name = "FILE")]
    pub refs: std::path::PathBuf,
}

pub fn run(args: &UploadAheadArgs) -> CmdResult {
    // To GIT_XET_LOG as the agent's; on stderr (the push's output) errors only, since what
    // this step could not do git-lfs's agents do next and report (a server that does not
    // answer: their errors, not this step's retries, say so).
    crate::agent::settings::register_env_secrets();
    super::transfer::init_logging(super::transfer::Stderr::Errors);
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let git = Git::in_dir(&cwd);
    if !git.in_repository() || !crate::agent::settings::xet_standalone_for(&git, &args.remote) {
        return Ok(ExitCode::SUCCESS);
    }
    let refs = match std::fs::read_to_string(&args.refs) {
        Ok(refs) => refs,
        Err(e) => {
            tracing::debug!(refs = %args.refs.display(), "no ref updates to read: {e}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let listed = Instant::now();
    let Some(pointers) =
        super::without_xet::pushed_pointers(&cwd, &args.remote, &refs, Instant::now() + LIST_TIME)
    else {
        return Ok(ExitCode::SUCCESS);
    };
    let objects: Vec<_> = pointers.iter().map(|p| (p.oid, p.size)).collect();
    let started = Instant::now();
    match crate::agent::transfer::upload_ahead(&cwd, &args.remote, &objects, WORKERS) {
        Ok(n) => {
            tracing::info!(
                objects = objects.len(),
                registered = n,
                list_millis = (started - listed).as_millis() as u64,
                upload_millis = started.elapsed().as_millis() as u64,
                "small objects uploaded ahead of git-lfs"
            );
            if n > 0 {
                eprintln!(
                    "git-xet: {n} small LFS file{} sent in packs ahead of git-lfs ({:.1} s)",
                    if n == 1 { "" } else { "s" },
                    started.elapsed().as_secs_f64()
                );
            }
        }
        Err(e) => tracing::warn!(
            "uploading the push's small objects ahead of git-lfs failed (its agents upload \
             them): {}",
            xet_protocol::redact::redact(&e.to_string())
        ),
    }
    Ok(ExitCode::SUCCESS)
}
