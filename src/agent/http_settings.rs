//! git's HTTP settings, for the requests git-xet makes itself (the CAS, presigned URLs, token
//! refreshes, `git xet status` probes): what git and git-lfs would trust and use for the same URL.
//!
//! | setting | environment (wins) | meaning |
//! |---|---|---|
//! | `http.sslCAInfo` | `GIT_SSL_CAINFO` | a PEM file of more CAs to trust |
//! | `http.sslCAPath` | `GIT_SSL_CAPATH` | a directory of PEM files of CAs |
//! | `http.sslVerify` | `GIT_SSL_NO_VERIFY` (any value) | `false`: no certificate check (logged as a warning) |
//! | `http.sslCert`, `http.sslKey` | `GIT_SSL_CERT`, `GIT_SSL_KEY` | a client certificate and its key (PEM) |
//! | `http.proxy` | — (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY` apply when it is unset) | the proxy |
//!
//! Every key is read for the request's URL with git's own matching (`git config --get-urlmatch
//! http <url>`), so `http.<url>.sslCAInfo` and the others apply as in git. The system's trust
//! store is always trusted as well (see [`xet_client::HttpOptions`]). Paths may start with
//! `~/`.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::git::Git;
use xet_client::HttpOptions;

/// git's HTTP settings for `url` (see the module documentation). A git that cannot be asked
/// leaves the defaults.
pub(crate) fn http_options(git: &Git, url: &str) -> HttpOptions {
    let config = git
        .output(["config", "--get-urlmatch", "http", url])
        .ok()
        .filter(|o| o.status.success())
        .map(|o| parse_urlmatch(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default();
    let options = from_config(
        &config,
        super::environment::var,
        super::environment::var_os("HOME").map(PathBuf::from),
    );
    if !options.verify {
        tracing::warn!(
            url = %xet_protocol::redact::redact(url),
            "TLS certificates are not checked (http.sslVerify=false or GIT_SSL_NO_VERIFY): \
             anyone on the network path can read and change what is sent"
        );
    }
    options
}

/// The `http.extraheader` headers git sends to `url` (see the module documentation), as
/// (name, value); each value is registered as a secret for [`xet_protocol::redact`] (CI checkouts
/// put credentials there). A git that cannot be asked, or a malformed header, gives none.
pub(crate) fn extra_headers(git: &Git, url: &str) -> Vec<(String, String)> {
    let Some(out) = git
        .output(["config", "-z", "--get-regexp", r"^http\..*extraheader$"])
        .ok()
        .filter(|o| o.status.success())
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut matches: HashMap<String, bool> = HashMap::new();
    let mut headers = Vec::new();
    for entry in text.split('\0').filter(|e| !e.is_empty()) {
        let (key, value) = entry.split_once('\n').unwrap_or((entry, ""));
        let Some(middle) = key
            .strip_prefix("http.")
            .and_then(|k| k.strip_suffix("extraheader"))
        else {
            continue;
        };
        let applies = match middle.strip_suffix('.') {
            None if middle.is_empty() => true,
            None => continue,
            Some(pattern) => *matches
                .entry(pattern.to_string())
                .or_insert_with(|| url_matches(git, pattern, url)),
        };
        if !applies {
            continue;
        }
        if value.is_empty() {
            headers.clear();
            continue;
        }
        if let Some((name, v)) = value.split_once(':') {
            let v = v.trim();
            xet_protocol::redact::register_authorization(v);
            headers.push((name.trim().to_string(), v.to_string()));
        }
    }
    headers
}

/// Whether git's URL matching takes the configuration subsection `pattern` to apply to `url`
/// (asked of git with a key nothing else sets).
fn url_matches(git: &Git, pattern: &str, url: &str) -> bool {
    let probe = format!("http.{pattern}.gitxetprobe=1");
    git.output([
        "-c",
        &probe,
        "config",
        "--get-urlmatch",
        "http.gitxetprobe",
        url,
    ])
    .is_ok_and(|o| o.status.success())
}

/// `git config --get-urlmatch http <url>` output: `http.<key> <value>` lines, keys lowercased.
fn parse_urlmatch(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            let key = key.strip_prefix("http.")?;
            Some((key.to_ascii_lowercase(), value.to_string()))
        })
        .collect()
}

