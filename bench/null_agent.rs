//! The "custom-agent floor" of `bench/small_files.sh` and `bench/push_pull.sh`: a Git LFS custom
//! transfer agent that transfers nothing. It answers each download by copying the object's
//! bytes, from a local directory of files named by oid, into git-lfs's temp directory, then
//! reports it complete. What a fetch through it costs is git-lfs's own work for a custom agent (the batch
//! calls, the protocol, re-hashing and moving every object) plus writing the files: no agent
//! that downloads can be faster.
//!
//! Built by the benchmark with `rustc -O` (no dependencies); not part of git-xet.
//! Usage (as lfs.customtransfer.<name>.path): null_agent OBJECT_DIR

use std::io::{BufRead, Write};

/// The string value of `"key":"…"` in a one-line JSON message (git-lfs writes no spaces and
/// oids and event names need no escapes).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":\"");
    let start = line.find(&pat)? + pat.len();
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

fn main() {
    let objects = std::env::args().nth(1).expect("usage: null_agent OBJECT_DIR");
    let tmp = std::env::current_dir()
        .expect("current directory")
        .join(".git/lfs/tmp");
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut n = 0u64;
    for line in stdin.lock().lines() {
        let line = line.expect("reading git-lfs's request");
        let reply = match field(&line, "event") {
            Some("init") => {
                std::fs::create_dir_all(&tmp).expect("creating git-lfs's temp directory");
                "{}".to_string()
            }
            Some("download") => {
                let oid = field(&line, "oid").unwrap_or_default();
                n += 1;
                let dst = tmp.join(format!("null-{}-{n}", std::process::id()));
                // fs::copy: in the kernel where it can (copy_file_range), the cheapest way
                // there is to put the bytes where git-lfs wants them.
                match std::fs::copy(format!("{objects}/{oid}"), &dst) {
                    Ok(_) => format!(
                        r#"{{"event":"complete","oid":"{oid}","path":"{}"}}"#,
                        dst.display()
                    ),
                    Err(e) => format!(
                        r#"{{"event":"complete","oid":"{oid}","error":{{"code":2,"message":"null agent: {e}"}}}}"#
                    ),
                }
            }
            _ => break,
        };
        writeln!(out, "{reply}").expect("answering git-lfs");
        out.flush().expect("answering git-lfs");
    }
}
