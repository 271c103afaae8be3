//! Saying when a push's LFS objects went without git-xet (`git xet push-summary --refs … --state
//! …`, run by the pre-push hook before git-lfs's own pre-push).
//!
//! When the LFS server does not offer the `xet` transfer, git-lfs uploads with `basic` and never
//! starts the agent: nothing is journalled, and the push says nothing about git-xet. Whether
//! git-lfs will upload anything, and with which transfer, is only knowable before it does (once
//! it has, the server has every object either way), so the hook asks first, in one bounded step:
//!
//! 1. the LFS objects the push carries, as git-lfs selects them: the pointers among the objects
//!    of the pushed commits that the remote's refs (and the remote-tracking refs of the remote)
//!    do not reach (`git rev-list --objects`), read in-process;
//! 2. why git-lfs would not use git-xet, as far as configuration tells: git-xet not registered
//!    (`lfs.customtransfer.xet.path`), `lfs.customtransfer.xet.direction=download`, or
//!    `lfs.basictransfersonly`;
//! 3. one upload batch request per 100 objects to the remote's LFS server, offering `basic` and
//!    `xet` as git-lfs would, with the credential git's helpers hold (never prompting): which
//!    objects the server lacks (those with an upload action) and whether it chose `xet`.
//!
//! When the server lacks some of the objects and git-lfs will not use git-xet for them (the
//! server chose `basic`, or the configuration keeps git-xet out), the step writes the state file:
//! how many objects and bytes, and why. After git-lfs's pre-push succeeded, `push-summary
//! --state` prints its one line when the journal shows no upload of git-xet for the push.
//!
//! Only negotiated mode is considered (standalone pushes go through the agent, which journals
//! them). Anything in doubt (a remote given as a URL, no LFS URL, a server that does not answer
//! within the time allowed, a refused credential, an answer that does not parse) writes no state,
//! so no line is printed; nothing here ever fails the push.

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::agent::settings::{self, TransferMode};
use crate::git::Git;
use xet_format::pointer::{Pointer, MAX_POINTER_LEN};
use xet_protocol::util::size::format_size;
use xet_protocol::wire::XET_TRANSFER;

/// How long the whole check before git-lfs's pre-push may take; past it, nothing is said.
pub(crate) const CHECK_TIME: Duration = Duration::from_secs(10);

/// Objects asked about per batch request (git-lfs's own batch size).
const BATCH_OBJECTS: usize = 100;

/// The largest batch answer read.
const MAX_ANSWER: usize = 16 << 20;

/// What the state file holds: the push's LFS objects git-lfs will upload without git-xet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WithoutXet {
    /// Objects the LFS server lacked.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Why git-xet is not used, and what to do: one clause.
    pub why: String,
}

/// The line the hook prints after the push.
pub(crate) fn line(w: &WithoutXet) -> String {
    format!(
        "git-xet: git-lfs uploaded {} LFS object{} ({}) without git-xet, so without \
         deduplication: {}",
        w.objects,
        if w.objects == 1 { "" } else { "s" },
        format_size(w.bytes),
        w.why
    )
}

/// The check before the push (see the module documentation), in `dir`, for the push to
/// `remote` of the ref updates `refs` (the pre-push hook's standard input): `Some` when git-lfs
/// will upload objects without git-xet. Gives up (`None`) at `deadline`.
pub(crate) fn check(dir: &Path, remote: &str, refs: &str, deadline: Instant) -> Option<WithoutXet> {
    let git = Git::in_dir(dir);
    let remotes = settings::remotes(&git);
    if !remotes.iter().any(|r| r.name == remote) {
        return None;
    }
    let endpoints = settings::lfs_env_endpoints(&git);
    let lfs_url = settings::lfs_url_of(&endpoints, &remotes, remote)?;
    if !lfs_url.starts_with("http://") && !lfs_url.starts_with("https://") {
        return None;
    }
    if settings::transfer_mode(&git, Some(&lfs_url)) != TransferMode::Negotiated {
        return None;
    }
    let pointers = pushed_pointers(dir, remote, refs, deadline)?;
    if pointers.is_empty() {
        return None;
    }
    let local = local_reason(&git);
    let (offered, objects, bytes) = ask_server(&git, &lfs_url, &pointers, deadline)?;
    if objects == 0 {
        return None;
    }
    let why = if !offered {
        format!(
            "the LFS server {} does not offer Xet. Push to a server that does (`git xet \
             serve`), or use standalone mode (`git xet install --local --endpoint URL-or-DIR`); \
             see `git xet status`",
            xet_protocol::redact::redact(&settings::split_userinfo(&lfs_url).bare)
        )
    } else {
        local?
    };
    Some(WithoutXet {
        objects,
        bytes,
        why,
    })
}

