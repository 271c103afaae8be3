//! `git-xet hash`: placeholder, to be replaced by the chunking work.
use super::CmdResult;

#[derive(Debug, clap::Args)]
pub struct HashArgs {
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// Files to hash.
    #[arg(required = true)]
    pub files: Vec<std::path::PathBuf>,
}

pub fn run(_args: &HashArgs) -> CmdResult {
    Err("not implemented yet".into())
}
