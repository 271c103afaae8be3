//! Programs named in git's configuration: which file a name runs, whether that file is this
//! git-xet, and what another one says it is. `git xet install` and `git xet status` use them
//! to tell this git-xet from another program registered as Git LFS's `xet` agent (Hugging
//! Face's `git-xet` uses the same name and the same configuration keys).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long another program may take to say what it is.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// The file a program name runs, as `sh -c` would find it: a path as it is, a bare name on PATH.
pub(super) fn resolve(program: &str) -> Option<PathBuf> {
    let program = program.trim();
    if program.is_empty() {
        return None;
    }
    if program.contains('/') || program.contains(std::path::MAIN_SEPARATOR) {
        let p = PathBuf::from(program);
        return is_executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

pub(super) fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        true
    }
}

/// What running `program args` prints on its first line, if it succeeds within a few seconds.
fn ask(program: &Path, args: &[&str]) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < ASK_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let mut out = String::new();
    use std::io::Read as _;
    child
        .stdout
        .take()?
        .take(4096)
        .read_to_string(&mut out)
        .ok()?;
    status
        .success()
        .then(|| out.lines().next().unwrap_or("").trim().to_string())
}

/// Whether the program a configuration value names is a git-xet of this project (this
/// executable, or another installation of it: it has `serve`, which Hugging Face's has not).
pub(super) fn is_this_project(value: &str, exe: &Path) -> bool {
    let Some(program) = resolve(value) else {
        return false;
    };
    if program.canonicalize().unwrap_or_else(|_| program.clone()) == exe {
        return true;
    }
    ask(&program, &["serve", "--help"]).is_some_and(|line| !line.is_empty())
}

/// How to name the program a configuration value runs, for a message: its path and what its
/// `--version` says, or that it cannot be run.
pub(super) fn describe(value: &str) -> String {
    match resolve(value) {
        None => format!("{value:?}, which cannot be run"),
        Some(program) => match ask(&program, &["--version"]) {
            Some(version) if !version.is_empty() => {
                format!("{} (its --version says {version:?})", program.display())
            }
            _ => format!(
                "{} (it does not say what it is with --version)",
                program.display()
            ),
        },
    }
}
