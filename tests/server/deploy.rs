//! What `deploy/` ships for operators: the Grafana dashboard and the Prometheus alert rules
//! name only metrics a server exports, and the rules pass promtool's check and their own unit
//! tests (`deploy/prometheus/git-xet-alerts.test.yml`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// Every `gitxet_…` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("gitxet_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        out.insert(name);
    }
    out
}

/// The sample names a server's `/metrics` has or declares: each sample line's name, and for
/// each `# TYPE` line the names its samples take (a family without samples yet is declared).
fn exported(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if let Some(decl) = line.strip_prefix("# TYPE ") {
            let mut parts = decl.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            for s in suffixes {
                out.insert(format!("{name}{s}"));
            }
        } else if !line.starts_with('#') {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out
}

#[test]
fn the_dashboard_and_the_alerts_name_only_metrics_the_server_exports() {
    let server = common::server::start();
    // A request first: request families have no series before one.
    let health = reqwest::blocking::get(format!("{}/health", server.url())).unwrap();
    assert_eq!(health.status(), 200);
    let text = reqwest::blocking::get(format!("{}/metrics", server.url()))
        .unwrap()
        .text()
        .unwrap();
    let mut exported = exported(&text);
    assert!(exported.contains("gitxet_files"), "{text}");
    // Metrics of object storage have no series on this server (a directory store): the names
    // the server's metrics table documents as such.
    let table = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server/metrics.rs"),
    )
    .unwrap();
    let object_storage: BTreeSet<String> = table
        .lines()
        .filter(|l| l.starts_with("//! | `gitxet_") && l.contains("| on object storage"))
        .flat_map(metric_names)
        .collect();
    assert!(object_storage.len() >= 3, "{object_storage:?}");
    exported.extend(object_storage);

    let dashboard: serde_json::Value =
        serde_json::from_slice(&std::fs::read(deploy("grafana/git-xet-dashboard.json")).unwrap())
            .unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut used = BTreeSet::new();
    for panel in panels {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            used.extend(metric_names(expr));
        }
    }
    let alerts = std::fs::read_to_string(deploy("prometheus/git-xet-alerts.yml")).unwrap();
    let alert_exprs: Vec<&str> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .collect();
    assert!(alert_exprs.len() >= 8, "{alert_exprs:?}");
    for e in &alert_exprs {
        used.extend(metric_names(e));
    }
    let unknown: Vec<&String> = used.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard or the alerts name metrics the server does not export: {unknown:?}\n{text}"
    );
    // What the issue of an operator asks the alerts to watch.
    for watched in [
        "gitxet_catch_up_age_seconds",
        "gitxet_storage_errors_total",
        "gitxet_http_requests_total",
        "gitxet_data_free_bytes",
        "gitxet_unchecked_sha256_claims",
        "gitxet_gc_running_seconds",
    ] {
        assert!(
            alert_exprs.iter().any(|e| e.contains(watched)),
            "no alert on {watched}"
        );
    }
    server.server.stop().unwrap();
}

/// Every alert rule names its runbook row, and docs/server.md has that row.
#[test]
fn every_alert_names_its_row_in_the_runbook() {
    let alerts = std::fs::read_to_string(deploy("prometheus/git-xet-alerts.yml")).unwrap();
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/server.md"))
            .unwrap();
    let names: Vec<&str> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    let runbooks: Vec<&str> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook: "))
        .collect();
    assert_eq!(
        runbooks.len(),
        names.len(),
        "an alert without a runbook annotation"
    );
    for (name, runbook) in names.iter().zip(&runbooks) {
        assert_eq!(
            *runbook,
            format!("\"docs/server.md, Alerts: what to do, {name}\""),
            "the runbook of {name}"
        );
        assert!(
            docs.contains(&format!("\n| `{name}` | ")),
            "docs/server.md's \"Alerts: what to do\" has no row for {name}"
        );
    }
    assert!(docs.contains("\n### Alerts: what to do\n"));
}

#[test]
#[cfg_attr(
    missing_promtool,
    ignore = "needs promtool: apt-get install prometheus"
)]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let run = |args: &[&str]| {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(deploy("prometheus"))
            .output()
            .expect("promtool runs (apt-get install prometheus)");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["check", "rules", "git-xet-alerts.yml"]);
    run(&["test", "rules", "git-xet-alerts.test.yml"]);
}
