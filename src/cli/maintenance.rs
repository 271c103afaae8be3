//! `git xet scrub` and `git xet gc`: checking a store for damage and removing what nothing uses.
//!
//! Both work on a store directory: a `git xet serve --data DIR`, or the directory endpoint of
//! standalone mode (the default inside a repository whose `xet.endpoint` is a directory). The
//! store is opened exclusively, so they wait a little for a running agent and refuse with advice
//! while a server holds it (`git xet serve` runs both by itself: `--gc-interval`,
//! `--scrub-interval`).
//!
//! With `--storage s3://BUCKET/PREFIX` they work on the objects of a bucket that server nodes
//! share, while the nodes keep serving: the command builds an index of its own from the
//! bucket's shards (in a temporary directory, or in `--data DIR`, which a later run reuses), as
//! a node does when it starts. gc then removes only xorbs that no shard in the bucket uses and
//! that are older than the grace period, which protects uploads in flight on every node.
//!
//! Exit codes: 0 done (scrub: no damage), 1 the command failed, 2 scrub found damage.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::CmdResult;
use crate::agent::settings::{self, EndpointSpec};
use crate::git::Git;
use xet_protocol::util::size::format_size;
use xet_store::{GcOptions, GcReport, ScrubProgress, ScrubReport, Store};

/// Exit code of `scrub` when it found damage.
pub(crate) const DAMAGE_FOUND: u8 = 2;

