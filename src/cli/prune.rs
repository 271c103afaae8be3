//! `git xet prune`: deletes local LFS objects git-lfs would prune, but only those the remote's
//! git-xet endpoint holds intact (see [`crate::agent::prune`] for why `git lfs prune
//! --verify-remote` cannot check them in standalone mode).
//!
//! Exit codes: 0 every candidate was pruned (or would be, with `--dry-run`), or there was
//! none; 2 some were kept because the endpoint does not hold them (listed, with the command that
//! uploads them); 1 the command failed. For a remote git-xet does not serve in standalone mode,
//! it runs `git lfs prune --verify-remote`, which asks that remote's LFS server.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use super::CmdResult;
use crate::agent::protocol::Operation;
use crate::agent::prune::{self, Verdict};
use crate::agent::settings::{self, TransferMode};
use crate::agent::transfer::{self, AgentOptions};
use crate::git::Git;
use xet_protocol::redact::redact;
use xet_protocol::util::size::format_size;

/// Exit code when some objects were kept because the endpoint does not hold them.
pub(crate) const KEPT: u8 = 2;

/// How long to wait for an agent that holds a directory endpoint's store.
const STORE_PATIENCE: Duration = Duration::from_secs(60);

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Asks git-lfs which local objects it would prune (`git lfs prune --dry-run \
--verbose --no-verify-remote`: its own rules keep the objects of the checkout, recent refs and \
commits, unpushed commits and stashes), then looks each one up at the endpoint git-xet uses for \
the remote (remote.<name>.xetEndpoint, xet.endpoint or GIT_XET_ENDPOINT) and deletes the local \
copy only if the endpoint holds the object intact with the same size. Objects it does not hold \
(never pushed there, pushed to another endpoint, lost or damaged there) are kept and listed \
with the command that uploads them. A directory endpoint without a store is never created.\n\n\
Why: in standalone mode git-lfs does not ask the transfer agent during `git lfs prune \
--verify-remote` and would count every object as present, so git-xet's agent refuses that \
check (git-lfs then prunes nothing it can reach from a commit).\n\n\
For a remote whose LFS server git-lfs asks through the batch API (negotiated mode), this runs \
`git lfs prune --verify-remote`, which checks each object with that server.\n\n\
Exit status: 0 everything git-lfs would prune was held and is pruned (or nothing to prune), 2 \
some objects were kept because the endpoint does not hold them, 1 the command failed.\n\n\
Examples:\n  git xet prune --dry-run\n  git xet prune --remote mirror\n  git xet prune --json"
)]
pub(crate) struct PruneArgs {
    /// Delete nothing: show what would be deleted and what kept.
    #[arg(long, short = 'd')]
    pub dry_run: bool,
    /// The remote whose endpoint must hold the objects (default: lfs.pruneremotetocheck, else
    /// origin).
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// List every object with what the endpoint said of it.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    remote: String,
    endpoint: String,
    dry_run: bool,
    /// Objects git-lfs would prune.
    candidates: usize,
    /// Held at the endpoint and deleted (or, with `--dry-run`, to be deleted).
    pruned: usize,
    pruned_bytes: u64,
    /// Kept because the endpoint does not hold them (or could not say).
    kept: usize,
    /// Held, but the local copy could not be deleted.
    delete_failures: usize,
    /// Could not be opened to check anything: why.
    endpoint_error: Option<String>,
    objects: Vec<Object>,
}

/// What the check found of one object (`--json` names them in lower case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Found {
    /// The endpoint holds it intact: the local copy may go.
    Held,
    /// The endpoint does not hold it (or not intact): keep it, push again.
    Missing,
    /// Could not be checked: keep it.
    Unknown,
    /// No local copy any more.
    Gone,
}

impl Found {
    fn as_str(self) -> &'static str {
        match self {
            Found::Held => "held",
            Found::Missing => "missing",
            Found::Unknown => "unknown",
            Found::Gone => "gone",
        }
    }
}

