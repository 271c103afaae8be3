//! Finds the tools the integration tests need, so that a test whose tool is missing is listed
//! as ignored with the reason (`cargo test` shows it; `--include-ignored` runs it, and it fails
//! saying what to install) rather than passing without testing anything:
//!
//! | cfg | set when |
//! |---|---|
//! | `missing_git_lfs` | `git lfs version` does not run |
//! | `missing_nginx` | neither `/usr/sbin/nginx` nor `/usr/bin/nginx` exists |
//! | `missing_fuse` | `/dev/fuse` is absent or `fusermount3 -V` does not run |
//! | `missing_userns_mount` | `unshare -rm` cannot mount a tmpfs in a private user and mount namespace |
//! | `missing_promtool` | `promtool --version` does not run (Debian's `prometheus` package has it) |
//! | `missing_chromium` | `chromium --version` does not run (Debian's `chromium` package) |
//! | `missing_systemd_analyze` | `systemd-analyze --version` does not run |
//!
//! Nothing else in the build depends on them. The probing runs only in a test build (the
//! package's dev-dependency on itself turns the `test-tools` feature on): a product build
//! (`cargo build`, `cargo install`) looks for nothing and never runs this again because `PATH`
//! or `/usr/bin` changed. In a test build, installing a tool changes `/usr/bin` or `/usr/sbin`,
//! which makes cargo run this again.

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

fn main() {
    for cfg in [
        "missing_git_lfs",
        "missing_nginx",
        "missing_fuse",
        "missing_promtool",
        "missing_userns_mount",
        "missing_chromium",
        "missing_systemd_analyze",
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_TEST_TOOLS").is_none() {
        return;
    }
    println!("cargo::rerun-if-env-changed=PATH");
    for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        if Path::new(dir).is_dir() {
            println!("cargo::rerun-if-changed={dir}");
        }
    }
    if !runs("git", &["lfs", "version"]) {
        println!("cargo::rustc-cfg=missing_git_lfs");
    }
    if !["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        println!("cargo::rustc-cfg=missing_nginx");
    }
    if !(Path::new("/dev/fuse").exists() && runs("fusermount3", &["-V"])) {
        println!("cargo::rustc-cfg=missing_fuse");
    }
    // Mounted over /tmp inside a namespace of its own: nothing outside sees it.
    if !runs(
        "unshare",
        &["-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /tmp"],
    ) {
        println!("cargo::rustc-cfg=missing_userns_mount");
    }
    if !runs("promtool", &["--version"]) {
        println!("cargo::rustc-cfg=missing_promtool");
    }
    if !runs("chromium", &["--version"]) {
        println!("cargo::rustc-cfg=missing_chromium");
    }
    if !runs("systemd-analyze", &["--version"]) {
        println!("cargo::rustc-cfg=missing_systemd_analyze");
    }
}
