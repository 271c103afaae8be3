//! Hostile or broken input straight to `git-xet transfer`, and what killed agents leave behind:
//! request lines far beyond the 1 MiB limit (answered for their object when one can be found,
//! with memory and stderr staying small), garbage, a second `init`, requests before `init`
//! (fatal, with advice a user can act on), upload paths that are FIFOs or directories (refused
//! at once instead of blocking), and partial downloads stopped agents left (removed by the
//! next transfer when they are of no use, kept for a download to take over otherwise, left
//! alone while another agent holds them). Every agent run is bounded in time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::common;

use common::agent::{run_agent, AgentRun};

/// A git repository to run the agent in, and a store directory as its endpoint.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let s = Sandbox {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(s.repo()).unwrap();
        let ok = Command::new("git")
            .args(["init", "-q"])
            .current_dir(s.repo())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap();
        assert!(ok.success());
        s
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// Runs the agent with `input` on stdin; fails the test if it runs for a minute.
    fn agent(&self, input: Vec<u8>) -> AgentRun {
        self.agent_with(input, &[("GIT_TRACE", Some("1"))])
    }

    /// [`Sandbox::agent`] with these variables set (`Some`) or removed (`None`).
    fn agent_with(&self, input: Vec<u8>, vars: &[(&str, Option<&str>)]) -> AgentRun {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_git-xet"));
        cmd.arg("transfer")
            .current_dir(self.repo())
            .env("GIT_XET_ENDPOINT", self.dir.path().join("store"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env(
                "GIT_CONFIG_GLOBAL",
                self.dir.path().join("no-global-config"),
            )
            .env("GIT_XET_CACHE_DIR", self.dir.path().join("cache"))
            .env_remove("GIT_TRACE")
            .env_remove("GIT_XET_LOG")
            .env_remove("GIT_XET_LOG_LEVEL");
        for (k, v) in vars {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        run_agent(cmd, input)
    }

    /// An object file; (path, oid, size).
    fn object(&self, seed: u64, len: usize) -> (PathBuf, String, usize) {
        let data = common::splitmix64(seed, len);
        let path = self.dir.path().join(format!("object-{seed}"));
        std::fs::write(&path, &data).unwrap();
        (path, common::sha256_hex(&data), len)
    }
}

fn lines(lines: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.as_bytes());
        out.push(b'\n');
    }
    out
}

const INIT_UPLOAD: &str = r#"{"event":"init","operation":"upload","remote":"origin","concurrent":true,"concurrenttransfers":1}"#;
const INIT_DOWNLOAD: &str = r#"{"event":"init","operation":"download","remote":"origin","concurrent":true,"concurrenttransfers":1}"#;
const TERMINATE: &str = r#"{"event":"terminate"}"#;

fn upload(object: &(PathBuf, String, usize)) -> String {
    serde_json::json!({
        "event": "upload", "oid": object.1, "size": object.2, "path": object.0, "action": null,
    })
    .to_string()
}

/// stderr as git-lfs shows it (with `GIT_TRACE`) holds the agent's info lines, such as the
/// exit line with the peak RSS the tests here read.
#[test]
fn the_agents_stderr_carries_info_lines_only_when_git_lfs_traces() {
    let s = Sandbox::new();
    let object = s.object(5, 3000);
    let input = lines(&[INIT_UPLOAD, &upload(&object), TERMINATE]);
    let log = s.dir.path().join("agent.log");
    let log_var = log.to_str().unwrap();
    // Without GIT_TRACE: nothing on stderr for a transfer that went well, every info line in
    // GIT_XET_LOG.
    let quiet = s.agent_with(input.clone(), &[("GIT_XET_LOG", Some(log_var))]);
    assert_eq!(quiet.status, Some(0));
    assert_eq!(quiet.completes().len(), 1);
    assert!(quiet.stderr.is_empty(), "{}", quiet.stderr);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("agent started") && logged.contains("peak_rss_kib="),
        "{logged}"
    );
    // With GIT_TRACE, or a level chosen with GIT_XET_LOG_LEVEL: the info lines on stderr too.
    for vars in [
        [("GIT_TRACE", Some("1"))],
        [("GIT_XET_LOG_LEVEL", Some("info"))],
    ] {
        let traced = s.agent_with(input.clone(), &vars);
        assert_eq!(traced.status, Some(0));
        assert!(
            traced.stderr.contains("agent started"),
            "{vars:?}: {}",
            traced.stderr
        );
        assert!(traced.peak_rss_kib().is_some(), "{vars:?}");
    }
    // GIT_TRACE=0 is off, as for git.
    let off = s.agent_with(input, &[("GIT_TRACE", Some("0"))]);
    assert!(off.stderr.is_empty(), "{}", off.stderr);
}

