//! The `git-xet` binary as users run it: output formats, exit codes and error messages of
//! `hash` and `inspect`, `--version` and `--help`.

mod common;

use std::process::{Command, Output};

fn git_xet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_git-xet"))
        .args(args)
        .output()
        .expect("run git-xet")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

fn fixture(rel: &str) -> String {
    common::fixture_root()
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn hash_prints_one_line_per_file_in_order() {
    let m = common::manifest();
    let files: Vec<&common::FixtureFile> = m.sessions.iter().flat_map(|s| &s.files).collect();
    let paths: Vec<String> = files
        .iter()
        .map(|f| fixture(&format!("inputs/{}", f.name)))
        .collect();
    let args: Vec<&str> = std::iter::once("hash")
        .chain(paths.iter().map(String::as_str))
        .collect();
    let out = git_xet(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), files.len());
    for ((line, file), path) in lines.iter().zip(&files).zip(&paths) {
        assert_eq!(*line, format!("{} {} {}", file.xet_hash, file.size, path));
    }
}

#[test]
fn hash_json_is_one_object_per_line() {
    let path = fixture("inputs/hello.txt");
    let out = git_xet(&["hash", "--json", &path, &path]);
    assert!(out.status.success());
    let text = stdout(&out);
    let objects: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(objects.len(), 2);
    assert_eq!(
        objects[0]["hash"],
        "a9dae0ad88b060bdd7e7c87abdcf95b132c95a0414b06d4f6beb68d287b87165"
    );
    assert_eq!(objects[0]["size"], 12);
    assert_eq!(objects[0]["path"], path.as_str());
}

#[test]
fn hash_reports_unreadable_files_and_continues() {
    let good = fixture("inputs/hello.txt");
    let out = git_xet(&["hash", "/nonexistent/missing.bin", &good]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/nonexistent/missing.bin"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        stdout(&out).lines().count(),
        1,
        "the readable file is still hashed"
    );
    // A directory is not a file either.
    let out = git_xet(&["hash", env!("CARGO_MANIFEST_DIR")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).is_empty());
}

#[test]
fn inspect_dumps_reference_xorbs_and_shards() {
    let m = common::manifest();
    let session = m
        .sessions
        .iter()
        .find(|s| s.name == "hello-and-zeros")
        .unwrap();
    let xorb = fixture(&session.xorbs[0]);
    let out = git_xet(&["inspect", &xorb]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("xorb 26d6e2b60ebd6af0522b494d9919ebb73afa564539d5865b3da3eec678ac1156\n"),
        "{text}"
    );
    assert!(text.contains("stored form"));
    assert!(text.contains("d8d408e608fb9ca213b9909a65d86d725f2de4d8d540324be8a363e7a6e228cb"));

    for rel in session.shards.iter().chain(&session.cache_shards) {
        let out = git_xet(&["inspect", &fixture(rel)]);
        assert!(out.status.success(), "{rel}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(text.starts_with("shard "));
        for f in &session.files {
            assert!(
                text.contains(&format!("file {}", f.xet_hash)),
                "{rel} lists {}",
                f.name
            );
        }
    }
}

#[test]
fn inspect_reads_the_upload_forms() {
    let dir = tempfile::tempdir().unwrap();
    let m = common::manifest();
    let session = m.sessions.iter().find(|s| s.name == "text").unwrap();
    // A xorb's upload form is its chunk region: the bytes before the footer.
    let stored = common::read(&session.xorbs[0]);
    let parsed = git_xet::format::xorb::ParsedXorb::parse(&stored).unwrap();
    let body = dir.path().join("body.xorb");
    std::fs::write(&body, parsed.chunk_region()).unwrap();
    let out = git_xet(&["inspect", body.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("upload form"));
    assert!(stdout(&out).contains(&parsed.hash().to_hex()));

    let shard =
        git_xet::format::shard::Shard::from_bytes(&common::read(&session.shards[0])).unwrap();
    let upload = dir.path().join("upload.mdb");
    std::fs::write(&upload, shard.to_upload_bytes().unwrap()).unwrap();
    let out = git_xet(&["inspect", upload.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("upload form"));
}

#[test]
fn inspect_names_the_offset_of_malformed_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let m = common::manifest();
    let session = m
        .sessions
        .iter()
        .find(|s| s.name == "hello-and-zeros")
        .unwrap();

    let mut xorb = common::read(&session.xorbs[0]);
    xorb[4] = 7; // chunk 0's compression scheme
    let bad = dir.path().join("bad.xorb");
    std::fs::write(&bad, &xorb).unwrap();
    let out = git_xet(&["inspect", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("invalid xorb") && err.contains("offset 0"),
        "{err}"
    );
    assert!(
        stdout(&out).is_empty(),
        "nothing is printed for a bad object"
    );

    let shard = common::read(&session.shards[0]);
    let truncated = dir.path().join("truncated.mdb");
    std::fs::write(&truncated, &shard[..100]).unwrap();
    let out = git_xet(&["inspect", truncated.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("invalid shard") && err.contains("offset"),
        "{err}"
    );

    let out = git_xet(&["inspect", "/nonexistent/x.xorb"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent/x.xorb"));
}

#[test]
fn version_and_help_on_every_command() {
    let out = git_xet(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        stdout(&out).trim(),
        format!("git-xet {}", env!("CARGO_PKG_VERSION"))
    );
    for args in [
        &["--help"][..],
        &["hash", "--help"],
        &["inspect", "--help"],
        &["help", "hash"],
    ] {
        let out = git_xet(args);
        assert!(out.status.success(), "{args:?}");
        assert!(stdout(&out).contains("Usage: git-xet"), "{args:?}");
    }
    let out = git_xet(&["no-such-command"]);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
}
