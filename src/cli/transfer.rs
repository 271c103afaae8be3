//! `git-xet transfer`: the process git-lfs starts as its `xet` custom transfer agent. It owns
//! stdin and stdout (the protocol) and sets up logging so that nothing else reaches stdout.

use std::io::Write;
use std::process::ExitCode;

use super::CmdResult;
use crate::lfs::agent::{self, AgentOptions};

/// Environment variable naming a log file the agent appends to.
pub const LOG_ENV: &str = "GIT_XET_LOG";
/// Environment variable with the log filter (`info` by default; `debug`, `git_xet=trace`, …).
pub const LOG_LEVEL_ENV: &str = "GIT_XET_LOG_LEVEL";

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run the Git LFS custom transfer agent (git-lfs starts this; you do not).\n\n\
Speaks git-lfs's custom transfer protocol on stdin/stdout: uploads are chunked, deduplicated and \
sent as Xet xorbs and shards; downloads are rebuilt from Xet and handed to git-lfs. Registered by \
`git xet install` as lfs.customtransfer.xet.\n\n\
Logs go to stderr, which git-lfs shows with GIT_TRACE=1, and are appended to the file named by \
GIT_XET_LOG if set. GIT_XET_LOG_LEVEL sets the filter (default info)."
)]
pub struct TransferArgs {}

pub fn run(_args: &TransferArgs) -> CmdResult {
    init_logging();
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    match agent::run(stdin, stdout, AgentOptions::in_dir(&cwd)) {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e.into()),
    }
}

/// Logs to stderr and, with `GIT_XET_LOG`, to that file too. Never to stdout.
fn init_logging() {
    use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt};
    let filter = std::env::var(LOG_LEVEL_ENV)
        .ok()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let file = std::env::var_os(LOG_ENV).and_then(|path| {
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(f) => Some(f),
            Err(e) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "git-xet: cannot open the log file {} ({LOG_ENV}): {e}",
                    std::path::Path::new(&path).display()
                );
                None
            }
        }
    });
    let writer = match file {
        Some(f) => BoxMakeWriter::new(std::io::stderr.and(std::sync::Mutex::new(f))),
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(writer)
        .try_init();
}
