//! `git-xet transfer`: the process git-lfs starts as its `xet` custom transfer agent. It owns
//! stdin and stdout (the protocol) and sets up logging so that nothing else reaches stdout, and
//! every log line (stderr and `GIT_XET_LOG`) goes through [`xet_protocol::redact`] and is at most
//! [`MAX_LOG_LINE`] bytes long.

use std::io::Write;
use std::process::ExitCode;

use super::CmdResult;
use crate::agent::transfer::{self, AgentOptions};

/// Environment variable naming a log file the agent appends to.
pub(crate) const LOG_ENV: &str = "GIT_XET_LOG";
/// Environment variable with the log filter (`info` by default, `warn` on the agent's stderr
/// without `GIT_TRACE`; `debug`, `git_xet=trace`, …).
pub(crate) const LOG_LEVEL_ENV: &str = "GIT_XET_LOG_LEVEL";

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run the Git LFS custom transfer agent (git-lfs starts this; you do not).\n\n\
Speaks git-lfs's custom transfer protocol on stdin/stdout: uploads are chunked, deduplicated and \
sent as Xet xorbs and shards; downloads are rebuilt from Xet and handed to git-lfs. Registered by \
`git xet install` as lfs.customtransfer.xet.\n\n\
Logs are appended to the file named by GIT_XET_LOG if set (info and up). On stderr, which git-lfs \
shows only with GIT_TRACE=1, the agent writes info and up when GIT_TRACE is set and only warnings \
and errors otherwise. GIT_XET_LOG_LEVEL sets the filter of both.",
    after_long_help = "Examples (what to run instead of this):\n  \
GIT_XET_LOG=/tmp/xet.log git push      # the agent's log of one push\n  \
GIT_TRACE=1 git lfs fetch              # git-lfs's trace, with the agent's stderr\n  \
git xet status                         # is the agent registered, which mode and endpoint"
)]
pub(crate) struct TransferArgs {}

pub fn run(_args: &TransferArgs) -> CmdResult {
    crate::agent::settings::register_env_secrets();
    init_logging(Stderr::AgentTrace);
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    match transfer::run(stdin, stdout, AgentOptions::in_dir(&cwd)) {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e.into()),
    }
}

/// How much of the log goes to stderr when `GIT_XET_LOG_LEVEL` does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stderr {
    /// `info` and up: stderr is what the user reads (`git xet mount --verbose`).
    #[cfg_attr(not(feature = "mount"), allow(dead_code))]
    Info,
    /// Warnings and errors only, nothing of fuser's below errors (`git xet mount`, whose log
    /// goes to a file).
    #[cfg_attr(not(feature = "mount"), allow(dead_code))]
    Warn,
    /// The agent's: git-lfs passes its stderr on only with `GIT_TRACE` (then `info` and up),
    /// else only warnings and errors are written. Two info lines per object, written and read
    /// through git-lfs's pipe for nobody, were an eighth of a fetch of 1000 small files.
    AgentTrace,
    /// Errors only, `info` and up with `GIT_TRACE` (`git xet upload-ahead`: what it could not
    /// do, git-lfs's agents do after it and report themselves).
    Errors,
}

/// The stderr filter the agent uses without `GIT_XET_LOG_LEVEL`, given `GIT_TRACE`'s value:
/// `info` when git-lfs shows the agent's stderr (git's rule: set, and not empty, `0` or
/// `false`), else `warn`.
fn agent_stderr_level(git_trace: Option<&str>) -> &'static str {
    match git_trace.map(str::trim) {
        None | Some("" | "0") => "warn",
        Some(v) if v.eq_ignore_ascii_case("false") => "warn",
        Some(_) => "info",
    }
}

/// Logs to stderr and, with `GIT_XET_LOG`, to that file too. Never to stdout. The file gets
/// A log filter as `RUST_LOG` writes one: a default level and `target=level` directives,
/// comma-separated (`warn,git_xet::mount=trace`); `None` if it does not parse. (tracing's
/// `Targets`, which needs no regular expressions: span and field filters are not taken.)
pub(super) fn log_filter(text: &str) -> Option<tracing_subscriber::filter::Targets> {
    text.trim().parse().ok()
}

/// `info` and up, stderr as `stderr` says; `GIT_XET_LOG_LEVEL` sets both.
pub(super) fn init_logging(stderr: Stderr) {
    init_logging_to(stderr, None);
}

