//! Looks for the tools the workspace's integration tests need and hands the list of the missing
//! ones to the macro (`XET_TEST_TOOLS_MISSING`, names separated by commas). Only the tests'
//! build runs this: the product does not depend on this crate. Installing a tool changes
//! `/usr/bin`, `/usr/sbin` or `/usr/local/bin`, or `PATH` changes, and cargo runs this again,
//! which rebuilds the tests with the new list.

// A tool the table names and this file does not probe is a mistake to stop at.
#![allow(clippy::panic)]

#[path = "src/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
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
        // Only root mounts a loop device (the test mounts an image file of its own).
        "xfs_loop" => {
            runs("mkfs.xfs", &["-V"])
                && runs("filefrag", &["-V"])
                && Path::new("/dev/loop-control").exists()
                && Command::new("id")
                    .arg("-u")
                    .output()
                    .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
        }
        "chromium" => runs("chromium", &["--version"]),
        "systemd_analyze" => runs("systemd-analyze", &["--version"]),
        // Where the tests look (tests/common/garage.rs): $GARAGE, PATH, cargo's bin directory.
        "garage" => match std::env::var_os("GARAGE") {
            Some(path) => Path::new(&path).is_file(),
            None => runs("garage", &["--version"]) || cargo_bin().join("garage").is_file(),
        },
        // Where the tests look (`reference_python`): $GIT_XET_HF_PYTHON, else the workspace's
        // `.venv`.
        "hf_xet" => {
            let python = std::env::var_os("GIT_XET_HF_PYTHON")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_root().join(".venv/bin/python"));
            runs(&python.to_string_lossy(), &["-c", "import hf_xet"])
        }
        other => panic!("build.rs does not know how to look for {other}: add it here"),
    }
}

/// cargo's bin directory (`cargo install` puts Garage there).
fn cargo_bin() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_default()
        .join("bin")
}

/// The workspace's root: this crate is `crates/xet-test-tools` in it.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    for var in ["PATH", "GARAGE", "CARGO_HOME", "HOME", "GIT_XET_HF_PYTHON"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    // Installing a tool changes one of these directories (only existing paths are watched:
    // cargo would run this again at every build for a missing one). A `.venv` made later
    // changes the workspace root; hf-xet installed into it changes its site-packages.
    let root = workspace_root();
    let mut watched: Vec<PathBuf> = ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
        .iter()
        .map(PathBuf::from)
        .chain([cargo_bin(), root.clone()])
        .collect();
    if let Ok(libs) = std::fs::read_dir(root.join(".venv/lib")) {
        watched.extend(libs.flatten().map(|l| l.path().join("site-packages")));
    }
    for dir in watched.iter().filter(|d| d.is_dir()) {
        println!("cargo::rerun-if-changed={}", dir.display());
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
