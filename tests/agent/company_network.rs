//! Inside a company's network: the server behind a TLS-terminating reverse proxy (nginx) with a
//! certificate from the company's own CA, developers' git told about that CA the usual ways,
//! forward proxies, client certificates. git-xet's own requests (the CAS, presigned URLs, token
//! refreshes, `git xet status`) follow git's `http.*` settings as git-lfs does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::Path;
use std::time::{Duration, Instant};

use common::git::GitEnv;
use common::server::{TestServer, WRITE_TOKEN};
use common::tls::{free_port, nginx, Nginx, Pki};

/// A server whose public URL is nginx's, and nginx in front of it.
fn behind_nginx(pki: &Pki, client_certs: bool) -> (TestServer, Nginx) {
    let bin = nginx();
    let port = free_port();
    let public = format!("https://127.0.0.1:{port}");
    let s = common::server::start_with(move |c| c.public_url = Some(public));
    let backend = s.server.addr.to_string();
    let n = Nginx::start(&bin, pki, port, &backend, client_certs);
    (s, n)
}

/// A company's server behind nginx, with the PKI, the LFS URL and the CA file's path.
struct Site {
    pki: Pki,
    _server: TestServer,
    nginx: Nginx,
    lfs_url: String,
    ca: String,
}

/// A [`Site`] (git, git-lfs and nginx must be there).
fn site(client_certs: bool) -> Site {
    let pki = Pki::new();
    let (server, nginx) = behind_nginx(&pki, client_certs);
    let lfs_url = format!("{}/team/model.git/info/lfs", nginx.url());
    let ca = pki.ca.display().to_string();
    Site {
        pki,
        _server: server,
        nginx,
        lfs_url,
        ca,
    }
}

/// A machine with git-xet installed and `config` set globally.
fn machine(config: &[(&str, &str)]) -> GitEnv {
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    let out = env.run_in(env.path(), "git", &["xet", "install", "--global"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    for (k, v) in config {
        env.git(&env.home(), &["config", "--global", k, v]);
    }
    env
}

/// Pushes `data` as model.bin from a new repository on `env` whose LFS server is `lfs_url`.
fn push(env: &GitEnv, lfs_url: &str, data: &[u8]) -> std::path::PathBuf {
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    std::fs::write(
        work.join(".lfsconfig"),
        format!("[lfs]\n\turl = {lfs_url}\n"),
    )
    .unwrap();
    std::fs::write(work.join("model.bin"), data).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "model"]);
    let out = env.run_in(&work, "git", &["push", "-q", "origin", "main"]);
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), env.agent_log());
    work
}

/// Clones `remote` on `env` (with `extra` variables) and returns model.bin.
fn clone(env: &GitEnv, remote: &Path, name: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let out = env.run_with(
        env.path(),
        "git",
        &["clone", "-q", &remote.display().to_string(), name],
        extra,
    );
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), env.agent_log());
    std::fs::read(env.path().join(name).join("model.bin")).unwrap()
}

#[needs(git_lfs, nginx)]
#[test]
fn push_and_clone_with_the_company_ca_from_git_settings() {
    let site = site(false);
    let (n, lfs_url, ca) = (&site.nginx, &site.lfs_url, &site.ca);
    // 70 MiB: a 64 MiB xorb goes through nginx in one request.
    let data = common::splitmix64(3, 70 << 20);
    let first = machine(&[("http.sslCAInfo", ca)]);
    push(&first, lfs_url, &data);
    let remote = first.path().join("remote.git");

    // The CA from the environment, for one command.
    let second = machine(&[]);
    let got = clone(&second, &remote, "by-env", &[("GIT_SSL_CAINFO", ca)]);
    assert!(got == data, "GIT_SSL_CAINFO");
    // The CA for this server only, with git's URL matching.
    let key = format!("http.{}/.sslCAInfo", n.url());
    let third = machine(&[(&key, ca)]);
    assert!(clone(&third, &remote, "by-url", &[]) == data, "{key}");
    // No certificate was refused along the way (the clones' downloads are ranged GETs of
    // presigned URLs, through nginx).
    let log = first.agent_log() + &second.agent_log() + &third.agent_log();
    assert!(!log.contains("sslCAInfo"), "{log}");
}

