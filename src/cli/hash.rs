//! `git-xet hash`: prints the Xet file hash and size of each file given on the command line.
//!
//! This module owns the command's arguments and its output format; the hashing itself is
//! [`xet_client::pipeline::hasher`].

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::CmdResult;
use xet_client::pipeline::hasher::hash_file;

#[derive(Debug, clap::Args)]
// The one-line description is the `about` of `Command::Hash` in `cli/mod.rs`; the details
// follow it in the long help (`--help`, the man page).
#[command(
    after_help = "Output: one line per file, `<xet file hash> <size> <path>` (see --help).",
    after_long_help = "Each file is cut into content-defined chunks, each chunk is hashed with \
BLAKE3, and the chunk hashes are combined into the file hash, exactly as the reference client \
(hf-xet) does. An empty file hashes to 64 zeros.\n\n\
Output, one line per file, in argument order:\n\n    <xet file hash> <size in bytes> <path>\n\n\
With --json, one JSON object per line instead:\n\n    \
{\"path\":\"<path>\",\"hash\":\"<xet file hash>\",\"size\":<size>}\n\n\
A file that cannot be read is reported on stderr and skipped; after hashing the others the \
command exits with status 1.\n\n\
Examples:\n  git-xet hash model.safetensors\n  git-xet hash --json *.bin"
)]
pub(crate) struct HashArgs {
    /// Print one JSON object per line ({"path", "hash", "size"}) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Files to hash.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// One output record; field order is the JSON key order.
#[derive(serde::Serialize)]
struct Record<'a> {
    path: &'a str,
    hash: xet_format::FileHash,
    size: u64,
}

pub fn run(args: &HashArgs) -> CmdResult {
    let stdout = std::io::stdout();
    let failed = report(args, &mut stdout.lock(), &mut std::io::stderr())?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Hashes every file, writing results to `out` and failures to `err`. Returns whether any file
/// failed; an error means the output itself could not be written.
fn report(args: &HashArgs, out: &mut impl Write, err: &mut impl Write) -> std::io::Result<bool> {
    let mut failed = false;
    for path in &args.files {
        match hash_file(path) {
            Ok(hashed) => {
                let shown = path.to_string_lossy();
                if args.json {
                    let record = Record {
                        path: &shown,
                        hash: hashed.file_hash,
                        size: hashed.size,
                    };
                    serde_json::to_writer(&mut *out, &record)?;
                    writeln!(out)?;
                } else {
                    writeln!(out, "{} {} {}", hashed.file_hash, hashed.size, shown)?;
                }
                // Show each result as soon as it is known, even when stdout is a pipe.
                out.flush()?;
            }
            Err(e) => {
                writeln!(err, "git-xet: {e}")?;
                failed = true;
            }
        }
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_on(json: bool, files: Vec<PathBuf>) -> (bool, String, String) {
        let args = HashArgs { json, files };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let failed = report(&args, &mut out, &mut err).unwrap();
        (
            failed,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn text_and_json_output_in_argument_order() {
        let dir = tempfile::tempdir().unwrap();
        let hello = dir.path().join("hello.txt");
        std::fs::write(&hello, "Hello World!").unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        let missing = dir.path().join("missing");
        let hw = "a9dae0ad88b060bdd7e7c87abdcf95b132c95a0414b06d4f6beb68d287b87165";
        let zero = "0".repeat(64);

        let (failed, out, err) = run_on(false, vec![hello.clone(), missing.clone(), empty.clone()]);
        assert!(failed);
        assert_eq!(
            out,
            format!(
                "{hw} 12 {}\n{zero} 0 {}\n",
                hello.display(),
                empty.display()
            )
        );
        assert!(err.contains(&missing.display().to_string()), "{err}");

        let (failed, out, err) = run_on(true, vec![hello.clone()]);
        assert!(!failed);
        assert!(err.is_empty());
        let value: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"path": hello.to_string_lossy(), "hash": hw, "size": 12})
        );
        assert!(out.starts_with("{\"path\":"), "keys in order: {out}");
    }
}