/// Why git-lfs would not use git-xet whatever the server offers, from the configuration.
fn local_reason(git: &Git) -> Option<String> {
    let get = |key: &str| git.config_get(key).ok().flatten();
    if get("lfs.customtransfer.xet.path").is_none_or(|p| p.trim().is_empty()) {
        return Some(
            "git-xet is not registered with git-lfs (lfs.customtransfer.xet.path is not set): \
             run `git xet install`"
                .into(),
        );
    }
    if get("lfs.customtransfer.xet.direction").is_some_and(|d| d.trim() == "download") {
        return Some(
            "lfs.customtransfer.xet.direction is download, so git-lfs uploads without git-xet: \
             unset it (`git config --unset lfs.customtransfer.xet.direction`)"
                .into(),
        );
    }
    let basic_only = git
        .run(&["config", "--type=bool", "--get", "lfs.basictransfersonly"])
        .is_ok_and(|v| v == "true");
    if basic_only {
        return Some(
            "lfs.basictransfersonly is true, which turns custom transfer agents off: unset it \
             (`git config --unset lfs.basictransfersonly`)"
                .into(),
        );
    }
    None
}

/// One ref update of the pre-push hook's standard input: `<local ref> <local sha> <remote ref>
/// <remote sha>`; `(local sha, remote sha)`.
fn ref_updates(refs: &str) -> Vec<(String, String)> {
    refs.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [_, local, _, remote] if is_hex(local) && is_hex(remote) => {
                    Some((local.to_string(), remote.to_string()))
                }
                _ => None,
            }
        })
        .collect()
}

fn is_hex(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_zero(s: &str) -> bool {
    s.bytes().all(|b| b == b'0')
}

/// The Git LFS pointers the push carries, as git-lfs's pre-push selects them: in the objects of
/// the pushed commits that neither the remote's current refs nor `refs/remotes/<remote>/*`
/// reach. `None` when they cannot be listed by `deadline`.
pub(crate) fn pushed_pointers(
    dir: &Path,
    remote: &str,
    refs: &str,
    deadline: Instant,
) -> Option<Vec<Pointer>> {
    let updates = ref_updates(refs);
    let include: Vec<&str> = updates
        .iter()
        .map(|(l, _)| l.as_str())
        .filter(|l| !is_zero(l))
        .collect();
    if include.is_empty() {
        return Some(Vec::new());
    }
    let mut args: Vec<String> = vec![
        "rev-list".into(),
        "--objects".into(),
        "--ignore-missing".into(),
        format!("--filter=blob:limit={MAX_POINTER_LEN}"),
    ];
    args.extend(include.iter().map(|s| s.to_string()));
    args.push("--not".into());
    args.extend(
        updates
            .iter()
            .map(|(_, r)| r.clone())
            .filter(|r| !is_zero(r)),
    );
    args.push(format!("--remotes={remote}"));
    let mut cmd = Command::new("git");
    cmd.current_dir(dir).args(&args);
    let out = output_within(cmd, deadline)?;
    let oids: Vec<git2::Oid> = String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| git2::Oid::from_str(l.split(' ').next()?).ok())
        .collect();
    let repo = crate::git::objects::open(Some(dir)).ok()?;
    let pointers = crate::git::objects::pointers_among(&repo, &oids).ok()?;
    // git-lfs does not upload empty objects.
    Some(pointers.into_iter().filter(|p| p.size > 0).collect())
}

/// The standard output of `cmd` (standard input and error closed) if it succeeds by `deadline`;
/// killed then.
fn output_within(mut cmd: Command, deadline: Instant) -> Option<Vec<u8>> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = reader.join().ok()?;
    status.filter(|s| s.success()).map(|_| out)
}

/// A batch answer, as far as it is read here.
#[derive(Debug, Deserialize)]
struct Answer {
    #[serde(default)]
    transfer: Option<String>,
    #[serde(default)]
    objects: Vec<AnswerObject>,
}

#[derive(Debug, Deserialize)]
struct AnswerObject {
    oid: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    actions: Option<AnswerActions>,
}

#[derive(Debug, Deserialize)]
struct AnswerActions {
    #[serde(default)]
    upload: Option<serde_json::Value>,
}

