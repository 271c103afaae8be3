//! Reading Git LFS objects outside a transfer (`git xet cat`, `git xet mount`): for each object,
//! where its bytes are.
//!
//! In order: the object in `<LFS storage>/objects` (read as it is: git-lfs checked its SHA-256
//! when it stored it); else the remote's endpoint, as a transfer would reach it:
//!
//! - **standalone mode** (`lfs.standalonetransferagent=xet`): the configured endpoint (a `git xet
//!   serve` URL or a store directory), opened as the agent opens it;
//! - **negotiated mode**: the LFS server's batch API, asked for downloads offering `xet` only, with
//!   the credentials git-lfs would send (`http.extraheader`; for an SSH remote the LFS URL and
//!   headers `git-lfs-authenticate` answers; else the password in the URL, the netrc file or
//!   git's credential helpers, never prompting: with the first request when `lfs.<url>.access`
//!   is `basic`, else after a 401); each object's action
//!   names the CAS and its token (refreshed through the action's `href` as in transfers) and the
//!   object's Xet hash. A server that answers with basic transfers only cannot serve ranges:
//!   the error says to fetch the objects first (`git lfs fetch`).
//!
//! The remote's HTTP requests use git's `http.*` settings ([`super::http_settings`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use super::error::TransferError;
use super::protocol::{Action, Operation};
use super::settings::{self, TransferMode};
use super::transfer::{AgentOptions, Lease};
use crate::git::Git;
use xet_format::{FileHash, LfsOid};
use xet_protocol::util::sync::LockAnyway as _;
use xet_protocol::wire::{XET_DOWNLOAD_TRANSFER, XET_TRANSFER};
use xet_protocol::Endpoint;

/// The largest batch answer read (one request asks about a few hundred objects at most).
const MAX_BATCH_ANSWER: usize = 64 << 20;

/// Objects asked about per batch request.
const BATCH_OBJECTS: usize = 100;

/// Where an object's bytes are.
#[derive(Clone)]
pub(crate) enum ObjectLocation {
    /// A complete local copy.
    Local(PathBuf),
    /// A file of an endpoint.
    Remote {
        file: FileHash,
        endpoint: EndpointHandle,
    },
    /// The LFS server answered for the object with an error other than "not found" (for
    /// example, its copy is damaged): its message, as the server wrote it. Not remembered, so
    /// that the next open asks again.
    Refused(String),
}

/// How objects are downloaded ([`ObjectReader::download_actions`]).
pub(crate) enum Actions {
    /// Standalone mode: the agent's configured endpoint, no action.
    Standalone,
    /// Negotiated mode: per object, the LFS server's download action or its refusal.
    Negotiated(HashMap<LfsOid, Result<Action, String>>),
    /// The LFS server does not offer the xet transfer.
    NotXet,
}

/// An endpoint objects are read from, shared by everything that reads it.
#[derive(Clone)]
pub(crate) struct EndpointHandle(Arc<Lease>);

impl EndpointHandle {
    pub fn get(&self) -> &dyn Endpoint {
        self.0.get()
    }
}

/// Finds where objects of one remote are (see the module documentation).
pub(crate) struct ObjectReader {
    git: Git,
    /// The remote's name, for the token refreshes of its CAS (an SSH remote authenticates
    /// them).
    remote: String,
    objects: Option<PathBuf>,
    route: Route,
    found: Mutex<HashMap<LfsOid, ObjectLocation>>,
}

enum Route {
    Standalone(EndpointHandle),
    Negotiated {
        lfs_url: String,
        client: xet_client::remote::OneShotClient,
        /// git's `http.extraheader` headers for the LFS URL, sent with every batch request as
        /// git-lfs sends them (CI checkouts authenticate so).
        extra_headers: Vec<(String, String)>,
        /// An SSH remote's `git-lfs-authenticate` headers, renewed when they expire.
        ssh: Option<Box<SshSession>>,
        /// `lfs.<url>.access` of the LFS URL: whether credentials go with the first request.
        access: settings::AccessMode,
        /// One endpoint per CAS URL.
        endpoints: Mutex<HashMap<String, EndpointHandle>>,
    },
}

