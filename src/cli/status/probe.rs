//! Network checks: reachability (`GET /health`) and whether the endpoint or LFS server accepts the
//! credential that would be sent, with a short timeout and never prompting.

use std::time::Instant;

use super::*;
use crate::agent::settings::{self, DirState, EndpointSpec};
use crate::git::Git;
use xet_protocol::redact::redact;
use xet_protocol::util::error::{chain_text, root_cause};

pub(super) fn check_endpoint(
    git: &Git,
    spec: &EndpointSpec,
    source: &str,
    no_network: bool,
    findings: &mut Findings,
) -> EndpointCheck {
    // What to run to point git-xet elsewhere, for the place this endpoint was configured.
    let fix = match source
        .strip_prefix("git config remote.")
        .and_then(|r| r.rsplit_once('.'))
    {
        Some((remote, _)) => {
            format!("`git xet install --local --endpoint URL-or-DIR --remote {remote}`")
        }
        None if source.starts_with("environment") => {
            format!("a right {}, or unset it", settings::ENDPOINT_ENV)
        }
        None => "`git xet install --local --endpoint URL-or-DIR`".to_string(),
    };
    let mut c = EndpointCheck::default();
    match spec {
        EndpointSpec::Http(url) => {
            if no_network {
                return c;
            }
            warn_if_unverified(git, url, findings);
            let health = probe(git, &format!("{url}/health"));
            if health.reachable {
                let cred = probe_endpoint_credential(git, url);
                endpoint_credential_finding(url, &cred, findings);
                c.credential = Some(cred);
            } else {
                findings
                    .warn(format!(
                        "the endpoint {} ({source}) does not answer ({})",
                        redact(url),
                        health.error.as_deref().unwrap_or("no answer")
                    ))
                    .fix("is the server running and the URL right?");
            }
            c.health = Some(health);
        }
        EndpointSpec::Dir(dir) => {
            let state = settings::inspect_dir_endpoint(dir);
            let shown = format!("{} ({source})", dir.display());
            c.state = Some(match &state {
                DirState::Store { .. } => StoreState::Store,
                DirState::OtherVersion(_) => StoreState::OtherVersion,
                DirState::Empty { .. } => StoreState::Empty,
                DirState::Missing => StoreState::Missing,
                DirState::NotAStore => StoreState::NotAStore,
                DirState::NotADirectory => StoreState::NotADirectory,
                DirState::CannotCreate(_) => StoreState::CannotCreate,
                DirState::Unreadable(_) => StoreState::Unreadable,
            });
            dir_finding(&state, &shown, &fix, findings);
            c.store = Some(dir_info(Some(dir.clone())));
        }
    }
    c
}

/// What the endpoint's answer to the credential git-xet would send means for the user.
fn endpoint_credential_finding(url: &str, cred: &CredentialCheck, findings: &mut Findings) {
    let bare = settings::split_userinfo(url).bare;
    let store_it = format!(
        "`printf 'url={bare}\\nusername=git\\npassword=TOKEN\\n\\n' | git credential approve`"
    );
    match cred.verdict {
        Verdict::Refused => findings
            .warn(format!(
                "the endpoint {} refused the credential git-xet would send (from {}; HTTP {}): \
                 the stored credential is wrong or expired",
                redact(url),
                cred.source.as_deref().unwrap_or("?"),
                cred.http_status.unwrap_or(0)
            ))
            .fix(format!(
                "store the right token: {store_it} (after `git credential reject` of the old \
                 one), or set GIT_XET_TOKEN"
            )),
        Verdict::Missing => findings
            .warn(format!(
                "the endpoint {} needs a token (HTTP {}) and git-xet has none",
                redact(url),
                cred.http_status.unwrap_or(0)
            ))
            .fix(format!("set GIT_XET_TOKEN, or store it with {store_it}")),
        Verdict::Unknown => {
            findings.note(format!(
                "could not check the credential for {}: {}",
                redact(url),
                cred.error.as_deref().unwrap_or("unexpected answer")
            ));
        }
        _ => {}
    }
}