#[derive(Debug, Serialize)]
struct Object {
    oid: xet_format::LfsOid,
    size: u64,
    verdict: Found,
    reason: Option<String>,
    deleted: bool,
}

pub fn run(args: &PruneArgs) -> CmdResult {
    let cwd = std::env::current_dir()?;
    let git = Git::in_dir(&cwd);
    if !git.in_repository() {
        return Err("`git xet prune` needs to run inside a git repository".into());
    }
    if !git.has_git_lfs() {
        return Err("git-lfs is not installed: install it first (https://git-lfs.com)".into());
    }
    let remote = remote_to_check(&git, args)?;
    if !is_git_xet_standalone(&git, &remote)? {
        return delegate(&git, &remote, args);
    }
    let oids = prune::candidates(&git, &remote)?;
    let objects_dir = prune::objects_dir(&git)?;
    let shown_endpoint = match settings::endpoint_for_remote(&git, &cwd, Some(&remote)) {
        Ok(Some((spec, source))) => format!("{} ({source})", spec.display()),
        Ok(None) => "(none set)".to_string(),
        Err(e) => format!("(unusable: {e})"),
    };
    let mut report = Report {
        remote: remote.clone(),
        endpoint: redact(&shown_endpoint),
        dry_run: args.dry_run,
        candidates: oids.len(),
        pruned: 0,
        pruned_bytes: 0,
        kept: 0,
        delete_failures: 0,
        endpoint_error: None,
        objects: Vec::new(),
    };
    if !oids.is_empty() {
        let held = check_objects(&cwd, &remote, &oids, &objects_dir, &mut report);
        delete_held(&objects_dir, held, args.dry_run, &mut report);
    }
    print_report(&report, args)?;
    Ok(if report.delete_failures > 0 {
        ExitCode::FAILURE
    } else if report.kept > 0 {
        ExitCode::from(KEPT)
    } else {
        ExitCode::SUCCESS
    })
}

/// The remote whose endpoint must hold the objects: `--remote`, else `lfs.pruneremotetocheck`,
/// else `origin`; it must exist.
fn remote_to_check(git: &Git, args: &PruneArgs) -> Result<String, Box<dyn std::error::Error>> {
    let remote = match &args.remote {
        Some(r) => r.clone(),
        None => git
            .config_get("lfs.pruneremotetocheck")?
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| "origin".to_string()),
    };
    if !settings::remotes(git).iter().any(|r| r.name == remote) {
        return Err(format!(
            "there is no remote named {remote:?}: name the remote whose endpoint must hold the \
             objects with --remote NAME (git remote -v lists them)"
        )
        .into());
    }
    Ok(remote)
}

/// Whether git-xet stores `remote`'s objects in standalone mode (then this command checks
/// them), or git-lfs negotiates with an LFS server (then git-lfs's own prune checks). Any other
/// transfer is refused: nothing could check what it stored.
fn is_git_xet_standalone(git: &Git, remote: &str) -> Result<bool, Box<dyn std::error::Error>> {
    let lfs_url = settings::lfs_url_of(
        &settings::lfs_env_endpoints(git),
        &settings::remotes(git),
        remote,
    );
    match settings::transfer_mode(git, lfs_url.as_deref()) {
        TransferMode::Standalone => Ok(true),
        TransferMode::Negotiated => Ok(false),
        TransferMode::OtherStandalone(other) => Err(format!(
            "remote {remote:?} uses the standalone transfer agent {other:?}, not git-xet: \
             git-xet cannot check its objects, and git-lfs cannot either (it does not ask \
             standalone agents); prune with care"
        )
        .into()),
        TransferMode::FileAdapter => Err(format!(
            "remote {remote:?} has the LFS URL {}: git-lfs copies its objects there with its \
             own file adapter, not git-xet, and `git lfs prune --verify-remote` counts every \
             object as present there without looking. git xet prune checks git-xet \
             endpoints only: to use git-xet for this remote, run `git xet install --local \
             --endpoint DIR` (add `--remote {remote}` for this remote only)",
            redact(lfs_url.as_deref().unwrap_or("file://…"))
        )
        .into()),
    }
}

