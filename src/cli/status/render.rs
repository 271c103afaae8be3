//! The text form of the report.

use std::io::Write;

use super::*;
use xet_protocol::redact::redact;
use xet_protocol::util::size::format_size;

pub(super) fn setting_text(s: &Option<Setting>) -> String {
    match s {
        Some(s) => format!("{}  [{}]", s.value, s.scope),
        None => "(not set)".to_string(),
    }
}

pub(super) fn dir_text(info: &DirInfo) -> String {
    let path = info.path.as_deref().unwrap_or("(unknown: HOME is not set)");
    if !info.exists {
        format!("{path} (does not exist yet)")
    } else {
        format!(
            "{path} ({}, {} file{})",
            format_size(info.bytes),
            info.files,
            if info.files == 1 { "" } else { "s" }
        )
    }
}

pub(super) fn check_text(c: &Reachability) -> String {
    if c.reachable {
        let what = if c.git_xet_server {
            format!(
                "git-xet server {}",
                c.server_version.as_deref().unwrap_or("(version unknown)")
            )
        } else {
            "not a git-xet server (no git-xet /health there)".to_string()
        };
        format!(
            "reachable: {what}; GET {} answered HTTP {} in {} ms",
            c.url,
            c.http_status.unwrap_or(0),
            c.millis
        )
    } else {
        format!(
            "unreachable: GET {} failed: {}",
            c.url,
            c.error.as_deref().unwrap_or("no answer")
        )
    }
}

pub(super) fn credential_text(c: &CredentialCheck) -> String {
    let from = c
        .source
        .as_deref()
        .map_or("no credential".to_string(), |s| {
            format!("credential from {s}")
        });
    let status = c
        .http_status
        .map_or(String::new(), |s| format!(" (HTTP {s})"));
    match c.verdict {
        Verdict::Accepted => format!("{from} accepted by {}{status}", c.url),
        Verdict::NotNeeded => format!("{} needs no credential{status}", c.url),
        Verdict::Refused => format!("{from} REFUSED by {}{status}", c.url),
        Verdict::Missing => format!("{} NEEDS a credential and none is stored{status}", c.url),
        Verdict::Unknown => format!(
            "{from}: {} gave no clear answer ({})",
            c.url,
            c.error.as_deref().unwrap_or("unknown")
        ),
    }
}

pub(super) fn remote_text(r: &RemoteInfo) -> String {
    let how = match r.transfer {
        Transfer::Standalone => match &r.endpoint {
            Some(e) => {
                let state = match e.state {
                    Some(StoreState::Store) => "; a store".to_string(),
                    Some(s) => format!("; {}", s.as_str().replace('_', " ")),
                    None => String::new(),
                };
                let credential = e.credential.as_ref().map_or(String::new(), |c| {
                    format!("; credential {}", c.verdict.as_str().replace('_', " "))
                });
                format!(
                    "git-xet standalone -> {} (from {}{state}{credential})",
                    e.value, e.source
                )
            }
            None => "git-xet standalone -> NO ENDPOINT".to_string(),
        },
        Transfer::GitLfsFile => "git-lfs's own file adapter (git-xet is not used)".to_string(),
        Transfer::OtherAgent => format!(
            "standalone agent {:?} (not git-xet)",
            r.standalone_agent.as_deref().unwrap_or("?")
        ),
        Transfer::Negotiated => "negotiated with its LFS server".to_string(),
    };
    format!(
        "{}: {how}; LFS URL {}",
        r.name,
        r.lfs_url.as_deref().unwrap_or("(unknown)")
    )
}

/// The text report: the programs, the agent's registration, the repository, the cache, then
/// the findings.
pub(super) fn render(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "git-xet  {}  {}",
        r.git_xet.version,
        r.git_xet.path.as_deref().unwrap_or("(path unknown)")
    )?;
    writeln!(out, "git      {}", r.git.as_deref().unwrap_or("not found"))?;
    writeln!(
        out,
        "git-lfs  {}",
        r.git_lfs
            .as_deref()
            .unwrap_or("not found — install it: https://git-lfs.com")
    )?;
    if r.git.is_some() {
        writeln!(out)?;
        render_registration(&r.registration, out)?;
    }
    writeln!(out)?;
    match &r.repository {
        None => writeln!(out, "Repository: none (not inside a git repository)")?,
        Some(repo) => render_repository(repo, out)?,
    }
    writeln!(out)?;
    writeln!(out, "Cache {}", dir_text(&r.cache))?;
    render_findings(r, out)
}

fn render_registration(g: &Registration, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "Agent registration: {}",
        match (g.registered, g.runnable) {
            (false, _) => "NOT REGISTERED",
            (true, Some(false)) => "registered, but the program cannot be run",
            (true, _) => "registered",
        }
    )?;
    let rows = [
        ("lfs.customtransfer.xet.path", &g.path),
        ("lfs.customtransfer.xet.args", &g.args),
        ("lfs.customtransfer.xet.concurrent", &g.concurrent),
        ("filter.lfs.process", &g.filter_lfs_process),
    ];
    for (key, value) in rows {
        writeln!(out, "  {key:<35} {}", setting_text(value))?;
    }
    for (key, value) in [
        ("lfs.customtransfer.xet.direction", &g.direction),
        ("lfs.basictransfersonly", &g.basic_transfers_only),
    ] {
        if value.is_some() {
            writeln!(out, "  {key:<35} {}", setting_text(value))?;
        }
    }
    match (&g.other_agent, g.this_executable) {
        (Some(other), _) => writeln!(out, "  (the registered program is not git-xet: {other})"),
        (None, Some(false)) => writeln!(
            out,
            "  (the registered program is another installation of git-xet than this one)"
        ),
        _ => Ok(()),
    }
}