#[needs(git_lfs, nginx)]
#[test]
fn without_the_ca_the_agent_refuses_at_once_and_says_what_to_set() {
    let pki = Pki::new();
    let (_s, n) = behind_nginx(&pki, false);
    use xet_client::{RemoteCas, RemoteConfig, TokenSource};
    use xet_protocol::CasTarget;
    let cas = RemoteCas::new(RemoteConfig::new(
        n.url(),
        TokenSource::fixed(Some(WRITE_TOKEN.into())),
    ))
    .unwrap();
    let started = Instant::now();
    let e = cas
        .dedup_query(&xet_format::ChunkHash::from_bytes([7; 32]))
        .unwrap_err()
        .to_string();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "retried for {took:?}: {e}");
    assert!(
        e.contains("127.0.0.1") && e.contains("http.sslCAInfo") && e.contains("not trust"),
        "{e}"
    );
    // With the CA given, the same request goes through (404: no such chunk).
    let mut config = RemoteConfig::new(n.url(), TokenSource::fixed(Some(WRITE_TOKEN.into())));
    config.http.ca_files = vec![pki.ca.clone()];
    let cas = RemoteCas::new(config).unwrap();
    assert_eq!(
        cas.dedup_query(&xet_format::ChunkHash::from_bytes([7; 32]))
            .unwrap(),
        None
    );

    // `git xet status` says the same for the endpoint it probes.
    let env = machine(&[]);
    env.git(env.path(), &["init", "-q", "repo"]);
    let repo = env.path().join("repo");
    env.install_local(&repo, &n.url());
    let out = env.run_in(&repo, "git", &["xet", "status"]);
    let all = out.all();
    assert!(
        all.contains("http.sslCAInfo") && all.contains("127.0.0.1"),
        "{all}"
    );
}

#[needs(git_lfs, nginx)]
#[test]
fn ssl_verify_false_is_honoured_with_a_warning() {
    let site = site(false);
    let lfs_url = &site.lfs_url;
    let env = machine(&[("http.sslVerify", "false")]);
    let data = common::splitmix64(4, 2 << 20);
    let work = push(&env, lfs_url, &data);
    assert!(
        env.agent_log().contains("TLS certificates are not checked"),
        "{}",
        env.agent_log()
    );
    let out = env.run_in(&work, "git", &["xet", "status"]);
    assert!(out.all().contains("are not checked"), "{}", out.all());
}

#[needs(git_lfs)]
#[test]
fn a_forward_proxy_is_used_when_configured_and_bypassed_for_no_proxy() {
    let pki = Pki::new();
    let (_s, n) = behind_nginx(&pki, false);
    let proxy = common::forward_proxy::ForwardProxy::start();
    let lfs_url = format!("{}/team/model.git/info/lfs", n.url());
    let ca = pki.ca.display().to_string();
    let env = machine(&[("http.sslCAInfo", &ca), ("http.proxy", &proxy.url())]);
    let data = common::splitmix64(5, 3 << 20);
    push(&env, &lfs_url, &data);
    let target = format!("127.0.0.1:{}", n.port);
    let through = proxy.seen().iter().filter(|t| **t == target).count();
    assert!(
        through > 0,
        "nothing went through the proxy: {:?}",
        proxy.seen()
    );

    // NO_PROXY names the server: nothing more goes through the proxy.
    let other = machine(&[("http.sslCAInfo", &ca), ("http.proxy", &proxy.url())]);
    let got = clone(
        &other,
        &env.path().join("remote.git"),
        "direct",
        &[("NO_PROXY", "127.0.0.1"), ("no_proxy", "127.0.0.1")],
    );
    assert!(got == data);
    assert_eq!(
        proxy.seen().iter().filter(|t| **t == target).count(),
        through,
        "{:?}",
        proxy.seen()
    );

    // An entry with a port, as git-lfs reads it: that port of the host only.
    let remote = env.path().join("remote.git");
    let with_port = format!("127.0.0.1:{}", n.port);
    let third = machine(&[("http.sslCAInfo", &ca), ("http.proxy", &proxy.url())]);
    let got = clone(&third, &remote, "port", &[("NO_PROXY", &with_port)]);
    assert!(got == data);
    assert_eq!(
        proxy.seen().iter().filter(|t| **t == target).count(),
        through,
        "NO_PROXY={with_port}: {:?}",
        proxy.seen()
    );
    let other_port = format!("127.0.0.1:{}", n.port.wrapping_add(1));
    let fourth = machine(&[("http.sslCAInfo", &ca), ("http.proxy", &proxy.url())]);
    let got = clone(&fourth, &remote, "other-port", &[("NO_PROXY", &other_port)]);
    assert!(got == data);
    assert!(
        proxy.seen().iter().filter(|t| **t == target).count() > through,
        "NO_PROXY={other_port} names another port: {:?}",
        proxy.seen()
    );
}

