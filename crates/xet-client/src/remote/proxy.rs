//! Which proxy a request goes through ([`ProxyRules`]), decided here rather than by reqwest so
//! that `NO_PROXY` means what it means to git-lfs, and so that a failure can name the proxy.
//!
//! - The proxy: git's `http.proxy` (for the URL, with git's matching) for every scheme; when it
//!   is unset, the environment as curl reads it: `HTTPS_PROXY` for https URLs, `HTTP_PROXY` for
//!   http ones, `ALL_PROXY` for both when the other is unset (each in upper or lower case). A
//!   proxy without a scheme is an http proxy.
//! - The exceptions, `NO_PROXY` (or `no_proxy`), comma-separated, matched as git-lfs matches
//!   them (Go's `httpproxy` rules): `*` is every host; an IP address or a CIDR block matches
//!   addresses; a name matches itself and its subdomains (`.example.com` and `*.example.com`
//!   its subdomains only); an entry with a port (`127.0.0.1:18498`, `[::1]:8080`,
//!   `example.com:443`) only that port of the host, where a URL without a port has its
//!   scheme's. reqwest's own matching compares host names only, so an entry with a port never
//!   matched and the request went through the proxy git-lfs went around.

use std::net::IpAddr;

/// One `NO_PROXY` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Exception {
    /// `*`.
    All,
    /// An address, and the port it is limited to.
    Ip(IpAddr, Option<u16>),
    /// A CIDR block.
    Block(IpAddr, u8),
    /// A name: `suffix` starts with a dot; `itself`: the name without the dot matches too.
    Name {
        suffix: String,
        itself: bool,
        port: Option<u16>,
    },
}

impl Exception {
    /// The entry `text` (trimmed, lowercase); `None` for what is not an entry.
    fn parse(text: &str) -> Option<Self> {
        if text.is_empty() {
            return None;
        }
        if text == "*" {
            return Some(Self::All);
        }
        if let Some((addr, bits)) = text.split_once('/') {
            let addr: IpAddr = addr.parse().ok()?;
            let bits: u8 = bits.parse().ok()?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            return (bits <= max).then_some(Self::Block(addr, bits));
        }
        let (host, port) = split_port(text)?;
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(Self::Ip(ip, port));
        }
        let host = host.strip_prefix('*').unwrap_or(host);
        if host.is_empty() || host == "." {
            return None;
        }
        let (suffix, itself) = match host.strip_prefix('.') {
            Some(_) => (host.to_string(), false),
            None => (format!(".{host}"), true),
        };
        Some(Self::Name {
            suffix,
            itself,
            port,
        })
    }

    /// Whether it names `host` (lowercase, IPv6 without brackets) at `port`.
    fn matches(&self, host: &str, port: Option<u16>) -> bool {
        let port_ok = |wanted: &Option<u16>| wanted.is_none() || *wanted == port;
        match self {
            Self::All => true,
            Self::Ip(ip, wanted) => host.parse::<IpAddr>().ok() == Some(*ip) && port_ok(wanted),
            Self::Block(net, bits) => host
                .parse::<IpAddr>()
                .is_ok_and(|ip| in_block(ip, *net, *bits)),
            Self::Name {
                suffix,
                itself,
                port: wanted,
            } => {
                let named = host.ends_with(suffix.as_str()) || (*itself && host == &suffix[1..]);
                named && port_ok(wanted)
            }
        }
    }
}

/// `host` and its port from `host`, `host:port`, `[v6]` or `[v6]:port`; a bare IPv6 address
/// has no port. `None` when the port is not a number.
fn split_port(text: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match text.split_once(':') {
        Some((host, port)) if !port.contains(':') => Some((host, Some(port.parse().ok()?))),
        _ => Some((text, None)),
    }
}

/// Whether `ip` is in the block `net`/`bits`.
fn in_block(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let prefix = |a: &[u8], b: &[u8]| {
        let (whole, rest) = (usize::from(bits / 8), bits % 8);
        a.get(..whole) == b.get(..whole)
            && (rest == 0 || {
                let mask = 0xffu8 << (8 - rest);
                a.get(whole).map(|x| x & mask) == b.get(whole).map(|x| x & mask)
            })
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => prefix(&a.octets(), &b.octets()),
        (IpAddr::V6(a), IpAddr::V6(b)) => prefix(&a.octets(), &b.octets()),
        _ => false,
    }
}

