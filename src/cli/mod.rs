//! The command line: argument parsing, output and exit codes.
//!
//! This is the only module that knows about argv, stdout formatting and process exit codes. Each
//! subcommand lives in its own file with its clap `Args` struct and a `run` function.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod cache;
mod cat;
mod clone;
mod demo;
mod fetch;
mod hash;
mod hooks;
mod inspect;
mod install;
mod ls_files;
mod maintenance;
mod man;
#[cfg(feature = "mount")]
mod mount;
#[cfg(not(all(feature = "server", feature = "mount")))]
mod not_built;
mod program;
mod prune;
#[cfg(feature = "server")]
mod serve;
mod status;
mod summary;
mod transfer;
mod upload_ahead;
mod without_xet;

/// The result of a subcommand: the exit code to return, or an error to print before exiting 1.
pub(crate) type CmdResult = Result<ExitCode, Box<dyn std::error::Error>>;

#[derive(Debug, Parser)]
#[command(
    name = "git-xet",
    version,
    about = "Chunk-deduplicated Git LFS transfers over the Xet protocol",
    long_about = "git-xet makes `git push` and `git pull` of large files move only the bytes that \
changed. It is a Git LFS custom transfer agent speaking the Xet protocol (content-defined chunks, \
xorbs and shards, byte-compatible with Hugging Face's hf-xet), plus tools to inspect Xet objects.\n\n\
Each command explains itself: `git xet <command> --help`, or its manual page \
(`man git-xet-install`; `git xet man` installs the pages). Start with `git xet status`."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    // Each one-line description is an explicit `about`, not a doc comment: clap turns a
    // variant's doc comment into `about` *and* `long_about`, which would replace the
    // `long_about` the subcommand's own `Args` struct sets, and `--help` would lose it.
    #[command(
        about = "Print the Xet file hash of each file, as the reference client computes it."
    )]
    Hash(hash::HashArgs),
    #[command(about = "Print a readable dump of a xorb or a shard, validating every field.")]
    Inspect(inspect::InspectArgs),
    #[cfg(feature = "server")]
    #[command(about = "Run a self-hosted Xet CAS server and Git LFS server.")]
    Serve(Box<serve::ServeArgs>),
    #[cfg(not(feature = "server"))]
    #[command(about = "Run a self-hosted Xet CAS server (not in this build: feature `server`).")]
    Serve(not_built::NotBuiltArgs),
    #[command(
        about = "Register git-xet as Git LFS's `xet` transfer agent (optionally in standalone mode)."
    )]
    Install(install::InstallArgs),
    #[command(about = "Remove what `git xet install` wrote.")]
    Uninstall(install::UninstallArgs),
    #[command(about = "Track files with Git LFS, as `git lfs track` does.")]
    Track(install::TrackArgs),
    #[command(about = "Stop tracking patterns, as `git lfs untrack` does.")]
    Untrack(install::UntrackArgs),
    #[command(
        about = "A push, edit, push and clone round trip in a temporary directory, with the bytes sent."
    )]
    Demo(demo::DemoArgs),
    #[command(about = "The Git LFS transfer agent itself (git-lfs runs this).")]
    Transfer(transfer::TransferArgs),
    #[command(
        about = "Clone with the LFS files downloaded in this process (standalone mode: sets the endpoint up)."
    )]
    Clone(clone::CloneArgs),
    #[command(
        about = "Download the LFS files of refs into .git/lfs/objects in this process, each hashed once."
    )]
    Fetch(fetch::FetchArgs),
    #[command(
        about = "`git pull`, then the new HEAD's LFS files downloaded in this process and checked out."
    )]
    Pull(fetch::PullArgs),
    #[command(about = "Show, prune or clear the local shard cache that speeds up deduplication.")]
    Cache(cache::CacheArgs),
    #[command(
        about = "Show whether git-xet is set up: registration, mode, endpoint, reachability, cache.",
        visible_alias = "env"
    )]
    Status(status::StatusArgs),
    #[command(
        about = "List the LFS files with their Xet hashes and how much of each was deduplicated.",
        name = "ls-files"
    )]
    LsFiles(ls_files::LsFilesArgs),
    #[command(
        about = "Verify every object of a store; quarantine and report what is damaged (exit 2)."
    )]
    Scrub(maintenance::ScrubArgs),
    #[command(
        about = "Remove xorbs of a store that no file uses (interrupted pushes), after a grace period."
    )]
    Gc(maintenance::GcArgs),
    #[command(
        about = "What a push's uploads sent and what deduplication saved (the pre-push hook prints it).",
        name = "push-summary"
    )]
    PushSummary(summary::SummaryArgs),
    #[command(
        about = "Upload a push's small LFS files in packs before git-lfs does (the pre-push hook runs it; standalone mode).",
        name = "upload-ahead"
    )]
    UploadAhead(upload_ahead::UploadAheadArgs),
    #[command(
        about = "Delete local LFS objects git-lfs would prune, only those the remote's endpoint holds."
    )]
    Prune(prune::PruneArgs),
    #[command(about = "Write the manual pages (git help xet, man git-xet-install, …).")]
    Man(man::ManArgs),
    #[command(
        about = "Print a file (or a byte range of it) at a ref, fetching only what is read."
    )]
    Cat(cat::CatArgs),
    #[command(
        about = "Mount the tree at a ref read-only with FUSE; files are fetched as they are read."
    )]
    #[cfg(feature = "mount")]
    Mount(mount::MountArgs),
    #[cfg(not(feature = "mount"))]
    #[command(about = "Mount the tree at a ref with FUSE (not in this build: feature `mount`).")]
    Mount(not_built::NotBuiltArgs),
}