/// Asks `remote`'s endpoint about each candidate with a local copy; each goes into `report`
/// with its verdict. Returns the indexes (in `report.objects`) of those the endpoint holds.
/// After the endpoint failed to answer once (each request retried for a minute), the rest is
/// not asked about. The store of a directory endpoint is released on return.
fn check_objects(
    cwd: &Path,
    remote: &str,
    oids: &[xet_format::LfsOid],
    objects_dir: &Path,
    report: &mut Report,
) -> Vec<usize> {
    let mut options = AgentOptions::in_dir(cwd);
    options.store_patience = STORE_PATIENCE;
    let lease = transfer::open_standalone(options, Some(remote), Operation::Download);
    if let Err(e) = &lease {
        report.endpoint_error = Some(redact(&e.to_string()));
    }
    let mut held = Vec::new();
    let mut unanswered: Option<String> = None;
    for oid in oids {
        let path = xet_client::object_chunks::object_path(objects_dir, oid);
        let Ok(meta) = std::fs::metadata(&path) else {
            report.objects.push(Object {
                oid: *oid,
                size: 0,
                verdict: Found::Gone,
                reason: Some("no local copy any more".into()),
                deleted: false,
            });
            continue;
        };
        let size = meta.len();
        let verdict = match (&lease, &unanswered) {
            (Err(e), _) => Verdict::Unknown(redact(&e.to_string())),
            (Ok(_), Some(why)) => Verdict::Unknown(format!("not checked: {why}")),
            (Ok(l), None) => prune::check(l.get(), oid, size),
        };
        if let Verdict::Unknown(why) = &verdict {
            if lease.is_ok() && unanswered.is_none() {
                unanswered = Some(format!(
                    "the endpoint failed for {oid}: {}",
                    xet_protocol::redact::clip(why, 300)
                ));
            }
        }
        let (name, reason) = match verdict {
            Verdict::Held => {
                held.push(report.objects.len());
                (Found::Held, None)
            }
            Verdict::Missing(why) => (Found::Missing, Some(why)),
            Verdict::Unknown(why) => (Found::Unknown, Some(why)),
        };
        report.objects.push(Object {
            oid: *oid,
            size,
            verdict: name,
            reason,
            deleted: false,
        });
    }
    held
}

/// Deletes the local copies of the objects at `held` (unless `dry_run`) and counts what was
/// pruned and kept.
fn delete_held(objects_dir: &Path, held: Vec<usize>, dry_run: bool, report: &mut Report) {
    for i in held {
        let o = &mut report.objects[i];
        if !dry_run {
            if let Err(e) = prune::delete_object(objects_dir, &o.oid) {
                o.reason = Some(format!("cannot delete the local copy: {e}"));
                report.delete_failures += 1;
                continue;
            }
            o.deleted = true;
        }
        report.pruned += 1;
        report.pruned_bytes += o.size;
    }
    report.kept = report
        .objects
        .iter()
        .filter(|o| matches!(o.verdict, Found::Missing | Found::Unknown))
        .count();
}

