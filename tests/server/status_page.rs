//! The operator's status page (`/status`, `/status.json`): only the admin token opens it, its
//! figures are those of what was uploaded (each repository's logical bytes are its files'
//! sizes, the store's stored bytes are its xorbs' on disk), and the page a browser renders
//! shows the same figures and draws the history's points.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::time::{Duration, Instant};
use xet_test_tools::needs;

use git_xet::server::auth::{AdminToken, RepoPattern, Scope, ServerToken};
use git_xet::server::status::StatusSettings;
use git_xet::server::ServeConfig;
use serde_json::Value;
use xet_client::pipeline::upload::{upload, UploadOptions};
use xet_client::{RemoteCas, RemoteConfig, TokenSource};

use crate::common;
use common::server::{start_with, TestServer, READ_TOKEN, WRITE_TOKEN};

const ADMIN: &str = "status-admin-secret-0123456789";
/// A write token for the repositories under `team/`: what it uploads is registered through
/// each repository it names, even a file another repository registered first.
const TEAM: &str = "status-team-secret-0123456789";

/// A server with the admin token, whose figures follow every change at once.
fn server() -> TestServer {
    start_with(|c| {
        with_status(c, Duration::from_secs(30));
        // Claims of large files stay unchecked, for the backlog to show one.
        c.maintenance.claims_interval = None;
    })
}

/// The admin token, the team's scoped token, and figures that follow every change at once,
/// with a heartbeat every `heartbeat`.
fn with_status(c: &mut ServeConfig, heartbeat: Duration) {
    c.admin_tokens = vec![AdminToken::new(ADMIN, "test").unwrap()];
    c.secrets.push(
        ServerToken::new(TEAM, Scope::Write, "test")
            .unwrap()
            .scoped(RepoPattern::parse("team/*").unwrap()),
    );
    c.status = StatusSettings {
        poll: Duration::from_millis(50),
        usage_every: Duration::ZERO,
        sample_every: Duration::ZERO,
        heartbeat_every: heartbeat,
    };
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// `GET path` with `authorization`: status, headers, body.
fn get(
    s: &TestServer,
    path: &str,
    authorization: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = reqwest::blocking::Client::new().get(format!("{}{path}", s.url()));
    if let Some(a) = authorization {
        request = request.header("Authorization", a);
    }
    let r = request.send().unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.text().unwrap())
}