/// A repository line's label, padded so that the values line up.
fn label(s: &str) -> String {
    format!("  {s:<10}")
}

fn render_repository(repo: &Repository, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "Repository {}",
        repo.work_tree.as_deref().unwrap_or(&repo.git_dir)
    )?;
    render_mode_and_endpoint(repo, out)?;
    for u in repo
        .lfs_urls
        .iter()
        .filter(|_| repo.mode != Mode::Standalone)
    {
        let remote = u.remote.as_deref().unwrap_or("default remote");
        writeln!(
            out,
            "{} {} ({remote}; from {})",
            label("LFS URL"),
            redact(&u.url),
            u.source
        )?;
    }
    for c in &repo.reachability {
        writeln!(out, "{} {}", label("server"), check_text(c))?;
    }
    let endpoint_credential = repo.endpoint.as_ref().and_then(|e| e.credential.as_ref());
    for c in endpoint_credential
        .into_iter()
        .chain(&repo.credential_checks)
    {
        writeln!(out, "{} {}", label("credential"), credential_text(c))?;
    }
    for r in &repo.remotes {
        writeln!(out, "{} {}", label("remote"), remote_text(r))?;
    }
    let mut hook = match (repo.pre_push_hook, &repo.pre_push_chained) {
        (HookKind::GitXet, Some(chained)) => format!("git-xet's check, then {chained}"),
        (HookKind::GitXet, None) => "git-xet's check, then `git lfs pre-push`".to_string(),
        (HookKind::GitLfs, _) => "git-lfs's (no git-xet check)".to_string(),
        (HookKind::Other, _) => "your own hook (no git-xet check)".to_string(),
        (HookKind::None, _) => "none".to_string(),
    };
    if repo.mode == Mode::Standalone {
        hook.push_str(if repo.pre_push_hook == HookKind::GitXet {
            "; sends a push's small files in packs first"
        } else {
            "; `git xet install --local` adds git-xet's, which also sends a push's small files \
             in packs before git-lfs does"
        });
    }
    writeln!(out, "{} {hook}", label("pre-push"))?;
    writeln!(
        out,
        "{} {} ({})",
        label("journal"),
        repo.journal.path,
        journal_text(&repo.journal)
    )
}

fn render_mode_and_endpoint(repo: &Repository, out: &mut impl Write) -> std::io::Result<()> {
    if repo.mode == Mode::Standalone {
        let agent = repo.standalone_agent.as_ref();
        writeln!(
            out,
            "{} standalone (lfs.standalonetransferagent = xet  [{}]): no LFS server; git-xet \
             stores objects at the endpoint",
            label("mode"),
            agent.map_or("", |a| a.scope.as_str())
        )?;
    } else {
        writeln!(
            out,
            "{} negotiated: the LFS server chooses; git-xet is used when it offers xet",
            label("mode")
        )?;
    }
    match &repo.endpoint {
        Some(e) => writeln!(
            out,
            "{} {} ({}; from {})",
            label("endpoint"),
            e.value,
            if e.kind == EndpointKind::Http {
                "URL"
            } else {
                "directory"
            },
            e.source
        )?,
        None if repo.mode == Mode::Standalone => writeln!(out, "{} NONE SET", label("endpoint"))?,
        None => {}
    }
    if let Some(store) = &repo.store {
        writeln!(out, "{} {}", label("store"), dir_text(store))?;
    }
    Ok(())
}

fn journal_text(j: &JournalInfo) -> String {
    if !j.exists {
        return "no transfers yet".to_string();
    }
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    let mut text = format!(
        "{} record{}, {} object{}",
        j.records,
        plural(j.records),
        j.objects,
        plural(j.objects)
    );
    if j.downloads > 0 {
        text.push_str(&format!(
            "; downloaded {}, {} reused from this machine",
            format_size(j.downloaded_bytes),
            format_size(j.reused_bytes)
        ));
    }
    if j.uploads > 0 {
        text.push_str(&format!("; uploads sent {}", format_size(j.sent_bytes)));
    }
    text
}

/// The notes, then the warnings (or that there are none).
fn render_findings(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    if !r.notes.is_empty() {
        writeln!(out)?;
        for n in &r.notes {
            writeln!(out, "note: {n}")?;
        }
    }
    writeln!(out)?;
    if r.warnings.is_empty() {
        writeln!(out, "No problems found.")?;
    } else {
        writeln!(out, "Warnings:")?;
        for w in &r.warnings {
            writeln!(out, "  ! {w}")?;
        }
    }
    Ok(())
}
