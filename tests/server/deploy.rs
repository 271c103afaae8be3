//! What `deploy/` ships for operators: the Grafana dashboard and the Prometheus alert rules
//! name only metrics a server exports, and the rules pass promtool's check and their own unit
//! tests (`deploy/prometheus/git-xet-alerts.test.yml`); the systemd unit passes
//! `systemd-analyze verify` and its security check, the nginx example passes `nginx -t`, and
//! Garage starts with the example configuration.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use xet_test_tools::needs;

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

#[needs(promtool)]
#[test]
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

/// The `key=value` lines of a systemd unit, in order (continuation lines joined).
fn unit_settings(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with('[') || (line.is_empty() && pending.is_empty())
        {
            continue;
        }
        pending.push_str(line.trim_end_matches('\\'));
        pending.push(' ');
        if line.ends_with('\\') {
            continue;
        }
        if let Some((k, v)) = pending.split_once('=') {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
        pending.clear();
    }
    out
}

#[needs(systemd_analyze)]
#[test]
fn the_systemd_unit_passes_systemd_analyze_and_is_hardened() {
    let text = std::fs::read_to_string(deploy("systemd/git-xet-serve.service")).unwrap();
    let settings = unit_settings(&text);
    let get = |key: &str| -> Vec<&str> {
        settings
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    // What the issue of an operator asks of it.
    let exec = get("ExecStart").join(" ");
    assert!(
        exec.contains("git-xet serve --data /var/lib/git-xet "),
        "{exec}"
    );
    assert_eq!(get("ReadWritePaths"), ["/var/lib/git-xet"]);
    assert_eq!(get("ProtectSystem"), ["strict"]);
    assert_eq!(get("DynamicUser"), ["yes"]);
    assert_eq!(get("Restart"), ["on-failure"]);
    assert_eq!(get("EnvironmentFile"), ["/etc/git-xet/env"]);
    assert!(
        exec.contains("--token-file ${CREDENTIALS_DIRECTORY}/tokens"),
        "{exec}"
    );

    // systemd's own checks, with the binary where the unit runs it from.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("git-xet-serve.service");
    std::fs::write(
        &unit,
        text.replace("/usr/local/bin/git-xet", env!("CARGO_BIN_EXE_git-xet")),
    )
    .unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze runs");
    let said = String::from_utf8_lossy(&verify.stderr).into_owned()
        + &String::from_utf8_lossy(&verify.stdout);
    // It exits 0 over unknown keys and bad values, which it only reports.
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");
    // Exposure 2.0 at most, on systemd's scale of 0 (locked down) to 10.
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=20"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze runs");
    assert!(
        security.status.success(),
        "{}",
        String::from_utf8_lossy(&security.stdout)
    );
}

#[needs(nginx)]
#[test]
fn the_nginx_example_passes_nginx_t() {
    let nginx = common::tls::nginx();
    let text = std::fs::read_to_string(deploy("nginx/git-xet.conf")).unwrap();
    // Sized for 64 MiB xorbs, unbuffered, several nodes.
    assert!(text.contains("client_max_body_size 65m;"));
    assert!(text.contains("proxy_request_buffering off;"));
    assert!(text.matches("    server 10.0.0.").count() >= 3, "{text}");
    assert!(text.contains("/ready"));

    let dir = tempfile::tempdir().unwrap();
    let pki = common::tls::Pki::self_signed();
    let site = dir.path().join("git-xet.conf");
    std::fs::write(
        &site,
        text.replace(
            "/etc/ssl/xet.example.org.pem",
            &pki.server_cert.display().to_string(),
        )
        .replace(
            "/etc/ssl/xet.example.org.key",
            &pki.server_key.display().to_string(),
        ),
    )
    .unwrap();
    let d = dir.path().display();
    let main = dir.path().join("nginx.conf");
    std::fs::write(
        &main,
        format!(
            "pid {d}/nginx.pid; error_log {d}/error.log;
events {{}}
http {{
  access_log off;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  include {site};
}}
",
            site = site.display()
        ),
    )
    .unwrap();
    let out = Command::new(nginx)
        .arg("-t")
        .arg("-c")
        .arg(&main)
        .arg("-p")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nginx -t: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[needs(garage)]
#[test]
fn the_garage_example_starts_a_node() {
    let bin = common::garage::binary().expect(common::garage::NEEDS_GARAGE);
    let text = std::fs::read_to_string(deploy("garage/garage.toml")).unwrap();
    assert!(text.contains("\nreplication_factor = 3\n"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let secret = d.join("rpc_secret");
    std::fs::write(&secret, "ab".repeat(32)).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = || common::tls::free_port();
    let (rpc, s3, admin) = (port(), port(), port());
    // This machine's paths and ports; the test's Garage has SQLite only.
    let config = d.join("garage.toml");
    std::fs::write(
        &config,
        text.replace(
            "/var/lib/garage/meta",
            &d.join("meta").display().to_string(),
        )
        .replace(
            "/var/lib/garage/data",
            &d.join("data").display().to_string(),
        )
        .replace("/etc/garage/rpc_secret", &secret.display().to_string())
        .replace("db_engine = \"lmdb\"", "db_engine = \"sqlite\"")
        .replace("[::]:3901", &format!("127.0.0.1:{rpc}"))
        .replace("10.0.0.21:3901", &format!("127.0.0.1:{rpc}"))
        .replace("[::]:3900", &format!("127.0.0.1:{s3}"))
        .replace("127.0.0.1:3903", &format!("127.0.0.1:{admin}")),
    )
    .unwrap();
    let mut server = Command::new(&bin)
        .arg("-c")
        .arg(&config)
        .arg("server")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(d.join("garage.log")).unwrap())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        let out = Command::new(&bin)
            .arg("-c")
            .arg(&config)
            .arg("status")
            .output()
            .unwrap();
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout).into_owned();
        }
        let exited = server.try_wait().unwrap();
        if exited.is_some() || started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = server.kill();
            panic!(
                "garage did not start with the example ({exited:?}): {}",
                std::fs::read_to_string(d.join("garage.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(status.contains(&format!("127.0.0.1:{rpc}")), "{status}");
}