/// A proxy, and the setting that named it.
#[derive(Debug, Clone)]
pub struct ProxyChoice {
    pub url: reqwest::Url,
    /// `http.proxy`, `HTTPS_PROXY`, …
    pub source: &'static str,
}

impl ProxyChoice {
    /// The proxy's URL as shown to users: without its password, nor a path or query.
    pub fn shown(&self) -> String {
        let mut u = self.url.clone();
        if u.password().is_some() {
            let _ = u.set_password(Some("***"));
        }
        u.set_query(None);
        let text = u.as_str().trim_end_matches('/').to_string();
        xet_protocol::redact::redact(&text)
    }
}

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct ProxyRules {
    http: Option<ProxyChoice>,
    https: Option<ProxyChoice>,
    exceptions: Vec<Exception>,
}

/// `text` as a proxy URL (`http://` when it names no scheme); its password is registered for
/// redaction.
fn proxy_url(text: &str, source: &'static str) -> Result<ProxyChoice, String> {
    let with_scheme = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let url = reqwest::Url::parse(&with_scheme)
        .ok()
        .filter(|u| u.host_str().is_some())
        .ok_or_else(|| {
            format!(
                "{source} {:?} is not a proxy URL",
                xet_protocol::redact::redact(text)
            )
        })?;
    if let Some(password) = url.password() {
        xet_protocol::redact::register_secret(password);
    }
    Ok(ProxyChoice { url, source })
}

