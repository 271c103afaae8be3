//! `git xet install`, `uninstall`, `track` and `untrack` with real git and git-lfs, in an
//! isolated configuration (temporary HOME and global config file, no system config).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let s = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(s.home()).unwrap();
        std::fs::create_dir_all(s.repo()).unwrap();
        s
    }
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }
    fn global_config(&self) -> PathBuf {
        self.home().join(".gitconfig")
    }
    fn env(&self, c: &mut Command) {
        c.env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.home().join(".config"))
            .env("GIT_CONFIG_GLOBAL", self.global_config())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("GIT_DIR");
    }
    fn git_xet(&self, cwd: &Path, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_git-xet"));
        self.env(&mut c);
        c.current_dir(cwd).args(args).output().unwrap()
    }
    fn git(&self, cwd: &Path, args: &[&str]) -> String {
        let mut c = Command::new("git");
        self.env(&mut c);
        let out = c.current_dir(cwd).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
    fn global(&self, key: &str) -> String {
        self.git(self.dir.path(), &["config", "--global", "--get", key])
    }
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn install_is_idempotent_and_uninstall_removes_exactly_what_it_wrote() {
    let s = Sandbox::new();
    let cwd = s.dir.path();
    // The user's own setting, which install must not overwrite or remove.
    s.git(cwd, &["config", "--global", "lfs.concurrenttransfers", "2"]);
    let out = ok(&s.git_xet(cwd, &["install", "--concurrency", "4"]));
    assert!(out.contains("lfs.customtransfer.xet.path"), "{out}");
    assert!(out.contains("left as it is"), "{out}");
    let exe = Path::new(env!("CARGO_BIN_EXE_git-xet"))
        .canonicalize()
        .unwrap();
    assert_eq!(
        s.global("lfs.customtransfer.xet.path"),
        exe.to_string_lossy()
    );
    assert_eq!(s.global("lfs.customtransfer.xet.args"), "transfer");
    assert_eq!(s.global("lfs.customtransfer.xet.concurrent"), "true");
    // The same agent for downloads, under the name only git-xet registers.
    assert_eq!(
        s.global("lfs.customtransfer.xet-download.path"),
        exe.to_string_lossy()
    );
    assert_eq!(s.global("lfs.customtransfer.xet-download.args"), "transfer");
    assert_eq!(
        s.global("lfs.customtransfer.xet-download.direction"),
        "download"
    );
    assert_eq!(s.global("lfs.concurrenttransfers"), "2");
    assert!(
        !s.global("filter.lfs.process").is_empty(),
        "git lfs install ran"
    );

    let before = std::fs::read_to_string(s.global_config()).unwrap();
    ok(&s.git_xet(cwd, &["install", "--concurrency", "4"]));
    assert_eq!(
        std::fs::read_to_string(s.global_config()).unwrap(),
        before,
        "idempotent"
    );

    let out = ok(&s.git_xet(cwd, &["uninstall"]));
    assert!(out.contains("uninstalled"), "{out}");
    assert_eq!(s.global("lfs.customtransfer.xet.path"), "");
    assert_eq!(s.global("lfs.customtransfer.xet-download.path"), "");
    assert_eq!(s.global("lfs.customtransfer.xet-download.direction"), "");
    assert_eq!(s.global("xet.managedkeys"), "");
    assert_eq!(
        s.global("lfs.concurrenttransfers"),
        "2",
        "the user's value stays"
    );
    assert!(
        !s.global("filter.lfs.process").is_empty(),
        "git-lfs's filters stay"
    );
    // …and uninstall says so, with the command that removes them, which does.
    assert!(
        out.contains("left in place: git-lfs's own setup (filter.lfs.*")
            && out.contains("`git lfs uninstall` removes it"),
        "{out}"
    );
    let out = ok(&s.git_xet(cwd, &["uninstall"]));
    assert!(out.contains("was not installed"), "{out}");
    s.git(cwd, &["lfs", "uninstall"]);
    assert_eq!(s.global("filter.lfs.process"), "");
    let out = ok(&s.git_xet(cwd, &["uninstall"]));
    assert!(!out.contains("left in place"), "{out}");
}

#[test]
fn concurrency_one_and_standalone_endpoint_in_local_scope() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.git(&repo, &["init", "-q"]);
    let store = s.dir.path().join("store");
    ok(&s.git_xet(
        &repo,
        &[
            "install",
            "--local",
            "--concurrency",
            "1",
            "--endpoint",
            store.to_str().unwrap(),
        ],
    ));
    let local = |k: &str| s.git(&repo, &["config", "--local", "--get", k]);
    assert_eq!(local("lfs.customtransfer.xet.concurrent"), "false");
    assert_eq!(local("lfs.standalonetransferagent"), "xet");
    assert_eq!(local("xet.endpoint"), store.to_string_lossy());
    assert_eq!(
        local("lfs.concurrenttransfers"),
        "",
        "N = 1 writes no concurrenttransfers"
    );
    assert_eq!(
        s.global("lfs.customtransfer.xet.path"),
        "",
        "nothing global"
    );
    let out = ok(&s.git_xet(&repo, &["uninstall", "--local"]));
    assert_eq!(local("lfs.standalonetransferagent"), "");
    assert_eq!(local("xet.endpoint"), "");
    // Leaving standalone mode changes where pushes go: said, with the way back.
    assert!(
        out.contains("no longer uses standalone mode")
            && out.contains("whole objects")
            && out.contains(&format!(
                "git xet install --local --endpoint {}",
                store.display()
            )),
        "{out}"
    );

    // With standalone mode still on globally, a local uninstall changes nothing there: no note.
    ok(&s.git_xet(
        &repo,
        &["install", "--local", "--endpoint", store.to_str().unwrap()],
    ));
    s.git(
        &repo,
        &["config", "--global", "lfs.standalonetransferagent", "xet"],
    );
    let out = ok(&s.git_xet(&repo, &["uninstall", "--local"]));
    assert!(!out.contains("no longer"), "{out}");
}