/// The whole command line definition (for the man pages).
pub(crate) fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Parses argv, runs the command, and maps failures to exit code 1 with a message on stderr.
pub fn main() -> ExitCode {
    // The one read of the process environment: everything below reads this snapshot.
    crate::agent::environment::install(std::env::vars_os());
    quiet_on_broken_pipe();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Hash(args) => hash::run(args),
        Command::Inspect(args) => inspect::run(args),
        #[cfg(feature = "server")]
        Command::Serve(args) => serve::run(args),
        #[cfg(not(feature = "server"))]
        Command::Serve(_) => not_built::run("serve", "server"),
        Command::Install(args) => install::install(args),
        Command::Uninstall(args) => install::uninstall(args),
        Command::Track(args) => install::track(args),
        Command::Untrack(args) => install::untrack(args),
        Command::Transfer(args) => transfer::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Clone(args) => clone::run(args),
        Command::Fetch(args) => fetch::fetch(args),
        Command::Pull(args) => fetch::pull(args),
        Command::Cache(args) => cache::run(args),
        Command::Status(args) => status::run(args),
        Command::LsFiles(args) => ls_files::run(args),
        Command::Scrub(args) => maintenance::scrub(args),
        Command::Gc(args) => maintenance::gc(args),
        Command::PushSummary(args) => summary::run(args),
        Command::UploadAhead(args) => upload_ahead::run(args),
        Command::Prune(args) => prune::run(args),
        Command::Man(args) => man::run(args),
        Command::Cat(args) => cat::run(args),
        #[cfg(feature = "mount")]
        Command::Mount(args) => mount::run(args),
        #[cfg(not(feature = "mount"))]
        Command::Mount(_) => not_built::run("mount", "mount"),
    };
    match result {
        Ok(code) => code,
        // The reader of our output went away (`git xet status --json | head`): nothing to say.
        Err(err) if is_broken_pipe(err.as_ref()) => ExitCode::SUCCESS,
        Err(err) => {
            // Whatever failed, a secret in its message is not shown; every cause is, once.
            crate::agent::settings::register_env_secrets();
            eprintln!(
                "git-xet: error: {}",
                xet_protocol::redact::redact(&xet_protocol::util::error::chain_text(err.as_ref()))
            );
            ExitCode::FAILURE
        }
    }
}

/// Whether `err`, or an error it wraps, is an `EPIPE` (the other end of a pipe was closed).
fn is_broken_pipe(err: &(dyn std::error::Error + 'static)) -> bool {
    xet_protocol::util::error::chain(err).any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Makes `println!` into a closed pipe end the process quietly (exit 0) instead of panicking
/// with "failed printing to stdout: Broken pipe". Commands that write through a `Write` get
/// the same treatment from [`is_broken_pipe`] in [`main`]. The agent (`transfer`) talks to
/// git-lfs on stdout with explicit writes and reports its own errors; it never gets here.
fn quiet_on_broken_pipe() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        #[cfg(unix)]
        if message.starts_with("failed printing to stdout")
            && message.contains(&std::io::Error::from_raw_os_error(libc::EPIPE).to_string())
        {
            std::process::exit(0);
        }
        previous(info)
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
