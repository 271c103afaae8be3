//! Looks for the tools the workspace's integration tests need and hands the list of the missing
//! ones to the macro (`XET_TEST_TOOLS_MISSING`, names separated by commas). Only the tests'
//! build runs this: the product does not depend on this crate. Installing a tool changes
//! `/usr/bin`, `/usr/sbin` or `/usr/local/bin`, or `PATH` changes, and cargo runs this again,
//! which rebuilds the tests with the new list.

// A tool the table names and this file does not probe is a mistake to stop at.
#![allow(clippy::panic)]

#[path = "src/tools.rs"]
mod tools;

use std::path::Path;
use std::process::{Command, Stdio};

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `tool` (a name of [`tools::TOOLS`]) is here.
fn present(tool: &str) -> bool {
    match tool {
        "git_lfs" => runs("git", &["lfs", "version"]),
        "nginx" => ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .iter()
            .any(|p| Path::new(p).exists()),
        "fuse" => Path::new("/dev/fuse").exists() && runs("fusermount3", &["-V"]),
        // Mounted over /tmp inside a namespace of its own: nothing outside sees it.
        "userns_mount" => runs(
            "unshare",
            &["-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /tmp"],
        ),
        "promtool" => runs("promtool", &["--version"]),
        "chromium" => runs("chromium", &["--version"]),
        "systemd_analyze" => runs("systemd-analyze", &["--version"]),
        other => panic!("build.rs does not know how to look for {other}: add it here"),
    }
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=PATH");
    for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        if Path::new(dir).is_dir() {
            println!("cargo::rerun-if-changed={dir}");
        }
    }
    let missing: Vec<&str> = tools::TOOLS
        .iter()
        .map(|&(name, _)| name)
        .filter(|tool| !present(tool))
        .collect();
    println!(
        "cargo::rustc-env=XET_TEST_TOOLS_MISSING={}",
        missing.join(",")
    );
}