/// The headers `git-lfs-authenticate` answered for an SSH remote, and when they expire.
struct SshSession {
    remote: super::ssh_auth::SshRemote,
    answer: Mutex<SshHeaders>,
}

/// The headers of one answer of `git-lfs-authenticate` and when they expire (`None`: never).
struct SshHeaders {
    headers: Vec<(String, String)>,
    expires: Option<std::time::Instant>,
}

impl SshHeaders {
    fn of(answer: super::ssh_auth::SshAuth) -> Self {
        let expires = expiry(&answer);
        Self {
            headers: answer.header.into_iter().collect(),
            expires,
        }
    }
}

impl SshSession {
    fn new(remote: super::ssh_auth::SshRemote, answer: super::ssh_auth::SshAuth) -> Self {
        Self {
            remote,
            answer: Mutex::new(SshHeaders::of(answer)),
        }
    }

    /// The headers, `git-lfs-authenticate` run again when they expire within 5 s (as git-lfs's
    /// cache of its answers does).
    fn headers(&self, git: &Git) -> Result<Vec<(String, String)>, TransferError> {
        let mut answer = self.answer.lock_anyway();
        let expired = answer.expires.is_some_and(|at| {
            at.saturating_duration_since(std::time::Instant::now())
                < std::time::Duration::from_secs(5)
        });
        if expired {
            let fresh = super::ssh_auth::authenticate(
                &settings::ssh_settings(git),
                &self.remote,
                Operation::Download,
                git.dir(),
            )
            .map_err(|e| TransferError::BatchRefused(e.to_string()))?;
            *answer = SshHeaders::of(fresh);
        }
        Ok(answer.headers.clone())
    }
}

/// When an answer of `git-lfs-authenticate` expires: `expires_in` seconds from now; `None`
/// (kept for the whole command, as git-lfs keeps an answer without expiry) otherwise.
fn expiry(answer: &super::ssh_auth::SshAuth) -> Option<std::time::Instant> {
    answer
        .expires_in
        .filter(|s| *s > 0)
        .map(|s| std::time::Instant::now() + std::time::Duration::from_secs(s as u64))
}

/// A batch answer, as far as it is read here.
#[derive(Debug, Deserialize)]
struct BatchAnswer {
    #[serde(default)]
    transfer: Option<String>,
    #[serde(default)]
    objects: Vec<BatchObject>,
}

impl BatchAnswer {
    /// Whether the server chose one of the xet transfers.
    fn is_xet(&self) -> bool {
        matches!(
            self.transfer.as_deref(),
            Some(XET_DOWNLOAD_TRANSFER | XET_TRANSFER)
        )
    }
}

#[derive(Debug, Deserialize)]
struct BatchObject {
    oid: String,
    #[serde(default)]
    actions: Option<BatchActions>,
    #[serde(default)]
    error: Option<BatchError>,
}

#[derive(Debug, Deserialize)]
struct BatchActions {
    download: Option<Action>,
}