/// Advice a user can act on, in a fatal error's text.
fn assert_explained(text: &str) {
    for words in ["EOF", "GIT_TRACE=1", "git xet uninstall", "bug"] {
        assert!(text.contains(words), "{words:?} missing from: {text}");
    }
}

#[test]
fn an_oversized_line_naming_an_object_is_answered_and_the_agent_goes_on() {
    let s = Sandbox::new();
    let good = s.object(1, 200_000);
    let oid = common::sha256_hex(b"the object of the oversized line");
    let mut input = lines(&[INIT_UPLOAD]);
    input.extend_from_slice(
        format!(r#"{{"event":"upload","oid":"{oid}","size":1,"path":"/x","pad":""#).as_bytes(),
    );
    input.extend(std::iter::repeat_n(b'a', 5 << 20));
    input.extend_from_slice(b"\"}\n");
    input.extend(lines(&[&upload(&good), TERMINATE]));
    let run = s.agent(input);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let done = run.completes();
    assert_eq!(done.len(), 2, "{:?}", run.replies);
    assert_eq!(done[0]["oid"], oid.as_str());
    let message = done[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("longer than") && message.contains("bytes"),
        "{message}"
    );
    assert!(message.len() < 2000, "{message}");
    assert_eq!(done[1]["oid"], good.1.as_str());
    assert!(done[1].get("error").is_none(), "{}", done[1]);
    assert!(
        run.stderr.len() < 16 * 1024,
        "{} bytes on stderr",
        run.stderr.len()
    );
}

#[test]
fn memory_stays_bounded_whatever_the_line_length() {
    let s = Sandbox::new();
    let oid = common::sha256_hex(b"x");
    let mut input = lines(&[INIT_UPLOAD]);
    input.extend_from_slice(format!(r#"{{"oid":"{oid}","junk":""#).as_bytes());
    input.extend(std::iter::repeat_n(b'z', 96 << 20));
    input.extend(lines(&["", TERMINATE]));
    let run = s.agent(input);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.completes().len(), 1);
    let peak = run
        .peak_rss_kib()
        .expect("the exit line reports the peak RSS");
    eprintln!("peak RSS with a 96 MiB line: {peak} KiB");
    assert!(
        peak < 64 * 1024,
        "peak RSS {peak} KiB: the line was buffered"
    );
    assert!(run.stderr.len() < 16 * 1024, "{}", run.stderr.len());
}

#[test]
fn lines_without_an_object_end_the_agent_with_advice() {
    let s = Sandbox::new();
    let big_garbage = {
        let mut input = lines(&[INIT_UPLOAD]);
        input.extend(std::iter::repeat_n(b'x', 5 << 20));
        input.push(b'\n');
        input
    };
    let huge_event = {
        let mut input = lines(&[INIT_UPLOAD]);
        input.extend_from_slice(br#"{"event":""#);
        input.extend(std::iter::repeat_n(b'e', 512 << 10));
        input.extend_from_slice(b"\"}\n");
        input
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (big_garbage, "longer than"),
        (huge_event, "unknown event"),
        (
            lines(&[INIT_UPLOAD, "garbage after init"]),
            "not a JSON object",
        ),
        (lines(&[INIT_UPLOAD, INIT_UPLOAD]), "second init"),
    ];
    for (input, expected) in cases {
        let run = s.agent(input);
        assert_eq!(run.status, Some(1), "{expected}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{expected}: {}", run.stderr);
        assert_explained(&run.stderr);
        assert!(run.completes().is_empty());
        assert!(
            run.stderr.len() < 16 * 1024,
            "{expected}: {} bytes on stderr",
            run.stderr.len()
        );
    }

    // Before init, the init error reply (which git-lfs shows) carries the advice.
    let oid = common::sha256_hex(b"y");
    let run = s.agent(lines(&[&format!(
        r#"{{"event":"upload","oid":"{oid}","size":1,"path":"/x"}}"#
    )]));
    assert_eq!(run.status, Some(1));
    let message = run.replies[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("before init"), "{message}");
    assert_explained(message);
}

#[test]
fn upload_paths_that_are_not_regular_files_are_refused_at_once() {
    let s = Sandbox::new();
    let oid = common::sha256_hex(b"z");
    let fifo = s.dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let dir = s.dir.path().join("a-directory");
    std::fs::create_dir_all(&dir).unwrap();
    let good = s.object(3, 10_000);
    let request = |path: &Path| {
        serde_json::json!({
            "event": "upload", "oid": oid, "size": 1, "path": path, "action": null,
        })
        .to_string()
    };
    let run = s.agent(lines(&[
        INIT_UPLOAD,
        &request(&fifo),
        &request(&dir),
        &upload(&good),
        TERMINATE,
    ]));
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    let done = run.completes();
    assert_eq!(done.len(), 3, "{:?}", run.replies);
    let fifo_error = done[0]["error"]["message"].as_str().unwrap();
    assert!(
        fifo_error.contains("not a regular file") && fifo_error.contains("FIFO"),
        "{fifo_error}"
    );
    let dir_error = done[1]["error"]["message"].as_str().unwrap();
    assert!(dir_error.contains("a directory"), "{dir_error}");
    assert!(done[2].get("error").is_none(), "{}", done[2]);
}

#[test]
fn the_next_transfer_removes_partial_files_of_no_use_whose_agent_is_gone() {
    let s = Sandbox::new();
    let object = s.object(4, 300_000);
    let run = s.agent(lines(&[INIT_UPLOAD, &upload(&object), TERMINATE]));
    assert!(run.completes()[0].get("error").is_none(), "{}", run.stderr);

    let tmp = s.repo().join(".git/lfs/tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let oid16 = &object.1[..16];
    let part = |name: &str, age: Duration| {
        let path = tmp.join(name);
        let f = std::fs::File::create(&path).unwrap();
        f.set_modified(SystemTime::now() - age).unwrap();
        (path, f)
    };
    // A pid no process has: a child that has exited.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let alive = std::process::id();
    let minute = Duration::from_secs(60);
    // An agent killed a moment ago: its file is fresh, but its process is gone.
    let (just_killed, _) = part(&format!("xet-{oid16}-{dead}-a1b2.part"), Duration::ZERO);
    // Another object's, left the same way: any transfer removes it.
    let (other_object, _) = part(&format!("xet-0123456789abcdef-{dead}-c3.part"), minute);
    // A live agent's (this test's pid stands for it), however old.
    let (live, _) = part(&format!("xet-{oid16}-{alive}-d4.part"), minute);
    // The pid is gone but someone holds the lock (an agent in another pid namespace).
    let (held, held_file) = part(&format!("xet-{oid16}-{dead}-e5.part"), minute);
    held_file.try_lock().unwrap();
    // The older naming (no pid): the age and the lock decide.
    let (old_killed, _) = part(&format!("xet-{oid16}-killed.part"), minute);
    let (old_young, _) = part(&format!("xet-{oid16}-young.part"), Duration::ZERO);
    let (unrelated, _) = part(&format!("xet-{oid16}-{dead}-notes.txt"), minute);
    // Written to by an agent that is gone: kept for the next download of its object to take
    // over, unless git-lfs has the object already.
    let (resumable, _) = part(&format!("xet-{oid16}-{dead}-f6.part"), minute);
    std::fs::write(&resumable, b"half an object").unwrap();
    let stored_oid = "89abcdef01234567".repeat(4);
    let objects = s.repo().join(".git/lfs/objects");
    let in_store = objects.join(&stored_oid[..2]).join(&stored_oid[2..4]);
    std::fs::create_dir_all(&in_store).unwrap();
    std::fs::write(in_store.join(&stored_oid), b"the object").unwrap();
    let (done, _) = part(&format!("xet-{}-{dead}-a7.part", &stored_oid[..16]), minute);
    std::fs::write(&done, b"half the object").unwrap();

    // An upload of an unrelated object is the next transfer.
    let another = s.object(5, 1000);
    let run = s.agent(lines(&[INIT_UPLOAD, &upload(&another), TERMINATE]));
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.completes()[0].get("error").is_none(), "{}", run.stderr);
    for removed in [&just_killed, &other_object, &old_killed, &done] {
        assert!(!removed.exists(), "{} is removed", removed.display());
    }
    for kept in [&live, &held, &old_young, &unrelated, &resumable] {
        assert!(kept.exists(), "{} is kept", kept.display());
    }
    drop(held_file);

    // A download writes its own partial file under its pid and hands over a complete file.
    let download = serde_json::json!({
        "event": "download", "oid": object.1, "size": object.2, "action": null,
    })
    .to_string();
    let run = s.agent(lines(&[INIT_DOWNLOAD, &download, TERMINATE]));
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let done = run.completes();
    let path = done[0]["path"].as_str().expect("downloaded");
    assert_eq!(std::fs::read(path).unwrap().len(), object.2);
    let name = std::path::Path::new(path)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    assert!(
        name.starts_with(&format!("xet-{oid16}-")) && name.ends_with(".part"),
        "{name}"
    );
    let pid: String = name[4 + 16 + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(
        !pid.is_empty() && pid != alive.to_string(),
        "{name}: the agent's own pid"
    );
}
