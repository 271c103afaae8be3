//! `git xet scrub` and `git xet gc` as a user runs them on a store directory: exit codes,
//! reports (text and JSON), and what they change.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;

use std::path::Path;
use std::process::Command;

use xet_format::shard::Shard;
use xet_format::xorb::ParsedXorb;
use xet_store::Store;

fn git_xet(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_git-xet"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A store holding the "random" session (registered) and the xorb of "text" (never registered:
/// an interrupted push). Returns the registered xorb and the orphan.
fn store(dir: &Path) -> (String, String) {
    let m = common::manifest();
    let store = Store::open(dir).unwrap();
    let mut hashes = Vec::new();
    for name in ["random", "text"] {
        let s = m.sessions.iter().find(|s| s.name == name).unwrap();
        let stored = common::read(&s.xorbs[0]);
        let parsed = ParsedXorb::parse(&stored).unwrap();
        store
            .put_xorb(parsed.hash(), parsed.chunk_region())
            .unwrap();
        hashes.push(parsed.hash().to_hex());
        if name == "random" {
            let shard = Shard::from_bytes(&common::read(&s.shards[0])).unwrap();
            store
                .register_shard(&shard.to_upload_bytes().unwrap(), &mut |_| {})
                .unwrap();
        }
    }
    (hashes[0].clone(), hashes[1].clone())
}

#[test]
fn scrub_exits_2_on_damage_and_0_when_clean() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    let (used, _) = store(&data);
    let d = data.to_str().unwrap();

    let (code, out, err) = git_xet(&["scrub", d]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("no damage found"), "{out}");

    let path = data.join("xorbs").join(&used[..2]).join(&used);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let (code, out, err) = git_xet(&["scrub", d]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(out.contains(&format!("damaged xorb {used}")), "{out}");
    assert!(out.contains("cannot be downloaded"), "{out}");
    assert!(data.join("quarantine/xorbs").read_dir().unwrap().count() == 1);

    let (code, out, _) = git_xet(&["scrub", "--json", d]);
    assert_eq!(code, Some(2));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["damage_found"], true);
    assert_eq!(v["damaged_xorbs"][0]["xorb"], used.as_str());
    assert_eq!(v["affected_file_count"], 1);

    // Not a store: a clear error, exit 1, and nothing created.
    let missing = dir.path().join("nothing-here");
    let (code, _, err) = git_xet(&["scrub", missing.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is not a git-xet store"), "{err}");
    assert!(!missing.exists());
}

#[test]
fn gc_removes_the_xorbs_of_interrupted_pushes_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    let (used, orphan) = store(&data);
    let d = data.to_str().unwrap();
    let at = |h: &str| data.join("xorbs").join(&h[..2]).join(h);

    let (code, out, err) = git_xet(&["gc", d]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("removed 0 unused xorb(s)"), "{out}");
    assert!(out.contains("kept 1 unused xorb(s)"), "{out}");
    assert!(at(&orphan).exists());

    // The shortest grace period there is: the orphan is still younger.
    let (code, out, _) = git_xet(&["gc", "--grace", "10m", "--dry-run", d]);
    assert_eq!(code, Some(0));
    assert!(out.contains("would remove 0 unused xorb(s)"), "{out}");
    // Anything shorter is refused, saying what the shortest is.
    let (code, _, err) = git_xet(&["gc", "--grace", "1m", d]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("shortest grace period, 10m"), "{err}");
    assert!(at(&orphan).exists());

    // An hour later (its time set back), it is past the grace period.
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(at(&orphan))
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    let (code, out, _) = git_xet(&["gc", "--grace", "10m", "--dry-run", d]);
    assert_eq!(code, Some(0));
    assert!(out.contains("would remove 1 unused xorb(s)"), "{out}");
    assert!(at(&orphan).exists());

    let (code, out, _) = git_xet(&["gc", "--grace", "10m", "--json", d]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["xorbs_removed"], 1);
    assert_eq!(v["xorbs_used"], 1);
    assert!(v["bytes_freed"].as_u64().unwrap() > 1000);
    assert!(!at(&orphan).exists());
    assert!(at(&used).exists());

    let (code, _, err) = git_xet(&["gc", "--grace", "soon", d]);
    assert_eq!(code, Some(2), "clap refuses a bad duration");
    assert!(err.contains("not a duration"), "{err}");
}