#[derive(Debug, Deserialize)]
struct BatchError {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

impl ObjectReader {
    /// The reader for `remote` (default: the remote git-lfs would use, usually `origin`) of the
    /// repository `git` is in.
    pub fn open(git: &Git, remote: Option<&str>) -> Result<Self, TransferError> {
        let objects = git.common_dir().ok().and_then(|common| {
            settings::lfs_temp_dir_in(git, &common)
                .ok()
                .map(|tmp| settings::objects_beside(&tmp))
        });
        let remote_name = remote.unwrap_or("origin").to_string();
        let endpoints = settings::lfs_env_endpoints(git);
        let remotes = settings::remotes(git);
        let lfs_url = settings::lfs_url_of(&endpoints, &remotes, &remote_name).or_else(|| {
            endpoints
                .iter()
                .find(|(r, _)| r.is_none())
                .map(|(_, u)| u.clone())
        });
        let route = match settings::transfer_mode(git, lfs_url.as_deref()) {
            TransferMode::Standalone => {
                let options = AgentOptions::in_dir(git.dir().unwrap_or(Path::new(".")));
                let lease = super::transfer::open_standalone(
                    options,
                    Some(&remote_name),
                    Operation::Download,
                )?;
                Route::Standalone(EndpointHandle(Arc::new(lease)))
            }
            _ => {
                let Some(lfs_url) = lfs_url else {
                    return Err(TransferError::Setup(format!(
                        "the remote {remote_name:?} has no Git LFS URL (no such remote, or \
                         `git lfs env` cannot tell): add the remote, or set `lfs.url`"
                    )));
                };
                let access = settings::lfs_access(git, &lfs_url);
                // An SSH remote: git-lfs-authenticate names the LFS URL and its headers.
                let mut ssh_session = None;
                let mut lfs_url = lfs_url;
                if let Some(ssh) = settings::ssh_remote(git, &remote_name, &lfs_url) {
                    match super::ssh_auth::authenticate(
                        &settings::ssh_settings(git),
                        &ssh,
                        Operation::Download,
                        git.dir(),
                    ) {
                        Ok(answer) => {
                            if !answer.href.is_empty() {
                                lfs_url = answer.href.trim_end_matches('/').to_string();
                            }
                            ssh_session = Some(Box::new(SshSession::new(ssh, answer)));
                        }
                        // git-lfs keeps the guessed https URL when the server has no
                        // git-lfs-authenticate.
                        Err(e) if e.is_unavailable() => {
                            tracing::info!(
                                "{e}; asking {} without SSH credentials",
                                xet_protocol::redact::redact(&lfs_url)
                            );
                        }
                        Err(e) => return Err(TransferError::BatchRefused(e.to_string())),
                    }
                }
                let options = super::http_settings::http_options(git, &lfs_url);
                let client = xet_client::remote::OneShotClient::for_url(
                    &options,
                    &lfs_url,
                    std::time::Duration::from_secs(60),
                    true,
                )
                .map_err(|e| TransferError::Setup(format!("LFS server {lfs_url}: {e}")))?;
                let extra_headers = super::http_settings::extra_headers(git, &lfs_url);
                Route::Negotiated {
                    lfs_url,
                    client,
                    extra_headers,
                    ssh: ssh_session,
                    access,
                    endpoints: Mutex::new(HashMap::new()),
                }
            }
        };
        Ok(Self {
            git: git.clone(),
            remote: remote_name,
            objects,
            route,
            found: Mutex::new(HashMap::new()),
        })
    }

    /// The local copy of `oid`, if `<LFS storage>/objects` holds one of `size` bytes.
    pub(crate) fn local_copy(&self, oid: &LfsOid, size: u64) -> Option<PathBuf> {
        let path = xet_client::object_chunks::object_path(self.objects.as_ref()?, oid);
        let meta = std::fs::metadata(&path).ok()?;
        (meta.is_file() && meta.len() == size).then_some(path)
    }

    /// Where each of `objects` (oid, size) is; objects the remote does not have are missing
    /// from the answer. Asks the remote only about objects without a local copy, in batches.
    pub(crate) fn locate(
        &self,
        objects: &[(LfsOid, u64)],
    ) -> Result<HashMap<LfsOid, ObjectLocation>, TransferError> {
        let mut out = HashMap::new();
        let mut wanted = Vec::new();
        {
            let found = self.found.lock_anyway();
            for (oid, size) in objects {
                if let Some(path) = self.local_copy(oid, *size) {
                    out.insert(*oid, ObjectLocation::Local(path));
                } else if let Some(known) = found.get(oid) {
                    out.insert(*oid, known.clone());
                } else {
                    wanted.push((*oid, *size));
                }
            }
        }
        let mut learned = HashMap::new();
        match &self.route {
            Route::Standalone(lease) => {
                for (oid, size) in wanted {
                    let located =
                        lease
                            .get()
                            .locate_oid(&oid)
                            .map_err(|e| TransferError::LookupFailed {
                                oid,
                                endpoint: lease.get().describe(),
                                source: Box::new(e),
                            })?;
                    if let Some((file, stored)) = located {
                        if stored == size {
                            learned.insert(
                                oid,
                                ObjectLocation::Remote {
                                    file,
                                    endpoint: lease.clone(),
                                },
                            );
                        }
                    }
                }
            }
            Route::Negotiated {
                lfs_url,
                client,
                endpoints,
                ..
            } => {
                for batch in wanted.chunks(BATCH_OBJECTS) {
                    self.ask_batch(lfs_url, client, endpoints, batch, &mut learned)?;
                }
            }
        }
        let mut found = self.found.lock_anyway();
        for (oid, location) in learned {
            if !matches!(location, ObjectLocation::Refused(_)) {
                found.insert(oid, location.clone());
            }
            out.insert(oid, location);
        }
        Ok(out)
    }