impl ProxyRules {
    /// The rules for git's `http.proxy` (`configured`) and the environment (`env`, looked up
    /// by name). A proxy setting that is not a URL is an error naming it.
    pub fn new(
        configured: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let var = |names: &[&'static str]| {
            names
                .iter()
                .find_map(|&n| env(n).filter(|v| !v.trim().is_empty()).map(|v| (n, v)))
        };
        let choose = |names: &[&'static str]| -> Result<Option<ProxyChoice>, String> {
            var(names)
                .map(|(name, value)| proxy_url(value.trim(), name))
                .transpose()
        };
        let (http, https) = match configured.map(str::trim).filter(|p| !p.is_empty()) {
            Some(p) => {
                let choice = proxy_url(p, "http.proxy")?;
                (Some(choice.clone()), Some(choice))
            }
            None => (
                choose(&["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"])?,
                choose(&["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"])?,
            ),
        };
        let exceptions = var(&["NO_PROXY", "no_proxy"])
            .map(|(_, list)| {
                list.split(',')
                    .filter_map(|e| Exception::parse(&e.trim().to_ascii_lowercase()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            http,
            https,
            exceptions,
        })
    }

    /// Whether no request goes through a proxy.
    pub fn is_empty(&self) -> bool {
        self.http.is_none() && self.https.is_none()
    }

    /// The proxy a request to `url` goes through, if any.
    pub fn proxy_for(&self, url: &reqwest::Url) -> Option<&ProxyChoice> {
        let choice = match url.scheme() {
            "https" => self.https.as_ref()?,
            "http" => self.http.as_ref()?,
            _ => return None,
        };
        let host = url.host_str()?.to_ascii_lowercase();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = url.port_or_known_default();
        if self.exceptions.iter().any(|e| e.matches(host, port)) {
            return None;
        }
        Some(choice)
    }

    /// The proxy a request to `url` (text) goes through, if any.
    pub fn proxy_for_str(&self, url: &str) -> Option<&ProxyChoice> {
        reqwest::Url::parse(url)
            .ok()
            .and_then(|u| self.proxy_for(&u))
    }

    /// These rules for a reqwest client: `None` when nothing is proxied.
    pub(crate) fn to_reqwest(&self) -> Option<reqwest::Proxy> {
        if self.is_empty() {
            return None;
        }
        let rules = self.clone();
        Some(reqwest::Proxy::custom(move |url| {
            rules.proxy_for(url).map(|c| c.url.clone())
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(configured: Option<&str>, vars: &[(&str, &str)]) -> ProxyRules {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ProxyRules::new(configured, |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .unwrap()
    }

    fn via(r: &ProxyRules, url: &str) -> Option<String> {
        r.proxy_for_str(url).map(|c| c.url.to_string())
    }

    #[test]
    fn no_proxy_entries_with_a_port_name_that_port_only() {
        let r = rules(
            Some("http://proxy.test:3128"),
            &[("NO_PROXY", "127.0.0.1:18498, [::1]:8080,example.com:443")],
        );
        let proxy = Some("http://proxy.test:3128/".to_string());
        assert_eq!(via(&r, "http://127.0.0.1:18498/x"), None);
        assert_eq!(via(&r, "http://127.0.0.1:18499/x"), proxy);
        assert_eq!(via(&r, "http://[::1]:8080/"), None);
        assert_eq!(via(&r, "http://[::1]:8081/"), proxy);
        // A URL without a port has its scheme's.
        assert_eq!(via(&r, "https://example.com/"), None);
        assert_eq!(via(&r, "https://cdn.example.com/"), None);
        assert_eq!(via(&r, "http://example.com/"), proxy);
    }

    #[test]
    fn no_proxy_entries_as_git_lfs_reads_them() {
        let r = rules(
            None,
            &[
                ("HTTPS_PROXY", "proxy.test:3128"),
                (
                    "no_proxy",
                    " Example.org ,.internal.test,*.corp.test, 10.0.0.0/8,fd00::/8,::1",
                ),
            ],
        );
        let proxy = Some("http://proxy.test:3128/".to_string());
        for direct in [
            "https://example.org/",
            "https://a.example.org:8443/",
            "https://x.internal.test/",
            "https://y.corp.test/",
            "https://10.1.2.3/",
            "https://[fd00::1]/",
            "https://[::1]:9/",
        ] {
            assert_eq!(via(&r, direct), None, "{direct}");
        }
        for proxied in [
            "https://notexample.org/",
            "https://internal.test/",
            "https://corp.test/",
            "https://11.1.2.3/",
            "https://[fe80::1]/",
        ] {
            assert_eq!(via(&r, proxied), proxy, "{proxied}");
        }
        // HTTPS_PROXY is for https URLs only.
        assert_eq!(via(&r, "http://elsewhere.test/"), None);
        assert_eq!(
            via(
                &rules(None, &[("NO_PROXY", "*"), ("ALL_PROXY", "p:1")]),
                "http://a/"
            ),
            None
        );
    }

    #[test]
    fn where_the_proxy_comes_from() {
        let env = [
            ("HTTP_PROXY", "http://h.test:1"),
            ("https_proxy", "http://s.test:2"),
            ("ALL_PROXY", "http://a.test:3"),
        ];
        let r = rules(None, &env);
        let source = |url: &str| r.proxy_for_str(url).map(|c| c.source);
        assert_eq!(source("http://x/"), Some("HTTP_PROXY"));
        assert_eq!(source("https://x/"), Some("https_proxy"));
        let r = rules(None, &[("ALL_PROXY", "http://a.test:3")]);
        assert_eq!(
            r.proxy_for_str("https://x/").map(|c| c.source),
            Some("ALL_PROXY")
        );
        // git's setting wins over the environment, for both schemes.
        let r = rules(Some("http://git.test:4"), &env);
        assert_eq!(
            r.proxy_for_str("https://x/").map(|c| c.source),
            Some("http.proxy")
        );
        assert!(rules(None, &[("HTTP_PROXY", " ")]).is_empty());
        assert!(ProxyRules::new(Some("http://"), |_| None).is_err());
    }

    #[test]
    fn a_proxy_is_shown_without_its_password() {
        let r = rules(Some("http://user:s3cret-proxy-pw@proxy.test:3128"), &[]);
        let shown = r.proxy_for_str("https://x/").unwrap().shown();
        assert_eq!(shown, "http://user:***@proxy.test:3128");
        assert!(!xet_protocol::redact::redact("s3cret-proxy-pw").contains("s3cret"));
    }
}