/// Upload batch requests for `pointers` to the LFS server `lfs_url`, offering `basic` and
/// `xet`: whether the server chose `xet` (in every answer), and how many objects and bytes it
/// lacks. `None` on any doubt.
fn ask_server(
    git: &Git,
    lfs_url: &str,
    pointers: &[Pointer],
    deadline: Instant,
) -> Option<(bool, u64, u64)> {
    let split = settings::split_userinfo(lfs_url);
    let left = deadline.checked_duration_since(Instant::now())?;
    let options = crate::agent::http_settings::http_options(git, &split.bare);
    let client =
        xet_client::remote::OneShotClient::for_url(&options, &split.bare, left, true).ok()?;
    let extra = crate::agent::http_settings::extra_headers(git, lfs_url);
    let request = crate::agent::batch_request::BatchRequest {
        git,
        url: &split,
        extra: &extra,
        access: settings::lfs_access(git, lfs_url),
        max_answer: MAX_ANSWER,
    };
    let (mut offered, mut objects, mut bytes) = (true, 0u64, 0u64);
    let wanted: HashSet<String> = pointers.iter().map(|p| p.oid.to_hex()).collect();
    for batch in pointers.chunks(BATCH_OBJECTS) {
        let body = serde_json::json!({
            "operation": "upload",
            "transfers": ["basic", XET_TRANSFER],
            "objects": batch
                .iter()
                .map(|p| serde_json::json!({"oid": p.oid.to_hex(), "size": p.size}))
                .collect::<Vec<_>>(),
            "hash_algo": "sha256",
        })
        .to_string();
        if Instant::now() >= deadline {
            return None;
        }
        let answer = request.send(&client, &body).ok()?;
        if !answer.status.is_success() {
            return None;
        }
        let answer: Answer = serde_json::from_slice(&answer.body).ok()?;
        offered &= answer.transfer.as_deref() == Some(XET_TRANSFER);
        for o in answer.objects {
            if o.actions.is_some_and(|a| a.upload.is_some()) && wanted.contains(&o.oid) {
                objects += 1;
                bytes += o.size;
            }
        }
    }
    Some((offered, objects, bytes))
}

/// Runs [`check`] with [`CHECK_TIME`] and writes its finding to `state` (JSON); writes nothing
/// (and removes an old `state`) when there is none or the time runs out.
pub(crate) fn check_and_save(dir: &Path, remote: &str, refs: &Path, state: &Path) {
    let _ = std::fs::remove_file(state);
    let Ok(text) = std::fs::read_to_string(refs) else {
        return;
    };
    let deadline = Instant::now() + CHECK_TIME;
    let (tx, rx) = std::sync::mpsc::channel();
    let (dir, remote) = (dir.to_path_buf(), remote.to_string());
    // The check runs aside so that a credential helper or a server that hangs cannot hold the
    // push past the deadline: the process ends without waiting for it.
    std::thread::spawn(move || {
        let _ = tx.send(check(&dir, &remote, &text, deadline));
    });
    let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(200);
    if let Ok(Some(found)) = rx.recv_timeout(left) {
        if let Ok(json) = serde_json::to_string(&found) {
            let _ = std::fs::write(state, json);
        }
    }
}

/// The finding [`check_and_save`] wrote to `state`, if any.
pub(crate) fn load(state: &Path) -> Option<WithoutXet> {
    serde_json::from_str(&std::fs::read_to_string(state).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line() {
        let w = WithoutXet {
            objects: 2,
            bytes: 3 << 20,
            why: "the LFS server http://h/r.git/info/lfs does not offer Xet".into(),
        };
        let l = line(&w);
        assert!(
            l.starts_with("git-xet: git-lfs uploaded 2 LFS objects (3.0 MiB) without git-xet"),
            "{l}"
        );
        assert!(!l.contains('\n'), "{l}");
        let one = line(&WithoutXet { objects: 1, ..w });
        assert!(one.contains(" 1 LFS object ("), "{one}");
    }

    #[test]
    fn ref_updates_are_read_as_the_hook_gets_them() {
        let z = "0".repeat(40);
        let a = "a".repeat(40);
        let text = format!(
            "refs/heads/main {a} refs/heads/main {z}\n(delete) {z} refs/heads/x {a}\nnonsense\n"
        );
        let u = ref_updates(&text);
        assert_eq!(u, vec![(a.clone(), z.clone()), (z.clone(), a.clone())]);
        assert!(is_zero(&z) && !is_zero(&a));
    }
}
