//! The reference client (PyPI `hf-xet`) as a test peer: uploads to and downloads from a server
//! by Xet hash, each run in its own client cache and under a time limit.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::server::{TestServer, WRITE_TOKEN};

/// The longest a single Python invocation may take.
const PY_TIMEOUT: Duration = Duration::from_secs(180);

const UPLOAD: &str = r#"
import hf_xet, json, sys, time
endpoint, token, files = sys.argv[1], sys.argv[2], sys.argv[3:]
res = hf_xet.upload_files(files, endpoint, (token, int(time.time()) + 3600), None, None, "model")
print(json.dumps([{"hash": r.hash, "size": r.file_size} for r in res]))
"#;

const DOWNLOAD: &str = r#"
import hf_xet, json, sys, time
endpoint, token, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
infos = [hf_xet.PyXetDownloadInfo(d["dest"], d["hash"], d["size"]) for d in spec]
hf_xet.download_files(infos, endpoint, (token, int(time.time()) + 3600), None, None)
print("ok")
"#;

/// The reference client with one set of settings.
pub struct Peer {
    pub python: PathBuf,
    pub env: Vec<(&'static str, &'static str)>,
}

impl Peer {
    /// Runs `script` with `args` in a fresh client cache under `cache`; returns stdout.
    pub fn run(&self, cache: &Path, script: &str, args: &[String]) -> String {
        std::fs::create_dir_all(cache).unwrap();
        let mut cmd = Command::new(&self.python);
        cmd.arg("-c")
            .arg(script)
            .args(args)
            .env("HF_HOME", cache)
            .env("HF_XET_CACHE", cache.join("xet"))
            .env("HF_XET_TELEMETRY_ENABLED", "false")
            .env_remove("HF_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("python starts");
        let started = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if started.elapsed() > PY_TIMEOUT {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "the reference client did not finish within {PY_TIMEOUT:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "reference client failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Uploads `files`; returns (Xet hash, size) of each.
    pub fn upload(&self, s: &TestServer, cache: &Path, files: &[PathBuf]) -> Vec<(String, u64)> {
        self.upload_to(s.url(), cache, files)
    }

    /// [`Self::upload`] to the server at `url` (with the test write token).
    pub fn upload_to(&self, url: &str, cache: &Path, files: &[PathBuf]) -> Vec<(String, u64)> {
        let mut args = vec![url.to_string(), WRITE_TOKEN.to_string()];
        args.extend(files.iter().map(|p| p.display().to_string()));
        let out = self.run(cache, UPLOAD, &args);
        let json: Value = serde_json::from_str(out.trim().lines().last().unwrap()).unwrap();
        json.as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["hash"].as_str().unwrap().to_string(),
                    v["size"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    /// Downloads each (dest, hash, size).
    pub fn download(&self, s: &TestServer, cache: &Path, files: &[(PathBuf, String, u64)]) {
        self.download_from(s.url(), cache, files)
    }

    /// [`Self::download`] from the server at `url` (with the test write token).
    pub fn download_from(&self, url: &str, cache: &Path, files: &[(PathBuf, String, u64)]) {
        self.download_as(url, WRITE_TOKEN, cache, files)
    }

    /// [`Self::download_from`] with `token` (a secret or a CAS token).
    pub fn download_as(
        &self,
        url: &str,
        token: &str,
        cache: &Path,
        files: &[(PathBuf, String, u64)],
    ) {
        let spec: Vec<Value> = files
            .iter()
            .map(|(dest, hash, size)| {
                serde_json::json!({"dest": dest.display().to_string(), "hash": hash, "size": size})
            })
            .collect();
        let args = vec![
            url.to_string(),
            token.to_string(),
            Value::Array(spec).to_string(),
        ];
        assert_eq!(self.run(cache, DOWNLOAD, &args).trim(), "ok");
    }
}
