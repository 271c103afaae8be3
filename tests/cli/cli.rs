//! The `git-xet` binary as users run it: output formats, exit codes and error messages of
//! `hash` and `inspect`, `--version` and `--help`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;

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
    let parsed = xet_format::xorb::ParsedXorb::parse(&stored).unwrap();
    let body = dir.path().join("body.xorb");
    std::fs::write(&body, parsed.chunk_region()).unwrap();
    let out = git_xet(&["inspect", body.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("upload form"));
    assert!(stdout(&out).contains(&parsed.hash().to_hex()));

    let shard = xet_format::shard::Shard::from_bytes(&common::read(&session.shards[0])).unwrap();
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

/// The long help of a subcommand, and one phrase only that long help has.
const LONG_HELP: &[(&str, &str)] = &[
    (
        "install",
        "standalone mode (lfs.standalonetransferagent=xet)",
    ),
    ("uninstall", "filter.lfs block"),
    ("track", "Commit .gitattributes"),
    ("untrack", "keep their LFS pointers"),
    ("demo", "Your git configuration is not touched"),
    ("inspect", "at which byte offset"),
    ("serve", "<public URL>/<repo>/info/lfs"),
    ("transfer", "GIT_XET_LOG_LEVEL"),
];

#[test]
fn every_subcommand_shows_its_long_help_with_examples() {
    for (cmd, phrase) in LONG_HELP {
        for args in [vec![*cmd, "--help"], vec!["help", *cmd]] {
            let out = git_xet(&args);
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            let text = stdout(&out);
            assert!(text.contains(phrase), "{args:?} lacks {phrase:?}:\n{text}");
            assert!(text.contains("Example"), "{args:?} has no example:\n{text}");
        }
        // The short help stays short: the one-line description, not the long text.
        let short = stdout(&git_xet(&[cmd, "-h"]));
        assert!(
            !short.contains(phrase),
            "{cmd} -h shows the long help:\n{short}"
        );
    }
    let uninstall = stdout(&git_xet(&["uninstall", "--help"]));
    assert!(!uninstall.contains("Write to"), "{uninstall}");
}

/// Every subcommand `git-xet --help` lists (the names of its "Commands:" section).
fn listed_subcommands() -> Vec<String> {
    let help = stdout(&git_xet(&["--help"]));
    let section = help.split("Commands:").nth(1).expect("a Commands section");
    let section = section.split("\n\n").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn man_pages_exist_for_every_subcommand_and_git_help_finds_them() {
    let root = tempfile::tempdir().unwrap();
    // A prefix laid out as after `cargo install`: bin/git-xet, and the pages in share/man/man1,
    // where `man` looks for the pages of a program on PATH.
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_git-xet"), bin.join("git-xet")).unwrap();
    let man1 = root.path().join("share/man/man1");
    let out = git_xet(&["man", "--dir", man1.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&man1.display().to_string()),
        "{}",
        stdout(&out)
    );

    let subcommands = listed_subcommands();
    assert!(subcommands.len() >= 17, "{subcommands:?}");
    for cmd in &subcommands {
        let page = man1.join(format!("git-xet-{cmd}.1"));
        let text = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("no man page for {cmd}: {}: {e}", page.display()));
        // roff writes a hyphen as `\-`.
        let name = format!("git\\-xet\\-{}", cmd.replace('-', "\\-"));
        assert!(
            text.contains(&name),
            "{} does not name {cmd}",
            page.display()
        );
    }
    for (cmd, phrase) in LONG_HELP {
        let text = std::fs::read_to_string(man1.join(format!("git-xet-{cmd}.1"))).unwrap();
        let first_word = phrase
            .split_whitespace()
            .next()
            .unwrap()
            .replace('-', "\\-");
        assert!(
            text.contains(&first_word),
            "the {cmd} page lacks its long help"
        );
    }
    assert!(man1.join("git-xet.1").is_file());
    assert!(man1.join("git-xet-cache-prune.1").is_file());

    // `git xet --help` is `git help xet`, which runs `man git-xet`.
    let path = std::env::join_paths(
        std::iter::once(bin.clone())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    for args in [&["xet", "--help"][..], &["help", "xet"]] {
        let out = Command::new("git")
            .args(args)
            .env("PATH", &path)
            .env("HOME", root.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("MANPATH")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .output()
            .expect("run git");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("git-xet"), "git {args:?}:\n{text}");
    }
    // A subcommand's page, as `man` finds it through PATH.
    let install = Command::new("man")
        .arg("git-xet-install")
        .env("PATH", &path)
        .env("HOME", root.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("MANPATH")
        .env("MANPAGER", "cat")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&install.stdout);
    assert!(
        install.status.success(),
        "{}",
        String::from_utf8_lossy(&install.stderr)
    );
    assert!(text.contains("standalone mode"), "{text}");
}

#[test]
fn status_json_into_a_closed_pipe_exits_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_git-xet"))
        .args(["status", "--json"])
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(out.stderr, b"", "{}", stderr(&out));
    assert!(out.status.success(), "{:?}", out.status);
    // The same for a command that prints with println! (`man`).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_git-xet"))
        .args(["man", "--dir", dir.path().to_str().unwrap()])
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(out.stderr, b"", "{}", stderr(&out));
    assert!(out.status.success(), "{:?}", out.status);
}

#[test]
fn serve_on_a_busy_port_fails_before_it_touches_the_data_directory() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = git_xet(&[
        "serve",
        "--listen",
        &addr,
        "--token",
        "0123456789abcdef0123",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains(&addr), "{}", stderr(&out));
    assert!(!data.exists(), "the data directory was created");
}

#[test]
fn serve_refuses_a_plain_http_lock_owner_on_another_machine_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "0123456789abcdef0123",
            "--data",
            data.to_str().unwrap(),
            "--max-lifetime",
            "1",
        ];
        args.extend_from_slice(extra);
        git_xet(&args)
    };
    let out = serve(&["--lock-owner", "http://10.0.0.5:8080"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--lock-owner")
            && err.contains("http://10.0.0.5:8080")
            && err.contains("https://")
            && err.contains("--lock-owner-insecure-http"),
        "{err}"
    );
    assert!(!data.exists(), "the data directory was created");
    // Said explicitly, it starts (and stops by itself); so does plain http to this machine.
    for extra in [
        &[
            "--lock-owner",
            "http://10.0.0.5:8080",
            "--lock-owner-insecure-http",
        ][..],
        &["--lock-owner", "http://127.0.0.1:9"],
    ] {
        let out = serve(extra);
        assert!(out.status.success(), "{extra:?}: {}", stderr(&out));
        assert!(stdout(&out).starts_with("listening on "), "{extra:?}");
    }
    // The allowance needs an owner.
    let out = serve(&["--lock-owner-insecure-http"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--lock-owner <URL>"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_server_log_in_a_file_has_no_colour_codes() {
    use std::io::{Read, Write};
    let server = common::server::ServeProcess::start(&[]);
    let mut conn = common::server::connect(server.addr);
    conn.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let log = server.log();
    assert!(log.contains("git-xet serve ready"), "{log}");
    assert!(
        !log.contains('\x1b'),
        "colour codes in the log file: {log:?}"
    );
}

#[test]
fn a_second_server_on_the_same_data_directory_says_what_to_do() {
    let first = common::server::ServeProcess::start(&[]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_git-xet"))
        .args(common::server::serve_args(&first.dir.path().join("store")))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is open in another process") && err.contains("its own --data"),
        "{err}"
    );
    assert!(!err.contains("Cannot acquire lock"), "redb's words: {err}");
}