#[test]
fn bad_flags_exit_non_zero_with_a_message() {
    let s = Sandbox::new();
    let cwd = s.dir.path();
    let out = s.git_xet(cwd, &["install", "--local", "--global"]);
    assert_eq!(out.status.code(), Some(2));
    let out = s.git_xet(cwd, &["install", "--concurrency", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = s.git_xet(cwd, &["install", "--local"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("inside a git repository"));
    let out = s.git_xet(cwd, &["track", "*.bin"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn track_and_untrack_edit_gitattributes_like_git_lfs() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.git(&repo, &["init", "-q"]);
    ok(&s.git_xet(&repo, &["track", "*.safetensors", "data/*.bin"]));
    let attrs = std::fs::read_to_string(repo.join(".gitattributes")).unwrap();
    assert!(
        attrs.contains("*.safetensors filter=lfs diff=lfs merge=lfs -text"),
        "{attrs}"
    );
    assert!(
        attrs.contains("data/*.bin filter=lfs diff=lfs merge=lfs -text"),
        "{attrs}"
    );
    ok(&s.git_xet(&repo, &["untrack", "*.safetensors"]));
    let attrs = std::fs::read_to_string(repo.join(".gitattributes")).unwrap();
    assert!(!attrs.contains("*.safetensors"), "{attrs}");
    assert!(attrs.contains("data/*.bin"));
}

/// `git xet status --json`'s endpoint of the repository: (kind, value).
fn status_endpoint(s: &Sandbox, repo: &Path, env_endpoint: Option<&str>) -> (String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_git-xet"));
    s.env(&mut c);
    c.env_remove("GIT_XET_ENDPOINT");
    if let Some(e) = env_endpoint {
        c.env("GIT_XET_ENDPOINT", e);
    }
    let out = ok(&c
        .current_dir(repo)
        .args(["status", "--json"])
        .output()
        .unwrap());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let e = &v["repository"]["endpoint"];
    (
        e["kind"].as_str().unwrap_or_default().to_string(),
        e["value"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn install_and_the_environment_read_an_endpoint_the_same_way() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.git(&repo, &["init", "-q"]);
    let local = |key: &str| s.git(&repo, &["config", "--local", "--get", key]);
    let home_store = s.home().join("store").to_string_lossy().into_owned();
    let sub = repo.join("sub");
    std::fs::create_dir_all(&sub).unwrap();

    for (given, kind, expected) in [
        (
            "HTTP://127.0.0.1:9/",
            "http",
            "http://127.0.0.1:9".to_string(),
        ),
        ("~/store", "dir", home_store.clone()),
        ("file:///srv/./xet", "dir", "/srv/xet".to_string()),
    ] {
        // Written by install (from a subdirectory: relative paths are not what is tested here)…
        ok(&s.git_xet(&sub, &["install", "--local", "--endpoint", given]));
        assert_eq!(
            local("xet.endpoint"),
            expected,
            "install --endpoint {given}"
        );
        assert_eq!(
            status_endpoint(&s, &repo, None),
            (kind.to_string(), expected.clone()),
            "status of xet.endpoint = {given}"
        );
        // …and the same text in the environment means the same endpoint.
        ok(&s.git_xet(&repo, &["uninstall", "--local"]));
        assert_eq!(
            status_endpoint(&s, &repo, Some(given)),
            (kind.to_string(), expected.clone()),
            "GIT_XET_ENDPOINT={given}"
        );
    }

    // Not a directory named `s3:`: refused by install as by the agent, and nothing written.
    let out = s.git_xet(
        &repo,
        &["install", "--local", "--endpoint", "s3://bucket/x"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("s3://bucket/x") && err.contains("not usable"),
        "{err}"
    );
    assert_eq!(local("xet.endpoint"), "");
    assert_eq!(local("lfs.standalonetransferagent"), "");
    assert!(!repo.join("s3:").exists() && !sub.join("s3:").exists());

    // A relative directory is relative to where install ran.
    ok(&s.git_xet(&sub, &["install", "--local", "--endpoint", "../store"]));
    assert_eq!(
        Path::new(&local("xet.endpoint")),
        repo.canonicalize().unwrap().join("store")
    );
}

/// Hugging Face's git-xet registers under the same `xet` name: install leaves it alone and
/// says how to replace it; `--force` replaces it and keeps its settings, which uninstall puts
/// back; status names the program that is registered.
#[test]
fn another_xet_agent_is_never_silently_replaced() {
    let s = Sandbox::new();
    let cwd = s.dir.path();
    // A stand-in for the other git-xet: it answers --version and has no `serve`.
    let other = s.dir.path().join("other-bin/git-xet");
    std::fs::create_dir_all(other.parent().unwrap()).unwrap();
    std::fs::write(
        &other,
        "#!/bin/sh\ncase \"$1\" in --version) echo 'git-xet 0.2.0' ;; *) exit 2 ;; esac\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let other_text = other.display().to_string();
    for (k, v) in [
        ("path", other_text.as_str()),
        ("args", "transfer --theirs"),
        ("concurrent", "true"),
    ] {
        s.git(
            cwd,
            &[
                "config",
                "--global",
                &format!("lfs.customtransfer.xet.{k}"),
                v,
            ],
        );
    }
    let before = std::fs::read_to_string(s.global_config()).unwrap();

    // Refused, with what is there and what to run; nothing changes.
    let out = s.git_xet(cwd, &["install"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&other_text) && err.contains("git-xet 0.2.0") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(s.global_config()).unwrap(), before);

    // Status names it and warns.
    let status = s.git_xet(cwd, &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("not git-xet") && text.contains("git-xet 0.2.0"),
        "{text}"
    );

    // --force replaces it, keeping its settings ...
    let out = ok(&s.git_xet(cwd, &["install", "--force"]));
    assert!(out.contains("replaced"), "{out}");
    let exe = Path::new(env!("CARGO_BIN_EXE_git-xet"))
        .canonicalize()
        .unwrap();
    assert_eq!(
        s.global("lfs.customtransfer.xet.path"),
        exe.to_string_lossy()
    );
    assert_eq!(s.global("lfs.customtransfer.xet.args"), "transfer");
    assert_eq!(s.global("xet.replaced.path"), other_text);
    // ... installing again is quiet about it ...
    ok(&s.git_xet(cwd, &["install"]));
    let text = String::from_utf8_lossy(&s.git_xet(cwd, &["status"]).stdout).into_owned();
    assert!(!text.contains("not git-xet"), "{text}");
    // ... and uninstall puts the other one back as it was.
    let out = ok(&s.git_xet(cwd, &["uninstall"]));
    assert!(out.contains("again"), "{out}");
    assert_eq!(s.global("lfs.customtransfer.xet.path"), other_text);
    assert_eq!(s.global("lfs.customtransfer.xet.args"), "transfer --theirs");
    assert_eq!(s.global("xet.replaced.path"), "");
}

#[test]
fn install_force_then_uninstall_leaves_any_earlier_registration_as_it_was() {
    // Earlier registrations of the `xet` agent by other installers: Hugging Face's (a bare
    // name), an absolute path with a direction, a path alone.
    let registrations: [&[(&str, &str)]; 4] = [
        &[
            ("path", "git-xet"),
            ("args", "transfer"),
            ("concurrent", "true"),
        ],
        &[
            ("path", "/opt/other/bin/git-xet"),
            ("args", "transfer --verbose"),
            ("concurrent", "false"),
            ("direction", "upload"),
        ],
        &[("path", "git-xet")],
        &[("path", "/usr/local/bin/xet-agent"), ("direction", "both")],
    ];
    for registration in registrations {
        let s = Sandbox::new();
        let cwd = s.dir.path();
        // git-lfs's filters are there before (uninstall leaves them, on purpose).
        s.git(cwd, &["lfs", "install", "--skip-repo"]);
        for (k, v) in registration {
            s.git(
                cwd,
                &[
                    "config",
                    "--global",
                    &format!("lfs.customtransfer.xet.{k}"),
                    v,
                ],
            );
        }
        let listed = || {
            let out = s.git(cwd, &["config", "--global", "--list"]);
            let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
            lines.sort();
            lines
        };
        let before = listed();
        // Never taken over without --force, also when the bare name runs this git-xet (it
        // is first on PATH).
        let bin = s.dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_git-xet"), bin.join("git-xet")).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut install = Command::new(env!("CARGO_BIN_EXE_git-xet"));
        s.env(&mut install);
        let out = install
            .current_dir(cwd)
            .env("PATH", &path)
            .arg("install")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{registration:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--force"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(listed(), before, "{registration:?}");
        // Taken over with it: the agent is this git-xet, both ways.
        ok(&s.git_xet(cwd, &["install", "--force"]));
        assert_ne!(s.global("lfs.customtransfer.xet.path"), registration[0].1);
        assert_eq!(s.global("lfs.customtransfer.xet.direction"), "");
        // And uninstall gives back exactly what was there.
        ok(&s.git_xet(cwd, &["uninstall"]));
        assert_eq!(listed(), before, "{registration:?}");
    }
}