/// What a directory endpoint's state means for pushes and pulls; `fix` says how to point
/// git-xet elsewhere.
fn dir_finding(state: &DirState, shown: &str, fix: &str, findings: &mut Findings) {
    match state {
        DirState::Store { writable: true } => {}
        DirState::Store { writable: false } | DirState::Empty { writable: false } => findings
            .warn(format!(
                "the endpoint directory {shown} is not writable by you, so pushes will fail"
            ))
            .fix(format!(
                "fix its permissions, or use another endpoint: {fix}"
            )),
        DirState::Empty { writable: true } => {
            findings.note(format!(
                "the endpoint directory {shown} is empty: the first push makes it a store"
            ));
        }
        DirState::Missing => {
            findings.note(format!(
                "the endpoint directory {shown} does not exist yet: the first push creates it \
                 (nothing can be downloaded from it until then)"
            ));
        }
        DirState::OtherVersion(_) | DirState::NotAStore | DirState::NotADirectory => findings
            .warn(format!(
                "the endpoint directory {shown} {}: git-xet can neither push to it nor pull \
                 from it",
                state.why_not_a_store().unwrap_or_default()
            ))
            .fix(format!(
                "point git-xet at a store directory (a new or empty one for a fresh store): \
                 {fix}"
            )),
        DirState::CannotCreate(_) | DirState::Unreadable(_) => findings
            .warn(format!(
                "the endpoint directory {shown} {}: pushes will fail",
                state.why_not_a_store().unwrap_or_default()
            ))
            .fix(format!(
                "fix the path or its permissions, or use another endpoint: {fix}"
            )),
    }
}

/// `GET <endpoint>/v1/lfs-files/<zero oid>` with the token the agent would send (without
/// prompting for one): a 404 means the server accepted it, a 401/403 that it did not.
pub(super) fn probe_endpoint_credential(git: &Git, url: &str) -> CredentialCheck {
    let bare = settings::split_userinfo(url).bare;
    let token = settings::endpoint_token_quiet(git, url);
    let target = format!("{bare}/v1/lfs-files/{}", "0".repeat(64));
    let mut check = CredentialCheck {
        url: redact(&target),
        source: token.as_ref().map(|(_, o)| o.describe().to_string()),
        http_status: None,
        verdict: Verdict::Unknown,
        error: None,
    };
    let client = match probe_client(git, &bare) {
        Ok(c) => c,
        Err(e) => {
            check.error = Some(e);
            return check;
        }
    };
    let mut request = client.get(&target);
    if let Some((t, _)) = &token {
        request = request.bearer_auth(t.expose());
    }
    match client.send(request, 0) {
        Ok(response) => {
            let status = response.status.as_u16();
            check.http_status = Some(status);
            // 404: the server looked the (made-up) oid up, so it accepted the request.
            check.verdict = credential_verdict(status, token.is_some(), true);
            if check.verdict == Verdict::Unknown {
                check.error = Some(format!("HTTP {status}"));
            }
        }
        Err(e) => check.error = Some(error_text(&target, &e, client.proxy_for(&target))),
    }
    check
}