/// How long to wait for another process (an agent in a transfer) to release the store.
const PATIENCE: Duration = Duration::from_secs(20);

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Reads every stored xorb and shard whole and checks every hash. A \
xorb found damaged or missing is moved to DIR/quarantine/ and taken out of service: no new shard \
may rely on it, global dedup stops offering it, and the files that need it cannot be downloaded \
until a client uploads that xorb again — pushing any file that contains it repairs the store. A \
damaged shard file is quarantined too (the index keeps serving its files; registering the same \
shard again restores it).\n\n\
The store also checks a xorb whenever its object on disk changed since it was last verified, so \
damage done by tools or people is found when the xorb is next used; scrub finds what changed \
silently (media errors) and everything no request has touched yet.\n\n\
Exit status: 0 no damage, 2 damage found (listed), 1 scrub could not run.\n\n\
With --storage s3://BUCKET/PREFIX (settings from the AWS_* environment, as for `git xet \
serve`), the objects of a bucket that server nodes share are checked while the nodes keep \
serving; damaged ones move to PREFIX/quarantine/ in the bucket.\n\n\
Exit status: 0 no damage, 2 damage found (listed), 1 scrub could not run.\n\n\
Examples:\n  git xet scrub /srv/xet\n  git xet scrub            # this repository's directory endpoint\n  \
git xet scrub --json /srv/xet\n  git xet scrub --storage s3://xet-bucket/team"
)]
pub(crate) struct ScrubArgs {
    /// The store directory (`git xet serve --data DIR`, or a standalone directory endpoint).
    /// Default: this repository's directory endpoint (xet.endpoint or GIT_XET_ENDPOINT).
    #[arg(value_name = "DIR", conflicts_with = "storage")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub bucket: BucketArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// A bucket that server nodes share, instead of a store directory.
#[derive(Debug, clap::Args)]
pub(crate) struct BucketArgs {
    /// Work on the objects in an S3-compatible bucket (s3://BUCKET/PREFIX, as given to `git
    /// xet serve --storage`), with settings from the AWS_* environment.
    #[arg(long, value_name = "URL")]
    pub storage: Option<xet_store::storage_url::StorageUrl>,
    /// With --storage: the directory of this command's index of the bucket (kept for the next
    /// run, which then only registers what is new). Default: a temporary directory. Not the
    /// --data of a running node.
    #[arg(long, value_name = "DIR", requires = "storage")]
    pub data: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "A push stores xorbs before it registers the shard that uses them, \
so a push that was interrupted leaves xorbs that no file uses. gc removes them once they are \
older than the grace period (default 24h, at least 10m), so uploads in flight are not harmed: \
an upload usually registers its shard well within it, and an upload that finds a xorb already \
stored restarts its grace period. Leftover temporary files of interrupted uploads older than \
the grace period go too. Xorbs that any registered file uses are never removed.\n\n\
With --storage s3://BUCKET/PREFIX, the unused xorbs of a bucket that server nodes share are \
removed while the nodes keep serving: what the bucket's shards use is kept, and so is \
everything younger than the grace period. Before it deletes, gc announces what it is about to \
delete in the bucket and reads the nodes' registrations again, and every node checks such \
announcements before it acknowledges a push, so a push that outlasts the grace period never \
ends with a file whose xorbs were removed: it is refused and sends them again. Run it from one \
place only, or give --gc-interval to one node instead.\n\n\
Examples:\n  git xet gc /srv/xet\n  git xet gc --dry-run /srv/xet\n  git xet gc --grace 2h\n  \
git xet gc --dry-run --storage s3://xet-bucket/team"
)]
pub(crate) struct GcArgs {
    /// The store directory (`git xet serve --data DIR`, or a standalone directory endpoint).
    /// Default: this repository's directory endpoint (xet.endpoint or GIT_XET_ENDPOINT).
    #[arg(value_name = "DIR", conflicts_with = "storage")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub bucket: BucketArgs,
    /// Keep unused xorbs younger than this: seconds, or a number with a unit (30m, 24h, 7d);
    /// at least 10m.
    #[arg(long, value_name = "DURATION", value_parser = super::args::grace, default_value = "24h")]
    pub grace: Duration,
    /// Report what would be removed without removing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The store directory to work on: the argument, or the repository's directory endpoint.
fn store_dir(arg: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(dir) = arg {
        return Ok(dir.to_path_buf());
    }
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let found = settings::endpoint(&Git::in_dir(&cwd), &cwd)
        .map_err(|e| format!("cannot read the git-xet endpoint: {e}"))?;
    match found {
        Some((EndpointSpec::Dir(dir), _)) => Ok(dir),
        Some((EndpointSpec::Http(_), _)) => Err(
            "this repository's endpoint is a server; run this command where the server's data \
             directory is (git xet serve --data DIR), or give a store directory"
                .into(),
        ),
        None => Err(
            "give a store directory (git xet serve --data DIR, or a standalone \
                     directory endpoint): this is not a repository with a directory endpoint"
                .into(),
        ),
    }
}

/// Opens an existing store, waiting a little for an agent and refusing with advice when a
/// server holds it.
fn open(dir: &Path) -> Result<Store, String> {
    if let Ok(url) = std::fs::read_to_string(dir.join("STORAGE")) {
        return Err(format!(
            "{} is the local directory of a server node on {url}; its objects are in the \
             bucket: run this with --storage {url} instead",
            dir.display(),
            url = url.trim()
        ));
    }
    if !dir.join("STORE-VERSION").is_file() {
        return Err(format!(
            "{} is not a git-xet store (no STORE-VERSION file)",
            dir.display()
        ));
    }
    let mut announced = false;
    Store::open_waiting(dir, PATIENCE, || {
        if !announced {
            announced = true;
            eprintln!(
                "git-xet: waiting for another git-xet process to release {}",
                dir.display()
            );
        }
    })
    .map_err(|e| {
        if e.is_locked() {
            format!(
                "the store at {} is in use by another process (a running `git xet serve`, or \
                 an agent in the middle of a push or pull); stop the server and run this again, \
                 or let the server do it on a schedule (git xet serve --gc-interval, \
                 --scrub-interval)",
                dir.display()
            )
        } else {
            format!("cannot open the store at {}: {e}", dir.display())
        }
    })
}

/// A store a command works on, and what keeps it open.
struct Opened {
    store: Store,
    /// How reports name it: the directory, or the bucket.
    name: String,
    /// Where damaged objects go.
    quarantine: String,
    /// The runtime a bucket's requests run on (dropped after the store).
    _runtime: Option<tokio::runtime::Runtime>,
    /// The temporary directory of the index of a bucket (removed last).
    _scratch: Option<tempfile::TempDir>,
}

/// The store the arguments name: a bucket, a directory, or the repository's directory endpoint.
fn open_target(dir: Option<&Path>, bucket: &BucketArgs) -> Result<Opened, String> {
    let Some(url) = &bucket.storage else {
        let dir = store_dir(dir)?;
        return Ok(Opened {
            store: open(&dir)?,
            name: dir.display().to_string(),
            quarantine: dir.join("quarantine").display().to_string(),
            _runtime: None,
            _scratch: None,
        });
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime for {url}: {e}"))?;
    let (data, scratch) = match &bucket.data {
        Some(data) => (data.clone(), None),
        None => {
            let scratch = tempfile::Builder::new()
                .prefix("git-xet-bucket-")
                .tempdir()
                .map_err(|e| format!("cannot make a temporary directory for the index: {e}"))?;
            (scratch.path().join("index"), Some(scratch))
        }
    };
    let config = xet_store::storage_url::S3Config::from_vars(url.clone(), std::env::vars());
    let store = Store::open_s3(&data, Default::default(), &config, runtime.handle().clone())
        .map_err(|e| {
            if e.is_locked() {
                format!(
                    "{} is in use by another process (a running node's --data?): give this \
                     command a directory of its own, or none",
                    data.display()
                )
            } else {
                format!("cannot open {url}: {e}")
            }
        })?;
    eprintln!("git-xet: registering the shards in {url} (this reads each shard the index lacks)");
    let caught = store
        .catch_up_all()
        .map_err(|e| format!("cannot read the shards in {url}: {e}"))?;
    if caught.refused > 0 {
        eprintln!(
            "git-xet: {} shard(s) in {url} were refused (their xorbs are missing or damaged); \
             what they name is not protected from gc",
            caught.refused
        );
    }
    Ok(Opened {
        store,
        name: url.to_string(),
        quarantine: format!("{url}/quarantine"),
        _runtime: Some(runtime),
        _scratch: scratch,
    })
}

pub fn scrub(args: &ScrubArgs) -> CmdResult {
    let target = open_target(args.dir.as_deref(), &args.bucket)?;
    let store = &target.store;
    let show_progress = std::io::stderr().is_terminal();
    let mut last = Instant::now();
    let report = store.scrub(&mut |p: &ScrubProgress| {
        if show_progress
            && (last.elapsed() >= Duration::from_millis(500) || p.xorbs_done == p.xorbs_total)
        {
            last = Instant::now();
            eprint!(
                "\rchecking xorbs: {}/{} ({})   ",
                p.xorbs_done,
                p.xorbs_total,
                format_size(p.bytes_done)
            );
            if p.xorbs_done == p.xorbs_total {
                eprintln!();
            }
        }
    })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", scrub_json(&target.name, &report))?;
    } else {
        print_scrub(&mut out, &target, &report)?;
    }
    Ok(if report.found_damage() {
        ExitCode::from(DAMAGE_FOUND)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_scrub(out: &mut impl Write, target: &Opened, r: &ScrubReport) -> std::io::Result<()> {
    writeln!(
        out,
        "scrubbed {}: {} xorbs ({}), {} shards",
        target.name,
        r.xorbs_checked,
        format_size(r.bytes_checked),
        r.shards_checked
    )?;
    if !r.found_damage() {
        return writeln!(out, "no damage found");
    }
    for (xorb, why) in &r.damaged_xorbs {
        writeln!(out, "damaged xorb {xorb}: {why}")?;
    }
    for (shard, why) in &r.damaged_shards {
        writeln!(out, "damaged shard {shard}: {why}")?;
    }
    for name in &r.damaged_checkpoints {
        writeln!(
            out,
            "damaged checkpoint {name}: nodes ignore it and read an older one; the next \
             checkpoint written replaces it"
        )?;
    }
    if r.affected_file_count > 0 {
        writeln!(
            out,
            "{} registered file(s) cannot be downloaded until the damaged xorbs are uploaded \
             again, e.g.:",
            r.affected_file_count
        )?;
        for f in &r.affected_files {
            writeln!(out, "  file {f}")?;
        }
    }
    writeln!(
        out,
        "damaged objects were moved to {}; to repair, push the affected files again from a clone \
         that has them (e.g. `git lfs push --all origin`), which uploads the missing xorbs",
        target.quarantine
    )
}

fn scrub_json(name: &str, r: &ScrubReport) -> serde_json::Value {
    serde_json::json!({
        "store": name,
        "damage_found": r.found_damage(),
        "xorbs_checked": r.xorbs_checked,
        "bytes_checked": r.bytes_checked,
        "shards_checked": r.shards_checked,
        "damaged_xorbs": r.damaged_xorbs.iter().map(|(x, why)| serde_json::json!({"xorb": x.to_hex(), "reason": why})).collect::<Vec<_>>(),
        "damaged_shards": r.damaged_shards.iter().map(|(s, why)| serde_json::json!({"shard": s.to_hex(), "reason": why})).collect::<Vec<_>>(),
        "checkpoints_checked": r.checkpoints_checked,
        "damaged_checkpoints": r.damaged_checkpoints,
        "affected_file_count": r.affected_file_count,
        "affected_files": r.affected_files.iter().map(|f| f.to_hex()).collect::<Vec<_>>(),
    })
}

pub fn gc(args: &GcArgs) -> CmdResult {
    let target = open_target(args.dir.as_deref(), &args.bucket)?;
    let report = target.store.gc(GcOptions {
        grace: args.grace,
        dry_run: args.dry_run,
    })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", gc_json(&target.name, args.grace, &report))?;
    } else {
        print_gc(&mut out, &target.name, args.grace, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_gc(
    out: &mut impl Write,
    name: &str,
    grace: Duration,
    r: &GcReport,
) -> std::io::Result<()> {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    writeln!(
        out,
        "{name}: {} xorbs stored, {} used by registered files",
        r.xorbs_stored, r.xorbs_used
    )?;
    writeln!(
        out,
        "{verb} {} unused xorb(s), freeing {}",
        r.xorbs_removed,
        format_size(r.bytes_freed)
    )?;
    if r.xorbs_young > 0 {
        writeln!(
            out,
            "kept {} unused xorb(s) ({}) younger than the grace period ({}): uploads may still \
             register them",
            r.xorbs_young,
            format_size(r.bytes_young),
            humantime(grace)
        )?;
    }
    if r.entries_dropped > 0 {
        writeln!(
            out,
            "dropped {} index entr{} of unused xorbs that were no longer on disk",
            r.entries_dropped,
            if r.entries_dropped == 1 { "y" } else { "ies" }
        )?;
    }
    if r.temp_files_removed > 0 {
        writeln!(
            out,
            "removed {} leftover temporary file(s) ({})",
            r.temp_files_removed,
            format_size(r.temp_bytes_freed)
        )?;
    }
    Ok(())
}

fn gc_json(name: &str, grace: Duration, r: &GcReport) -> serde_json::Value {
    serde_json::json!({
        "store": name,
        "grace_secs": grace.as_secs(),
        "dry_run": r.dry_run,
        "xorbs_stored": r.xorbs_stored,
        "xorbs_used": r.xorbs_used,
        "xorbs_removed": r.xorbs_removed,
        "bytes_freed": r.bytes_freed,
        "xorbs_young": r.xorbs_young,
        "bytes_young": r.bytes_young,
        "entries_dropped": r.entries_dropped,
        "temp_files_removed": r.temp_files_removed,
        "temp_bytes_freed": r.temp_bytes_freed,
    })
}

/// `90 s`, `30 min`, `24 h`, `7 d`: a duration as given.
fn humantime(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0 s".into(),
        s if s % 86400 == 0 => format!("{} d", s / 86400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_store::gc::DEFAULT_GRACE;

    #[test]
    fn durations() {
        let parse = xet_protocol::util::duration::parse_duration;
        assert_eq!(parse("24h"), Some(DEFAULT_GRACE), "the default --grace");
        assert_eq!(humantime(DEFAULT_GRACE), "1 d");
        assert_eq!(humantime(Duration::from_secs(5400)), "90 min");
    }
}
