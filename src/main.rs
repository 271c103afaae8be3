//! The `git-xet` binary: everything lives in the library; this only hands over to the CLI.
fn main() -> std::process::ExitCode {
    git_xet::cli::main()
}