fn status_json(s: &TestServer) -> Value {
    let (status, _, body) = get(s, "/status.json", Some(&format!("Bearer {ADMIN}")));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The status once `done` holds of it (the figures are computed in the background).
fn status_when(s: &TestServer, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let v = status_json(s);
        if done(&v) {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the status did not get there: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A basic LFS upload of `data` to `repo` with the team's token.
fn put(s: &TestServer, repo: &str, data: &[u8]) {
    let oid = common::sha256_hex(data);
    let r = reqwest::blocking::Client::new()
        .put(format!("{}/{repo}/info/lfs/objects/{oid}", s.url()))
        .basic_auth("git", Some(TEAM))
        .body(data.to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
}

/// The bytes of the xorbs the store holds on disk.
fn xorb_bytes_on_disk(s: &TestServer) -> u64 {
    let mut total = 0;
    let root = s.store_dir().join("xorbs");
    for dir in std::fs::read_dir(root).unwrap() {
        for f in std::fs::read_dir(dir.unwrap().path()).unwrap() {
            total += f.unwrap().metadata().unwrap().len();
        }
    }
    total
}

/// The repository `name` in the status.
fn repo<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["usage"]["repos"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["repo"] == name)
        .unwrap_or_else(|| panic!("no repository {name} in {v:#}"))
}

/// Files uploaded: two repositories through basic uploads (one file in both), one file through
/// the CAS API with a server-wide token (no repository), and a large one whose SHA-256 claim
/// stays unchecked.
struct Uploaded {
    a: Vec<u8>,
    b: Vec<u8>,
    c: Vec<u8>,
    cas: Vec<u8>,
    large: Vec<u8>,
}

fn upload_everything(s: &TestServer) -> Uploaded {
    let u = Uploaded {
        a: common::splitmix64(1, 300_000),
        b: common::splitmix64(2, 200_000),
        c: common::splitmix64(3, 100_000),
        cas: common::splitmix64(4, 150_000),
        large: common::splitmix64(5, 9 << 20),
    };
    put(s, "team/alpha", &u.a);
    put(s, "team/alpha", &u.b);
    put(s, "team/beta.git", &u.a);
    put(s, "team/beta", &u.c);
    let cas = RemoteCas::new(RemoteConfig::new(
        s.url(),
        TokenSource::fixed(Some(WRITE_TOKEN.into())),
    ))
    .unwrap();
    upload(&cas, &u.cas[..], &UploadOptions::default()).unwrap();
    upload(&cas, &u.large[..], &UploadOptions::default()).unwrap();
    u
}

#[test]
fn only_the_admin_token_opens_the_status_page() {
    let s = server();
    for path in ["/status", "/status.json"] {
        for refused in [
            None,
            Some(format!("Bearer {WRITE_TOKEN}")),
            Some(basic("git", READ_TOKEN)),
            Some(format!("Bearer {ADMIN}-not")),
            Some(basic(ADMIN, "x")),
        ] {
            let (status, headers, body) = get(&s, path, refused.as_deref());
            assert_eq!(status, 401, "{path} with {refused:?}: {body}");
            assert!(body.contains("admin token"), "{body}");
            assert!(!body.contains(ADMIN));
            if path == "/status" {
                // A browser is asked for credentials.
                assert!(headers["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .starts_with("Basic realm="));
            }
        }
        for admitted in [format!("Bearer {ADMIN}"), basic("anyone", ADMIN)] {
            let (status, headers, body) = get(&s, path, Some(&admitted));
            assert_eq!(status, 200, "{path}: {body}");
            assert_eq!(headers["cache-control"], "no-store");
        }
    }
    // The page: HTML, under a policy that allows its own inline code and this origin only.
    let (_, headers, body) = get(&s, "/status", Some(&format!("Bearer {ADMIN}")));
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.starts_with("default-src 'none';"), "{csp}");
    assert!(
        csp.contains("connect-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert!(body.contains("<script>") && body.contains("status.json"));

    // The admin token opens nothing else.
    let batch = reqwest::blocking::Client::new()
        .post(format!("{}/team/alpha/info/lfs/objects/batch", s.url()))
        .header("Accept", "application/vnd.git-lfs+json")
        .basic_auth("git", Some(ADMIN))
        .body(r#"{"operation":"download","objects":[]}"#)
        .send()
        .unwrap();
    assert_eq!(batch.status(), 401);
    let cas = reqwest::blocking::Client::new()
        .get(format!("{}/v1/lfs-files/{}", s.url(), "0".repeat(64)))
        .bearer_auth(ADMIN)
        .send()
        .unwrap();
    assert_eq!(cas.status(), 401);

    // Without an admin token configured the page is off, and says how to turn it on.
    let off = common::server::start();
    for path in ["/status", "/status.json"] {
        let (status, _, body) = get(&off, path, Some(&format!("Bearer {ADMIN}")));
        assert_eq!(status, 404, "{body}");
        assert!(body.contains("--admin-token"), "{body}");
    }
}

#[test]
fn the_status_api_reports_what_the_uploads_created() {
    let s = server();
    // Before anything is uploaded: an empty store, figured out.
    let empty = status_when(&s, |v| v["usage"].is_object());
    assert_eq!(empty["usage"]["files"], 0);
    assert_eq!(empty["usage"]["logical_bytes"], 0);
    assert_eq!(empty["history"].as_array().unwrap().len(), 1);
    let u = upload_everything(&s);
    let all_files = 5;
    let v = status_when(&s, |v| v["usage"]["files"] == all_files);

    let usage = &v["usage"];
    let len = |d: &[u8]| d.len() as u64;
    let logical = len(&u.a) + len(&u.b) + len(&u.c) + len(&u.cas) + len(&u.large);
    assert_eq!(usage["logical_bytes"], logical, "{v:#}");
    assert_eq!(usage["stored_bytes"], xorb_bytes_on_disk(&s), "{v:#}");
    assert_eq!(usage["xorbs"], s.health("xorbs"));
    // `team/beta.git` and `team/beta` are one repository.
    assert_eq!(usage["repo_count"], 2);
    let alpha = repo(&v, "team/alpha");
    assert_eq!(alpha["files"], 2);
    assert_eq!(alpha["logical_bytes"], len(&u.a) + len(&u.b));
    let beta = repo(&v, "team/beta");
    assert_eq!(beta["files"], 2);
    assert_eq!(beta["logical_bytes"], len(&u.a) + len(&u.c));
    let (alpha_stored, beta_stored) = (alpha["stored_bytes"].clone(), beta["stored_bytes"].clone());
    // The CAS uploads named no repository.
    assert_eq!(usage["unattributed_files"], 2);
    assert_eq!(usage["unattributed_bytes"], len(&u.cas) + len(&u.large));
    assert!(usage["repos_complete"].as_bool().unwrap());
    assert!(usage["stored_complete"].as_bool().unwrap());

    // Pushes, newest first: the two shards, then the basic uploads.
    let pushes = v["pushes"].as_array().unwrap();
    assert_eq!(pushes.len(), 6, "{v:#}");
    let shape: Vec<(String, Value, u64, u64)> = pushes
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                p["repo"].clone(),
                p["files"].as_u64().unwrap(),
                p["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("shard".into(), Value::Null, 1, len(&u.large)),
            ("shard".into(), Value::Null, 1, len(&u.cas)),
            ("basic".into(), "team/beta".into(), 1, len(&u.c)),
            ("basic".into(), "team/beta".into(), 1, len(&u.a)),
            ("basic".into(), "team/alpha".into(), 1, len(&u.b)),
            ("basic".into(), "team/alpha".into(), 1, len(&u.a)),
        ]
    );
    assert_eq!(pushes[0]["new_files"], 1);
    assert_eq!(pushes[0]["new_bytes"], len(&u.large));
    let node = v["node"]["id"].as_str().unwrap();
    assert!(pushes.iter().all(|p| p["node"] == node));

    // The large file's claim waits (its checking job is off), charged to server-wide tokens.
    assert_eq!(
        v["claims"]["unchecked"],
        s.health("unchecked_sha256_claims")
    );
    assert_eq!(v["claims"]["unchecked"], 1);
    assert_eq!(v["claims"]["uploaders"][0]["uploader"], "");
    assert_eq!(v["claims"]["uploaders"][0]["bytes"], len(&u.large));

    // One node, this one, on a directory store.
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["id"], node);
    assert_eq!(nodes[0]["this_node"], true);
    assert_eq!(v["node"]["storage"], "directory");

    // The history: the empty store first, the totals now last.
    let history = v["history"].as_array().unwrap();
    assert!(history.len() >= 2, "{v:#}");
    assert_eq!(history[0]["logical_bytes"], 0);
    let last = history.last().unwrap();
    assert_eq!(last["logical_bytes"], logical);
    assert_eq!(last["stored_bytes"], usage["stored_bytes"]);
    // No collection ran.
    assert_eq!(v["gc"]["runs"].as_array().unwrap().len(), 0);
    assert_eq!(v["gc"]["running_secs"], Value::Null);

    // Stored: the xorbs the repository's files use, each whole, as the store holds them on
    // disk (read once the server let go of the store); the one file in both counts in both.
    let TestServer { server, dir } = s;
    server.stop().unwrap();
    let root = dir.path().join("store");
    let store = xet_store::Store::open(&root).unwrap();
    let xorbs_of = |files: &[&[u8]]| {
        let mut xorbs = std::collections::BTreeSet::new();
        for data in files {
            let oid = xet_format::LfsOid::from_hex(&common::sha256_hex(data)).unwrap();
            let (file, _) = store.file_by_oid(&oid).unwrap().unwrap();
            xorbs.extend(
                store
                    .file(&file)
                    .unwrap()
                    .unwrap()
                    .terms
                    .iter()
                    .map(|t| t.xorb),
            );
        }
        xorbs
    };
    let on_disk = |xorbs: &std::collections::BTreeSet<xet_format::XorbHash>| -> u64 {
        xorbs
            .iter()
            .map(|x| {
                std::fs::metadata(xet_store::backend::xorb_path(&root, x))
                    .unwrap()
                    .len()
            })
            .sum()
    };
    let (alpha_xorbs, beta_xorbs) = (xorbs_of(&[&u.a, &u.b]), xorbs_of(&[&u.a, &u.c]));
    assert_eq!(alpha_stored, on_disk(&alpha_xorbs));
    assert_eq!(beta_stored, on_disk(&beta_xorbs));
    assert!(
        alpha_xorbs.intersection(&beta_xorbs).count() > 0,
        "the shared file's xorbs"
    );
}

/// How the page writes a byte count (its `bytes()`): the value in the largest binary unit
/// below it, with two decimals.
fn shown_bytes_match(text: &str, value: u64) -> bool {
    let Some((number, unit)) = text.split_once(' ') else {
        return false;
    };
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut scaled = value as f64;
    let mut i = 0;
    while scaled >= 1024.0 && i < units.len() - 1 {
        scaled /= 1024.0;
        i += 1;
    }
    let Ok(shown) = number.parse::<f64>() else {
        return false;
    };
    unit == units[i] && (shown - scaled).abs() <= 0.005 + 1e-9
}

/// The text and `data-value` of the element whose opening tag has `marker` (`id="x"` or
/// `data-field="x"`), searched in `html`.
fn element(html: &str, marker: &str) -> (String, String) {
    let at = html
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in the page:\n{html}"));
    let tag_start = html[..at].rfind('<').unwrap();
    let tag_end = at + html[at..].find('>').unwrap();
    let tag = &html[tag_start..tag_end];
    let value = tag
        .split("data-value=\"")
        .nth(1)
        .map(|v| v[..v.find('"').unwrap()].to_string())
        .unwrap_or_default();
    let text_end = tag_end + html[tag_end..].find('<').unwrap();
    (value, html[tag_end + 1..text_end].to_string())
}

/// The row of the repository `name` in the page.
fn repo_row<'a>(html: &'a str, name: &str) -> &'a str {
    let marker = format!("data-repo=\"{name}\"");
    let at = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no row of {name} in the page:\n{html}"));
    &html[at..at + html[at..].find("</tr>").unwrap()]
}

#[needs(chromium)]
#[test]
fn a_browser_shows_the_figures_of_the_api_and_draws_their_history() {
    let s = server();
    let u = upload_everything(&s);
    let v = status_when(&s, |v| v["usage"]["files"] == 5);
    // The browser gives the admin token as Basic credentials, as it would from its prompt.
    let url = format!(
        "http://status:{ADMIN}@{}/status",
        s.url().trim_start_matches("http://")
    );
    let html = common::browser::dump_dom(&url, 10_000);
    assert!(
        html.contains("data-loaded=\"true\""),
        "the script did not render:\n{html}"
    );
    assert!(html.contains("id=\"error\" hidden"), "{html}");

    let usage = &v["usage"];
    let (value, text) = element(&html, "id=\"total-files\"");
    assert_eq!((value.as_str(), text.as_str()), ("5", "5"));
    for (id, field) in [
        ("total-logical", "logical_bytes"),
        ("total-stored", "stored_bytes"),
    ] {
        let expected = usage[field].as_u64().unwrap();
        let (value, text) = element(&html, &format!("id=\"{id}\""));
        assert_eq!(value, expected.to_string(), "{id}");
        assert!(
            shown_bytes_match(&text, expected),
            "{id}: {text:?} for {expected}"
        );
    }
    let (_, ratio) = element(&html, "id=\"total-ratio\"");
    let expected =
        usage["logical_bytes"].as_f64().unwrap() / usage["stored_bytes"].as_f64().unwrap();
    let shown: f64 = ratio.trim_end_matches('×').parse().unwrap();
    assert!(
        (shown - expected).abs() <= 0.005 + 1e-9,
        "{ratio} for {expected}"
    );
    let (claims, _) = element(&html, "id=\"total-claims\"");
    assert_eq!(claims, v["claims"]["unchecked"].to_string());

    for name in ["team/alpha", "team/beta"] {
        let row = repo_row(&html, name);
        let r = repo(&v, name);
        for field in ["files", "logical_bytes", "stored_bytes"] {
            let (value, text) = element(row, &format!("data-field=\"{field}\""));
            let expected = r[field].as_u64().unwrap();
            assert_eq!(value, expected.to_string(), "{name} {field}");
            if field == "files" {
                assert_eq!(text, expected.to_string());
            } else {
                assert!(
                    shown_bytes_match(&text, expected),
                    "{name} {field}: {text:?}"
                );
            }
        }
    }
    assert_eq!(
        html.matches("<tr data-repo=").count(),
        v["usage"]["repos"].as_array().unwrap().len()
    );
    // Every push is a row, the basic uploads' sizes among them.
    let pushes_table = &html[html.find("id=\"pushes\"").unwrap()..];
    let pushes_table = &pushes_table[..pushes_table.find("</table>").unwrap()];
    assert_eq!(
        pushes_table.matches("<tr>").count(),
        6 + 1,
        "{pushes_table}"
    );
    for data in [&u.a, &u.b, &u.c] {
        let marker = format!("data-field=\"bytes\" data-value=\"{}\"", data.len());
        assert!(pushes_table.contains(&marker), "{marker}");
    }

    // The chart: a point per sample of the history (each with a ratio), and a line through
    // them.
    let samples: Vec<&Value> = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["stored_bytes"].as_u64().unwrap() > 0)
        .collect();
    assert!(!samples.is_empty());
    let chart = &html[html.find("id=\"chart\"").unwrap()..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    assert_eq!(chart.matches("<circle").count(), samples.len(), "{chart}");
    for sample in &samples {
        assert!(
            chart.contains(&format!("data-t=\"{}\"", sample["t"])),
            "{chart}"
        );
    }
    let (points, _) = {
        let at = chart.find("points=\"").unwrap() + "points=\"".len();
        (
            chart[at..at + chart[at..].find('"').unwrap()].to_string(),
            (),
        )
    };
    assert_eq!(points.split(' ').count(), samples.len(), "{points}");

    // A screenshot of the same page.
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("status.png");
    common::browser::screenshot(&url, &png, 1200, 1400, 10_000);
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        bytes.len() > 10_000,
        "{} bytes: an empty page?",
        bytes.len()
    );
}

#[needs(garage)]
#[test]
fn nodes_on_one_bucket_show_each_other_and_a_silent_one_turns_stale() {
    let g = common::garage::Garage::start();
    g.create_bucket("status");
    let node = || {
        let storage = g.s3_config("status", "prod");
        start_with(move |c| {
            c.storage = Some(storage);
            // Stale after 3 s: a node that writes every second is never that late.
            with_status(c, Duration::from_secs(1));
        })
    };
    let (a, b) = (node(), node());
    let data = common::splitmix64(9, 250_000);
    put(&a, "team/alpha", &data);
    let a_id = status_json(&a)["node"]["id"].as_str().unwrap().to_string();

    // B shows A, fresh, with the push that went through A, and counts the file A stored.
    let v = status_when(&b, |v| {
        v["nodes"].as_array().unwrap().len() == 2
            && v["pushes"].as_array().unwrap().len() == 1
            && v["usage"]["files"] == 1
    });
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["this_node"], true);
    assert_ne!(nodes[0]["id"], a_id.as_str());
    assert_eq!(nodes[1]["id"], a_id.as_str());
    assert_eq!(nodes[1]["stale"], false);
    assert_eq!(nodes[1]["shared"], true);
    assert_eq!(nodes[1]["version"], env!("CARGO_PKG_VERSION"));
    let push = &v["pushes"][0];
    assert_eq!(
        (&push["node"], &push["repo"], &push["bytes"]),
        (
            &Value::from(a_id.as_str()),
            &Value::from("team/alpha"),
            &Value::from(data.len())
        )
    );
    assert_eq!(repo(&v, "team/alpha")["logical_bytes"], data.len());
    assert!(v["node"]["storage"]
        .as_str()
        .unwrap()
        .starts_with("s3://status/prod"));

    // A stops: B keeps showing it, stale, once three heartbeats went by without its record.
    a.server.stop().unwrap();
    let v = status_when(&b, |v| v["nodes"][1]["stale"] == true);
    assert_eq!(v["nodes"][1]["id"], a_id.as_str());
}
