//! The commands a build left out (`cargo install --no-default-features` builds the agent and
//! the git commands only): they stay on the command line, so that `git xet serve` or `git xet
//! mount` in such a build says what is missing and how to get it instead of "unrecognized
//! subcommand".

use std::ffi::OsString;

use super::CmdResult;

/// Whatever was typed after the command, unread.
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub(crate) struct NotBuiltArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub rest: Vec<OsString>,
}

/// The error of a command whose cargo `feature` this build left out.
pub(crate) fn run(command: &str, feature: &str) -> CmdResult {
    Err(format!(
        "`git xet {command}` is not in this build of git-xet (it was built without the \
         `{feature}` feature, as the agent-only build is). Install the full build: ./install.sh \
         in the source checkout, or `cargo install --path . --locked`"
    )
    .into())
}
