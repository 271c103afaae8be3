//! `git-xet inspect`: placeholder until the xorb and shard readers land.
use super::CmdResult;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// A xorb (upload or stored form) or a shard (upload or complete form).
    pub file: std::path::PathBuf,
}

pub fn run(_args: &InspectArgs) -> CmdResult {
    Err("not implemented yet".into())
}