/// [`init_logging`], with `default_file` as the log file when `GIT_XET_LOG` is not set.
pub(super) fn init_logging_to(stderr: Stderr, default_file: Option<&std::path::Path>) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    // fuser warns when its own unmount at exit finds the mount gone, which is how every
    // `git xet mount --unmount` ends: not worth a warning.
    const QUIET: &str = ",fuser::mnt=error";
    let chosen = std::env::var(LOG_LEVEL_ENV)
        .ok()
        .and_then(|f| log_filter(&f));
    let filter = |default: &str| match &chosen {
        Some(f) => f.clone(),
        None => log_filter(&format!("{default}{QUIET}")).unwrap_or_default(),
    };
    let stderr_default = match stderr {
        Stderr::Info => "info",
        Stderr::Warn => "warn,fuser=error",
        Stderr::AgentTrace => agent_stderr_level(std::env::var("GIT_TRACE").ok().as_deref()),
        Stderr::Errors => match agent_stderr_level(std::env::var("GIT_TRACE").ok().as_deref()) {
            "info" => "info",
            _ => "error",
        },
    };
    let file = std::env::var_os(LOG_ENV)
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| default_file.map(std::path::Path::to_path_buf))
        .and_then(|path| {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                let _ = std::fs::create_dir_all(parent);
            }
            match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
            {
                Ok(f) => Some(f),
                Err(e) => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "git-xet: cannot open the log file {} ({LOG_ENV}): {e}",
                        std::path::Path::new(&path).display()
                    );
                    None
                }
            }
        });
    let to_stderr = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(Redacting(std::io::stderr))
        .with_filter(filter(stderr_default));
    let to_file = file.map(|f| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(Redacting(std::sync::Mutex::new(f)))
            .with_filter(filter("info"))
    });
    let _ = tracing_subscriber::registry()
        .with(to_stderr)
        .with(to_file)
        .try_init();
}

/// The longest log line written; longer ones are clipped (a line echoing hostile input must not
/// fill the disk or git-lfs's trace).
pub(crate) const MAX_LOG_LINE: usize = 16 * 1024;

/// A [`MakeWriter`](tracing_subscriber::fmt::MakeWriter) whose writers redact and clip what
/// they are given. The fmt layer formats each event into one buffer and writes it with one
/// `write_all`, so each write is one whole log line.
pub(super) struct Redacting<M>(pub(super) M);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for Redacting<M>
{
    type Writer = RedactingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter(self.0.make_writer())
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        RedactingWriter(self.0.make_writer_for(meta))
    }
}

/// See [`Redacting`].
pub(crate) struct RedactingWriter<W>(W);

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(redact_line(buf).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// One log line as written: redacted, clipped to [`MAX_LOG_LINE`] bytes, newline kept.
fn redact_line(buf: &[u8]) -> String {
    let text = String::from_utf8_lossy(buf);
    let newline = text.ends_with('\n');
    let body = text.strip_suffix('\n').unwrap_or(&text);
    // Redacted first: a clip could cut a known secret in two and hide it from the registry.
    let redacted = xet_protocol::redact::redact(body);
    let mut line = xet_protocol::redact::clip(&redacted, MAX_LOG_LINE).into_owned();
    if newline {
        line.push('\n');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_stderr_has_info_only_when_git_lfs_shows_it() {
        assert_eq!(agent_stderr_level(None), "warn");
        for off in ["", "0", "false", "FALSE", " 0 "] {
            assert_eq!(agent_stderr_level(Some(off)), "warn", "{off:?}");
        }
        for on in ["1", "2", "true", "/tmp/trace.log"] {
            assert_eq!(agent_stderr_level(Some(on)), "info", "{on:?}");
        }
    }

    #[test]
    fn log_filters_are_written_as_rust_log_writes_them() {
        use tracing::Level;
        let f = log_filter("warn,git_xet::mount=trace,fuser::mnt=error").unwrap();
        assert!(f.would_enable("git_xet::mount::fs", &Level::TRACE));
        assert!(!f.would_enable("git_xet::agent", &Level::INFO));
        assert!(f.would_enable("git_xet::agent", &Level::WARN));
        assert!(!f.would_enable("fuser::mnt", &Level::WARN));
        let f = log_filter(" debug ").unwrap();
        assert!(f.would_enable("anything", &Level::DEBUG));
        assert!(!f.would_enable("anything", &Level::TRACE));
        for bad in ["git_xet=loud", "=warn=", "warn,,x=y"] {
            assert!(log_filter(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn log_lines_are_redacted_and_clipped() {
        let mut out = Vec::new();
        let mut w = RedactingWriter(&mut out);
        w.write_all(b"GET http://git:hunter22@h/x?s=sig Bearer abc.DEF\n")
            .unwrap();
        w.write_all("x".repeat(3 * MAX_LOG_LINE).as_bytes())
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        assert_eq!(
            lines.next().unwrap(),
            "GET http://git:***@h/x?s=*** Bearer ***"
        );
        let long = lines.next().unwrap();
        assert!(long.len() < MAX_LOG_LINE + 100, "{}", long.len());
        assert!(long.ends_with("bytes in all)"));
    }
}
