//! `git xet mount [REF] DIR` and `git xet mount --unmount DIR`: a read-only view of the
//! repository's tree at REF, mounted with FUSE ([`crate::mount::fs`]). Runs in the foreground
//! until Ctrl-C, SIGTERM or an unmount.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::CmdResult;
use crate::git::Git;
use crate::mount::fs::{XetFs, THREADS};
use crate::mount::view::{Node, View};

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Mounts the repository's tree at REF (HEAD by default) at DIR, read-only, \
and stays in the foreground until Ctrl-C, SIGTERM or `git xet mount --unmount DIR` (or \
`fusermount3 -u DIR`). Every file shows its real size without any download. Ordinary files \
come from git's objects; a Git LFS file from the local LFS store if its object is there, else \
in ranges from the remote's server: a read fetches only the chunks it needs (every one \
checked), a sequential reader gets the next spans fetched ahead, and the download chunk cache \
keeps what was fetched. A read that fails answers EIO (logged with the file and offset: \
the log); the mount stays up. The log goes to GIT_XET_LOG if set, else to mount.log in the \
cache directory, and its path is printed once the mount is up; the terminal shows only \
warnings and errors unless --verbose.\n\n\
The tree is shown as `git checkout` would write it: an entry git refuses to check out (`.git` \
in any spelling a filesystem reads as it, `.` and `..`, a symbolic link named `.gitmodules`) is \
left out with everything under it, and logged once.\n\n\
Needs FUSE: /dev/fuse and fusermount3 (Debian and Ubuntu: apt-get install fuse3).\n\n\
Examples:\n  git xet mount /mnt/models\n  git xet mount v1.0 /tmp/v1 &\n  git xet mount --unmount /tmp/v1"
)]
pub(crate) struct MountArgs {
    /// `[REF] DIR`: the commit, branch or tag to show (default HEAD), and an empty directory.
    #[arg(value_name = "[REF] DIR", num_args = 0..=2)]
    pub args: Vec<String>,
    /// Unmount DIR (a mount of git xet mount) and exit.
    #[arg(long, value_name = "DIR", conflicts_with = "args")]
    pub unmount: Option<PathBuf>,
    /// The remote whose server holds the objects (default: the one git-lfs uses).
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// Write the log (info and up) to the terminal too; without it only warnings and errors
    /// show there, and the log goes to the file named when the mount is up.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// What is missing for FUSE, and how to get it; `None` when it is there.
fn fuse_missing() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some(
            "FUSE is not available: /dev/fuse does not exist (load the fuse kernel module, or \
             give the container the device: --device /dev/fuse); `git xet cat` reads files \
             without it"
                .into(),
        );
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()));
    if !on_path {
        return Some(
            "fusermount3 is not installed: install Debian's or Ubuntu's fuse3 package \
             (apt-get install fuse3), or your system's FUSE 3 tools"
                .into(),
        );
    }
    None
}

fn unmount(dir: &Path) -> CmdResult {
    let out = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(dir)
        .output()
        .map_err(|e| {
            format!(
                "cannot run fusermount3 ({e}): install fuse3, or run `umount {}` as root",
                dir.display()
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "cannot unmount {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    eprintln!("git-xet: unmounted {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: &MountArgs) -> CmdResult {
    if let Some(dir) = &args.unmount {
        return unmount(dir);
    }
    let (rev, dir) = match args.args.as_slice() {
        [dir] => ("HEAD".to_string(), PathBuf::from(dir)),
        [rev, dir] => (rev.clone(), PathBuf::from(dir)),
        _ => return Err("give the directory to mount at: git xet mount [REF] DIR".into()),
    };
    check_mount_point(&dir)?;
    if let Some(missing) = fuse_missing() {
        return Err(missing.into());
    }
    // The log goes to a file (GIT_XET_LOG, else mount.log in the cache directory): the
    // terminal the mount runs in gets only warnings and errors, unless --verbose.
    let log = std::env::var_os(super::transfer::LOG_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            crate::agent::settings::cache_root()
                .ok()
                .map(|c| c.join("logs").join("mount.log"))
        });
    super::transfer::init_logging_to(
        if args.verbose {
            super::transfer::Stderr::Info
        } else {
            super::transfer::Stderr::Warn
        },
        log.as_deref(),
    );
    // Fetched spans are megabytes each and pass between threads: with one allocator arena
    // they are reused instead of piling up per thread (measured reading 512 MiB through the
    // mount: peak RSS about 120 MiB instead of 260 MiB, and half the system time).
    xet_protocol::util::os::one_allocator_arena();
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let git = Git::in_dir(&cwd);
    if !git.in_repository() {
        return Err(format!("{} is not in a git repository", cwd.display()).into());
    }
    let view = View::open(&git, &rev, args.remote.as_deref())?;
    let files = view
        .nodes
        .iter()
        .filter(|n| matches!(n, Node::File { .. }))
        .count();
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::RO,
        fuser::MountOption::FSName("git-xet".into()),
        fuser::MountOption::Subtype("xet".into()),
        fuser::MountOption::NoAtime,
    ];
    config.n_threads = Some(THREADS);
    let session = fuser::spawn_mount(XetFs::new(view), &dir, &config).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            format!(
                "not allowed to mount at {} ({e}): you need write access to it and to /dev/fuse",
                dir.display()
            )
        } else {
            format!("cannot mount at {}: {e}", dir.display())
        }
    })?;
    eprintln!(
        "git-xet: {rev} ({files} files) mounted at {} (read-only); unmount with `git xet mount --unmount {}` or Ctrl-C",
        dir.display(),
        dir.display()
    );
    if let Some(log) = &log {
        eprintln!("git-xet: the mount's log: {}", log.display());
    }
    if wait_for_signal_or_unmount(&session)? {
        session
            .umount_and_join()
            .map_err(|e| format!("cannot unmount {}: {e}", dir.display()))?;
    } else {
        let _ = session.join();
    }
    eprintln!("git-xet: {} unmounted", dir.display());
    Ok(ExitCode::SUCCESS)
}

/// `dir` must be an empty directory (a mount left behind by a killed process is named as such).
fn check_mount_point(dir: &Path) -> Result<(), String> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(format!(
                    "{} is not empty: mount at an empty directory",
                    dir.display()
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "{} does not exist: create an empty directory to mount at (mkdir -p {})",
            dir.display(),
            dir.display()
        )),
        // A mount whose process was killed stays behind: "Transport endpoint is not
        // connected".
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Err(format!(
            "{} is a mount left behind by a process that is gone ({e}): unmount it with \
             `git xet mount --unmount {}`, then mount again",
            dir.display(),
            dir.display()
        )),
        Err(e) => Err(format!(
            "cannot use {} as a mount point: {e}",
            dir.display()
        )),
    }
}

/// Waits until SIGINT or SIGTERM (`true`: the caller unmounts) or until someone else unmounted
/// the filesystem (`false`).
fn wait_for_signal_or_unmount(session: &fuser::BackgroundSession) -> Result<bool, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot wait for signals: {e}"))?;
    Ok(runtime.block_on(async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return true,
                _ = async {
                    match term.as_mut() {
                        Some(t) => { t.recv().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => return true,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if session.guard.is_finished() {
                        return false;
                    }
                }
            }
        }
    }))
}