    /// One download batch request for `objects`, offering `xet` only.
    fn ask_batch(
        &self,
        lfs_url: &str,
        client: &xet_client::remote::OneShotClient,
        endpoints: &Mutex<HashMap<String, EndpointHandle>>,
        objects: &[(LfsOid, u64)],
        learned: &mut HashMap<LfsOid, ObjectLocation>,
    ) -> Result<(), TransferError> {
        let answer = self.batch(lfs_url, client, objects)?;
        if !answer.is_xet() {
            return Err(TransferError::Setup(format!(
                "the LFS server {} does not offer the xet transfer, so objects cannot be read \
                 in part: fetch them first (`git lfs fetch`), then they are read locally",
                xet_protocol::redact::redact(&settings::split_userinfo(lfs_url).bare)
            )));
        }
        for object in answer.objects {
            self.learn(object, endpoints, learned)?;
        }
        Ok(())
    }

    /// How a transfer agent downloads each of `objects`: `Ok(None)` in standalone mode (the
    /// agent needs no action: its endpoint is configured); in negotiated mode, per object the
    /// LFS server's download action, or its refusal (objects it does not have are missing
    /// from the map). `Err(NotXet)` (as [`Actions::NotXet`]) when the LFS server does not
    /// offer the xet transfer.
    pub(crate) fn download_actions(
        &self,
        objects: &[(LfsOid, u64)],
    ) -> Result<Actions, TransferError> {
        let Route::Negotiated {
            lfs_url, client, ..
        } = &self.route
        else {
            return Ok(Actions::Standalone);
        };
        let mut out = HashMap::new();
        for batch in objects.chunks(BATCH_OBJECTS) {
            let answer = self.batch(lfs_url, client, batch)?;
            if !answer.is_xet() {
                return Ok(Actions::NotXet);
            }
            for object in answer.objects {
                let Ok(oid) = LfsOid::from_hex(&object.oid) else {
                    continue;
                };
                if let Some(e) = object.error {
                    let message = xet_protocol::redact::clip(&e.message, 1024).into_owned();
                    out.insert(oid, Err(format!("{} ({})", message, e.code)));
                } else if let Some(action) = object.actions.and_then(|a| a.download) {
                    out.insert(oid, Ok(action));
                }
            }
        }
        Ok(Actions::Negotiated(out))
    }