#[needs(git_lfs, nginx)]
#[test]
fn a_server_that_asks_for_client_certificates_gets_git_s() {
    let site = site(true);
    let (pki, lfs_url, ca) = (&site.pki, &site.lfs_url, &site.ca);
    let (cert, key) = (
        pki.client_cert.display().to_string(),
        pki.client_key.display().to_string(),
    );
    let env = machine(&[
        ("http.sslCAInfo", ca),
        ("http.sslCert", &cert),
        ("http.sslKey", &key),
    ]);
    let data = common::splitmix64(6, 3 << 20);
    push(&env, lfs_url, &data);
    let other = machine(&[
        ("http.sslCAInfo", ca),
        ("http.sslCert", &cert),
        ("http.sslKey", &key),
    ]);
    assert!(clone(&other, &env.path().join("remote.git"), "c", &[]) == data);
}

#[needs(git_lfs, nginx)]
#[test]
fn a_self_signed_server_certificate_in_the_ca_file_is_trusted_as_git_trusts_it() {
    // The server's certificate is its own CA (`openssl req -x509`), and the CA file holds it.
    let pki = Pki::self_signed();
    let (_s, n) = behind_nginx(&pki, false);
    use xet_client::{RemoteCas, RemoteConfig, TokenSource};
    use xet_protocol::CasTarget;
    let chunk = xet_format::ChunkHash::from_bytes([7; 32]);
    // Without it, refused with advice to name the certificate, not to stop checking.
    let cas = RemoteCas::new(RemoteConfig::new(
        n.url(),
        TokenSource::fixed(Some(WRITE_TOKEN.into())),
    ))
    .unwrap();
    let e = cas.dedup_query(&chunk).unwrap_err().to_string();
    assert!(
        e.contains("self-signed") && e.contains("http.sslCAInfo") && !e.contains("sslVerify"),
        "{e}"
    );
    // With it, the request goes through (404: no such chunk).
    let mut config = RemoteConfig::new(n.url(), TokenSource::fixed(Some(WRITE_TOKEN.into())));
    config.http.ca_files = vec![pki.ca.clone()];
    let cas = RemoteCas::new(config).unwrap();
    assert_eq!(cas.dedup_query(&chunk).unwrap(), None);

    // git (through curl) and the agent alike, with `http.sslCAInfo`: a push and a clone.
    let lfs_url = format!("{}/team/model.git/info/lfs", n.url());
    let ca = pki.ca.display().to_string();
    let first = machine(&[("http.sslCAInfo", &ca)]);
    let data = common::splitmix64(6, 3 << 20);
    push(&first, &lfs_url, &data);
    let second = machine(&[("http.sslCAInfo", &ca)]);
    let got = clone(&second, &first.path().join("remote.git"), "clone", &[]);
    assert!(got == data);
    let log = first.agent_log() + &second.agent_log();
    assert!(
        !log.contains("self-signed") && !log.contains("sslCAInfo"),
        "{log}"
    );
}
