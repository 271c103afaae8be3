//! Headless Chromium (Debian's `chromium` package) for tests of pages the server serves: the
//! DOM after the page's scripts ran, and screenshots.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Chromium on `PATH`; panics, saying what to install, when it is missing (tests that need it
/// are listed as ignored there: see `build.rs`).
pub fn chromium() -> PathBuf {
    let ok = Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "chromium is not installed: apt-get install chromium");
    PathBuf::from("chromium")
}

/// Runs headless Chromium on `url` with `extra` arguments and a profile of its own; its
/// stdout. Fails the test if it does not end within a minute or fails.
fn run(url: &str, extra: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out_path = profile.path().join("stdout");
    let err_path = profile.path().join("stderr");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            // The tests run as root in containers, where Chromium's sandbox cannot start.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("chromium starts (apt-get install chromium)");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within a minute: {}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "chromium failed ({status}): {}",
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );
    std::fs::read_to_string(&out_path).unwrap()
}

/// The DOM of `url` once its scripts ran and it had `budget_ms` of (virtual) time, serialised.
pub fn dump_dom(url: &str, budget_ms: u64) -> String {
    run(
        url,
        &[
            format!("--virtual-time-budget={budget_ms}"),
            "--dump-dom".to_string(),
        ],
    )
}

/// A PNG screenshot of `url` (`width` × `height`) once its scripts ran, written to `path`.
pub fn screenshot(url: &str, path: &Path, width: u32, height: u32, budget_ms: u64) {
    run(
        url,
        &[
            format!("--virtual-time-budget={budget_ms}"),
            format!("--window-size={width},{height}"),
            "--hide-scrollbars".to_string(),
            format!("--screenshot={}", path.display()),
        ],
    );
}