/// The options from config values (`config`, keys without `http.`, lowercase) and the
/// environment (`env`), which wins.
fn from_config(
    config: &HashMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
    home: Option<PathBuf>,
) -> HttpOptions {
    let path = |text: &str| -> Option<PathBuf> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        match (text.strip_prefix("~/"), &home) {
            (Some(rest), Some(home)) => Some(home.join(rest)),
            _ => Some(PathBuf::from(text)),
        }
    };
    let setting = |key: &str, var: &str| -> Option<String> {
        env(var)
            .filter(|v| !v.is_empty())
            .or_else(|| config.get(key).cloned())
    };
    let verify = if env("GIT_SSL_NO_VERIFY").is_some() {
        false
    } else {
        config.get("sslverify").is_none_or(|v| !is_false(v))
    };
    let ca_files = setting("sslcainfo", "GIT_SSL_CAINFO")
        .and_then(|v| path(&v))
        .into_iter()
        .collect();
    let ca_dirs = setting("sslcapath", "GIT_SSL_CAPATH")
        .and_then(|v| path(&v))
        .into_iter()
        .collect();
    let client_cert = setting("sslcert", "GIT_SSL_CERT")
        .and_then(|v| path(&v))
        .map(|cert| {
            let key = setting("sslkey", "GIT_SSL_KEY").and_then(|v| path(&v));
            (cert, key)
        });
    let proxy = config
        .get("proxy")
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .map(|p| {
            // git takes a bare host:port as an HTTP proxy.
            if p.contains("://") {
                p
            } else {
                format!("http://{p}")
            }
        });
    HttpOptions {
        ca_files,
        ca_dirs,
        verify,
        client_cert,
        proxy,
    }
}

/// git's false values (`git config --type=bool`; a key without a value is true).
fn is_false(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "false" | "no" | "off" | "0"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(config: &str, env: &[(&str, &str)]) -> HttpOptions {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_config(
            &parse_urlmatch(config),
            |name| env.get(name).cloned(),
            Some(PathBuf::from("/home/u")),
        )
    }

    #[test]
    fn config_keys_and_their_environment() {
        assert_eq!(options("", &[]), HttpOptions::default());
        let o = options(
            "http.sslcainfo ~/ca.pem\nhttp.sslcapath /etc/cas\nhttp.sslcert /c.pem\n\
             http.sslkey /k.pem\nhttp.proxy proxy.corp:3128\nhttp.extraheader X: y\n",
            &[],
        );
        assert_eq!(o.ca_files, vec![PathBuf::from("/home/u/ca.pem")]);
        assert_eq!(o.ca_dirs, vec![PathBuf::from("/etc/cas")]);
        assert_eq!(
            o.client_cert,
            Some((PathBuf::from("/c.pem"), Some(PathBuf::from("/k.pem"))))
        );
        assert_eq!(o.proxy.as_deref(), Some("http://proxy.corp:3128"));
        assert!(o.verify);
        // The environment wins over the configuration.
        let o = options(
            "http.sslcainfo /config.pem\nhttp.sslverify true\n",
            &[("GIT_SSL_CAINFO", "/env.pem"), ("GIT_SSL_NO_VERIFY", "1")],
        );
        assert_eq!(o.ca_files, vec![PathBuf::from("/env.pem")]);
        assert!(!o.verify);
        for off in ["false", "no", "off", "0"] {
            assert!(
                !options(&format!("http.sslverify {off}\n"), &[]).verify,
                "{off}"
            );
        }
        assert!(options("http.sslverify yes\n", &[]).verify);
        assert!(
            options("http.sslverify\n", &[]).verify,
            "a key without a value is true"
        );
        assert_eq!(
            options("http.proxy https://u:p@proxy:8443\n", &[])
                .proxy
                .as_deref(),
            Some("https://u:p@proxy:8443")
        );
        assert_eq!(options("http.proxy \n", &[]).proxy, None);
    }
}