/// A download batch request without objects to the LFS server `lfs_url`, as git-lfs would
/// send it: without a credential first, then with the one git's credential helpers hold (never
/// prompting) if the server asks for one.
pub(super) fn probe_lfs_credential(git: &Git, lfs_url: &str) -> CredentialCheck {
    let split = settings::split_userinfo(lfs_url);
    let target = format!("{}/objects/batch", split.bare.trim_end_matches('/'));
    let mut check = CredentialCheck {
        url: redact(&target),
        source: None,
        http_status: None,
        verdict: Verdict::Unknown,
        error: None,
    };
    let client = match probe_client(git, &split.bare) {
        Ok(c) => c,
        Err(e) => {
            check.error = Some(e);
            return check;
        }
    };
    let send = |auth: Option<(&str, &str)>| {
        let mut r = client
            .post(&target)
            .header("Accept", "application/vnd.git-lfs+json")
            .header("Content-Type", "application/vnd.git-lfs+json")
            .body(r#"{"operation":"download","transfers":["basic"],"objects":[]}"#);
        if let Some((user, password)) = auth {
            r = r.basic_auth(user, Some(password));
        }
        client.send(r, 0).map(|resp| resp.status.as_u16())
    };
    let mut result = send(None);
    if let Ok(401 | 403) = result {
        // git-lfs's order: the URL's password, the netrc file, the credential helpers.
        let credential = split
            .password
            .clone()
            .map(|p| ((String::from("git"), p), "the password in the LFS URL"))
            .or_else(|| {
                settings::netrc_credential(&split.with_user).map(|c| (c, "your netrc file"))
            })
            .or_else(|| {
                settings::stored_credential(git, &split.with_user)
                    .map(|c| (c, "your git credential helper"))
            });
        if let Some(((user, password), source)) = credential {
            check.source = Some(source.into());
            result = send(Some((&user, &password)));
        }
    }
    match result {
        Ok(status) => {
            check.http_status = Some(status);
            // 404 here is "no such repository", which says nothing about the credential.
            check.verdict = credential_verdict(status, check.source.is_some(), false);
            if check.verdict == Verdict::Unknown {
                check.error = Some(format!("HTTP {status}"));
            }
        }
        Err(e) => check.error = Some(error_text(&target, &e, client.proxy_for(&target))),
    }
    check
}

/// The verdict on an answer (`sent`: with a credential; `not_found_ok`: a 404 means the
/// request itself was accepted).
pub(super) fn credential_verdict(status: u16, sent: bool, not_found_ok: bool) -> Verdict {
    let ok = (200..300).contains(&status) || (status == 404 && not_found_ok);
    match (ok, status, sent) {
        (true, _, true) => Verdict::Accepted,
        (true, _, false) => Verdict::NotNeeded,
        (false, 401 | 403, true) => Verdict::Refused,
        (false, 401 | 403, false) => Verdict::Missing,
        _ => Verdict::Unknown,
    }
}

/// A warning when git's settings turn certificate checks off for `url`.
pub(super) fn warn_if_unverified(git: &Git, url: &str, findings: &mut Findings) {
    let bare = settings::split_userinfo(url).bare;
    if bare.starts_with("https://") && !crate::agent::http_settings::http_options(git, &bare).verify
    {
        findings
            .warn(format!(
                "TLS certificates of {} are not checked (http.sslVerify=false or \
                 GIT_SSL_NO_VERIFY): anyone on the network path can read and change transfers",
                redact(&bare)
            ))
            .fix("trust the server's CA instead (`git config --global http.sslCAInfo /path/to/ca.pem`)");
    }
}

/// A client for probing `url` with git's HTTP settings for it (trusted CAs, certificate
/// checks, client certificate, proxy), as the agent's own requests have them, and the probe's
/// short timeout.
pub(super) fn probe_client(
    git: &Git,
    url: &str,
) -> Result<xet_client::remote::OneShotClient, String> {
    let options = crate::agent::http_settings::http_options(git, url);
    xet_client::remote::OneShotClient::for_url(&options, url, PROBE_TIMEOUT, true)
}

/// What a request error says, TLS certificate problems in the words that tell what to do;
/// `proxy`: the proxy the request went through, named when it cannot be reached.
fn error_text(
    url: &str,
    e: &reqwest::Error,
    proxy: Option<&xet_client::remote::proxy::ProxyChoice>,
) -> String {
    if let Some(problem) = xet_client::remote::cert_problem(e) {
        let host = xet_client::url::origin(url)
            .and_then(|o| o.split_once("://").map(|(_, h)| h.to_string()))
            .unwrap_or_default();
        return xet_client::remote::cert_advice(&host, problem);
    }
    if e.is_timeout() {
        format!("no answer within {} s", PROBE_TIMEOUT.as_secs())
    } else if let (true, Some(proxy)) = (e.is_connect(), proxy) {
        format!(
            "cannot connect through the proxy {} (from {}): {}",
            proxy.shown(),
            proxy.source,
            root_cause(e)
        )
    } else if e.is_connect() {
        format!("cannot connect: {}", root_cause(e))
    } else {
        chain_text(e)
    }
}

/// `GET url` with a [`PROBE_TIMEOUT`]: reachable if anything answers over HTTP; a git-xet
/// server's `/health` answers `{"status":"ok","version":…}`.
pub(super) fn probe(git: &Git, url: &str) -> Reachability {
    let start = Instant::now();
    let mut check = Reachability {
        url: redact(url),
        reachable: false,
        http_status: None,
        git_xet_server: false,
        server_version: None,
        millis: 0,
        error: None,
    };
    // `/health` needs no credential: a password in the URL is not sent, and a redirect is
    // an answer, not followed.
    let bare = settings::split_userinfo(url).bare;
    let client = match probe_client(git, &bare) {
        Ok(c) => c,
        Err(e) => {
            check.error = Some(e);
            return check;
        }
    };
    // /health is tiny; no more than 64 KiB of whatever answered is read.
    match client.send(client.get(&bare), 64 << 10) {
        Ok(response) => {
            check.reachable = true;
            let status = response.status;
            check.http_status = Some(status.as_u16());
            if status.is_success() {
                if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&response.body) {
                    if value.get("status").and_then(|s| s.as_str()) == Some("ok") {
                        check.git_xet_server = true;
                        check.server_version = value
                            .get("version")
                            .and_then(|v| v.as_str())
                            .map(String::from);
                    }
                }
            }
        }
        Err(e) => check.error = Some(error_text(&bare, &e, client.proxy_for(&bare))),
    }
    check.millis = start.elapsed().as_millis() as u64;
    check
}