/// The report as text or JSON on stdout, redacted.
fn print_report(report: &Report, args: &PruneArgs) -> std::io::Result<()> {
    let mut text = Vec::new();
    if args.json {
        serde_json::to_writer_pretty(&mut text, report)?;
        writeln!(text)?;
    } else {
        render(report, args.verbose, &mut text)?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_all(redact(&String::from_utf8_lossy(&text)).as_bytes())?;
    out.flush()
}

/// Negotiated mode: git-lfs's own check asks the LFS server about every object.
fn delegate(git: &Git, remote: &str, args: &PruneArgs) -> CmdResult {
    if args.json {
        return Err(format!(
            "remote {remote:?} is served by its LFS server (negotiated mode), where git xet prune \
             runs `git lfs prune --verify-remote`, which has no JSON output: run that instead"
        )
        .into());
    }
    eprintln!(
        "git-xet: remote {remote:?} is served by its LFS server (negotiated mode), which git-lfs \
         asks about each object: running `git lfs prune --verify-remote`"
    );
    let setting = format!("lfs.pruneremotetocheck={remote}");
    let mut cmd = std::process::Command::new("git");
    if let Some(dir) = git.dir() {
        cmd.current_dir(dir);
    }
    cmd.args(["-c", &setting, "lfs", "prune", "--verify-remote"]);
    if args.dry_run {
        cmd.arg("--dry-run");
    }
    if args.verbose {
        cmd.arg("--verbose");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run git lfs prune: {e}"))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

/// The report as text: the remote and endpoint, what git-lfs would prune and the endpoint
/// holds, each object with `verbose`, then what was deleted and what was kept.
fn render(r: &Report, verbose: bool, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "remote   {}", r.remote)?;
    writeln!(out, "endpoint {}", r.endpoint)?;
    if r.candidates == 0 {
        writeln!(out, "git-lfs would prune no object: nothing to do.")?;
        return Ok(());
    }
    if let Some(e) = &r.endpoint_error {
        writeln!(out, "cannot check objects at the endpoint: {e}")?;
    }
    writeln!(
        out,
        "git-lfs would prune {} object{}; the endpoint holds {} of them.",
        r.candidates,
        plural(r.candidates),
        r.pruned
    )?;
    if verbose {
        render_objects(r, out)?;
    }
    render_deleted(r, out)?;
    render_kept(r, out)
}

/// `"s"` unless `n` is 1.
fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// One line per object: oid, size, verdict and why.
fn render_objects(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    for o in &r.objects {
        writeln!(
            out,
            "  {} {:>10}  {}{}",
            o.oid,
            format_size(o.size),
            o.verdict.as_str(),
            o.reason
                .as_deref()
                .map(|w| format!(": {w}"))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// What was deleted (or would be, in a dry run), and the held objects whose local copy could
/// not be deleted.
fn render_deleted(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    if r.pruned > 0 {
        writeln!(
            out,
            "{} {} local object{} ({}) held at the endpoint.",
            if r.dry_run { "Would delete" } else { "Deleted" },
            r.pruned,
            plural(r.pruned),
            format_size(r.pruned_bytes)
        )?;
    }
    for o in r
        .objects
        .iter()
        .filter(|o| o.verdict == Found::Held && !o.deleted && !r.dry_run)
    {
        writeln!(
            out,
            "  {}: {}",
            o.oid,
            o.reason.as_deref().unwrap_or("not deleted")
        )?;
    }
    Ok(())
}

/// The objects kept because the endpoint does not hold them (the first 20), and the command
/// that uploads them.
fn render_kept(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let kept: Vec<&Object> = r
        .objects
        .iter()
        .filter(|o| matches!(o.verdict, Found::Missing | Found::Unknown))
        .collect();
    if kept.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "Kept {} object{} the endpoint does not hold (or could not confirm):",
        kept.len(),
        plural(kept.len())
    )?;
    for o in kept.iter().take(20) {
        writeln!(
            out,
            "  {} ({}): {}",
            o.oid,
            format_size(o.size),
            o.reason.as_deref().unwrap_or("not held")
        )?;
    }
    if kept.len() > 20 {
        writeln!(
            out,
            "  … and {} more (--json lists them all)",
            kept.len() - 20
        )?;
    }
    let ids: Vec<String> = kept.iter().take(10).map(|o| o.oid.to_hex()).collect();
    writeln!(
        out,
        "Upload them to the endpoint, then run `git xet prune` again:\n  git lfs push \
         --object-id {} {}{}\n(or `git lfs push --all {}` for every object your refs use)",
        r.remote,
        ids.join(" "),
        if kept.len() > ids.len() { " …" } else { "" },
        r.remote
    )
}