    /// One download batch request for `objects`, offering the xet transfers only: the answer.
    fn batch(
        &self,
        lfs_url: &str,
        client: &xet_client::remote::OneShotClient,
        objects: &[(LfsOid, u64)],
    ) -> Result<BatchAnswer, TransferError> {
        let split = settings::split_userinfo(lfs_url);
        let body = serde_json::json!({
            "operation": "download",
            // The download transfer of git-xet's agent, and the older name servers of
            // git-xet answered for downloads before it.
            "transfers": [XET_DOWNLOAD_TRANSFER, XET_TRANSFER],
            "objects": objects
                .iter()
                .map(|(oid, size)| serde_json::json!({"oid": oid.to_hex(), "size": size}))
                .collect::<Vec<_>>(),
        })
        .to_string();
        let (extra, access) = match &self.route {
            Route::Negotiated {
                extra_headers,
                access,
                ssh,
                ..
            } => {
                let ssh_headers = match ssh {
                    Some(s) => s.headers(&self.git)?,
                    None => Vec::new(),
                };
                // git-lfs sets the SSH answer's headers on the request, then git's extra
                // headers; one name is sent once, the SSH answer's value winning.
                let mut extra = extra_headers.clone();
                extra.retain(|(name, _)| {
                    !ssh_headers
                        .iter()
                        .any(|(n, _)| n.eq_ignore_ascii_case(name))
                });
                extra.extend(ssh_headers);
                (extra, *access)
            }
            Route::Standalone(_) => (Vec::new(), settings::AccessMode::None),
        };
        let request = super::batch_request::BatchRequest {
            git: &self.git,
            url: &split,
            extra: &extra,
            access,
            max_answer: MAX_BATCH_ANSWER,
        };
        let target = request.target();
        let failed = |e: String| {
            TransferError::Setup(format!(
                "the LFS server {} cannot be asked about objects: {e}",
                xet_protocol::redact::redact(&split.bare)
            ))
        };
        let describe = |e: &reqwest::Error| {
            xet_client::remote::cert_problem(e)
                .map(|p| {
                    let host = xet_client::url::origin(&target)
                        .and_then(|o| o.split_once("://").map(|(_, h)| h.to_string()))
                        .unwrap_or_default();
                    xet_client::remote::cert_advice(&host, p)
                })
                .unwrap_or_else(|| xet_protocol::util::error::chain_text(e))
        };
        let response = request
            .send(client, &body)
            .map_err(|e| failed(describe(&e)))?;
        let status = response.status;
        if matches!(status.as_u16(), 401 | 403) {
            return Err(TransferError::BatchRefused(format!(
                "the LFS server {} refused git-xet's request (HTTP {status}): store the \
                 credential with `git credential approve`, or run `git lfs fetch` once so that \
                 your credential helper keeps it",
                xet_protocol::redact::redact(&split.bare)
            )));
        }
        if !status.is_success() {
            return Err(failed(format!(
                "HTTP {status}{}",
                if matches!(status.as_u16(), 401 | 403) {
                    " (store the credential with `git credential approve`, or run `git lfs \
                     fetch` once so that your credential helper keeps it)"
                } else {
                    ""
                }
            )));
        }
        serde_json::from_slice(&response.body)
            .map_err(|e| failed(format!("its batch answer does not parse: {e}")))
    }

    /// What one object of a batch answer says: refused (any error but 404), or where it is (its
    /// Xet file and the endpoint of its CAS URL, connected once per URL).
    fn learn(
        &self,
        object: BatchObject,
        endpoints: &Mutex<HashMap<String, EndpointHandle>>,
        learned: &mut HashMap<LfsOid, ObjectLocation>,
    ) -> Result<(), TransferError> {
        let Ok(oid) = LfsOid::from_hex(&object.oid) else {
            return Ok(());
        };
        if let Some(e) = object.error {
            tracing::debug!(%oid, code = e.code, "the LFS server has no object: {}", e.message);
            if e.code != 404 {
                let message = xet_protocol::redact::clip(&e.message, 1024).into_owned();
                learned.insert(oid, ObjectLocation::Refused(message));
            }
            return Ok(());
        }
        let Some(action) = object.actions.and_then(|a| a.download) else {
            return Ok(());
        };
        let Some(file) = action
            .header("X-Xet-Hash")
            .and_then(|h| FileHash::from_hex(h).ok())
        else {
            return Ok(());
        };
        let cas = action
            .header("X-Xet-Cas-Url")
            .unwrap_or_default()
            .to_string();
        let mut known = endpoints.lock_anyway();
        let endpoint = match known.get(&cas) {
            Some(e) => e.clone(),
            None => {
                let e = EndpointHandle(Arc::new(Lease::Shared(
                    super::transfer::connect_negotiated(
                        &self.git,
                        &action,
                        Operation::Download,
                        Some(self.remote.as_str()),
                    )?,
                )));
                known.insert(cas, e.clone());
                e
            }
        };
        learned.insert(oid, ObjectLocation::Remote { file, endpoint });
        Ok(())
    }

    /// A description of where objects come from, for messages.
    pub fn describe(&self) -> String {
        match &self.route {
            Route::Standalone(lease) => lease.get().describe(),
            Route::Negotiated { lfs_url, .. } => xet_protocol::redact::redact(lfs_url),
        }
    }
}
