//! The command line: argument parsing, output and exit codes.
//!
//! This is the only module that knows about argv, stdout formatting and process exit codes. Each
//! subcommand lives in its own file with its clap `Args` struct and a `run` function.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cache;
mod demo;
mod hash;
mod hooks;
mod inspect;
mod install;
mod ls_files;
mod maintenance;
mod prune;
mod serve;
mod status;
mod summary;
mod transfer;

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
Run `git-xet <command> --help` for the details of a command."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the Xet file hash of each file, as the reference client computes it.
    Hash(hash::HashArgs),
    /// Print a readable dump of a xorb or a shard, validating every field.
    Inspect(inspect::InspectArgs),
    /// Run a self-hosted Xet CAS server and Git LFS server.
    Serve(serve::ServeArgs),
    /// Register git-xet as Git LFS's `xet` transfer agent (optionally in standalone mode).
    Install(install::InstallArgs),
    /// Remove what `git xet install` wrote.
    Uninstall(install::UninstallArgs),
    /// Track files with Git LFS, as `git lfs track` does.
    Track(install::TrackArgs),
    /// Stop tracking patterns, as `git lfs untrack` does.
    Untrack(install::UntrackArgs),
    /// A push, edit, push and clone round trip in a temporary directory, with the bytes sent.
    Demo(demo::DemoArgs),
    /// The Git LFS transfer agent itself (git-lfs runs this).
    Transfer(transfer::TransferArgs),
    /// Show, prune or clear the local shard cache that speeds up deduplication.
    Cache(cache::CacheArgs),
    /// Show whether git-xet is set up: registration, mode, endpoint, reachability, cache.
    #[command(visible_alias = "env")]
    Status(status::StatusArgs),
    /// List the LFS files with their Xet hashes and how much of each was deduplicated.
    #[command(name = "ls-files")]
    LsFiles(ls_files::LsFilesArgs),
    /// Verify every object of a store; quarantine and report what is damaged (exit 2).
    Scrub(maintenance::ScrubArgs),
    /// Remove xorbs of a store that no file uses (interrupted pushes), after a grace period.
    Gc(maintenance::GcArgs),
    /// What a push's uploads sent and what deduplication saved (the pre-push hook prints it).
    #[command(name = "push-summary")]
    PushSummary(summary::SummaryArgs),
    /// Delete local LFS objects git-lfs would prune, only those the remote's endpoint holds.
    Prune(prune::PruneArgs),
}

/// Parses argv, runs the command, and maps failures to exit code 1 with a message on stderr.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Hash(args) => hash::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Install(args) => install::install(args),
        Command::Uninstall(args) => install::uninstall(args),
        Command::Track(args) => install::track(args),
        Command::Untrack(args) => install::untrack(args),
        Command::Transfer(args) => transfer::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Cache(args) => cache::run(args),
        Command::Status(args) => status::run(args),
        Command::LsFiles(args) => ls_files::run(args),
        Command::Scrub(args) => maintenance::scrub(args),
        Command::Gc(args) => maintenance::gc(args),
        Command::PushSummary(args) => summary::run(args),
        Command::Prune(args) => prune::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            // Whatever failed, a secret in its message is not shown.
            crate::lfs::settings::register_env_secrets();
            eprintln!(
                "git-xet: error: {}",
                crate::redact::redact(&err.to_string())
            );
            ExitCode::FAILURE
        }
    }
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
