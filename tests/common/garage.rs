//! A single-node Garage (a real distributed S3-compatible object store) for tests, or a cluster
//! of three ([`GarageCluster`]): a config file of its own in a temporary directory, loopback
//! ports, its layout, a key and buckets made with its CLI. It is killed when dropped, and stops by itself after ten minutes in any case.
//!
//! Garage is installed with `cargo install garage --version 2.5.0 --locked` (`.ci/run` does
//! it). Tests that need it are marked `#[needs(garage)]`: ignored, saying so, where
//! Garage was missing when the tests were built, and failing when run anyway.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xet_store::s3::{S3Config, StorageUrl};

/// The reason on every test that needs Garage.
#[allow(dead_code)]
pub const NEEDS_GARAGE: &str = "needs Garage: cargo install garage --version 2.5.0 --locked";

/// The Garage binary: `$GARAGE`, on PATH, or in cargo's bin directory.
pub fn binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("GARAGE") {
        return Some(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("garage"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
        let p = home.join("bin").join("garage");
        p.is_file().then_some(p)
    })
}

/// A running single-node Garage with one key allowed on every bucket it creates.
pub struct Garage {
    child: Child,
    bin: PathBuf,
    config: PathBuf,
    pub dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    pub key_id: String,
    pub secret: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Garage {
    /// Starts Garage and sets it up; panics (naming the step) if it cannot.
    pub fn start() -> Self {
        // A port picked free can be taken by another test before Garage binds it: then start
        // again on other ports.
        let mut last = String::new();
        for _ in 0..4 {
            match Self::try_start() {
                Ok(g) => return g,
                Err(why) => last = why,
            }
        }
        panic!("garage did not start: {last}");
    }

    fn try_start() -> Result<Self, String> {
        let mut g = Self::try_spawn(1, &Self::rpc_secret())?;
        g.set_up();
        Ok(g)
    }

    /// The secret the nodes of a cluster share.
    fn rpc_secret() -> String {
        (0..32)
            .map(|i| format!("{:02x}", (i * 37 + 11) as u8))
            .collect()
    }

    /// Starts a Garage process that keeps `replication` copies of each object, and waits until
    /// it answers; no layout, key or bucket yet.
    fn try_spawn(replication: usize, secret: &str) -> Result<Self, String> {
        let bin = binary().unwrap_or_else(|| panic!("Garage is not installed ({NEEDS_GARAGE})"));
        let dir = tempfile::tempdir().expect("temp dir");
        let (rpc, s3, admin) = (free_port(), free_port(), free_port());
        let config = dir.path().join("garage.toml");
        let text = format!(
            "metadata_dir = \"{meta}\"\n\
             data_dir = \"{data}\"\n\
             db_engine = \"sqlite\"\n\
             replication_factor = {replication}\n\
             rpc_bind_addr = \"127.0.0.1:{rpc}\"\n\
             rpc_public_addr = \"127.0.0.1:{rpc}\"\n\
             rpc_secret = \"{secret}\"\n\
             [s3_api]\n\
             s3_region = \"garage\"\n\
             api_bind_addr = \"127.0.0.1:{s3}\"\n\
             root_domain = \".s3.garage.localhost\"\n\
             [admin]\n\
             api_bind_addr = \"127.0.0.1:{admin}\"\n",
            meta = dir.path().join("meta").display(),
            data = dir.path().join("data").display(),
        );
        std::fs::write(&config, text).expect("write garage.toml");
        let child = spawn(&bin, &config, dir.path());
        let mut g = Self {
            child,
            bin,
            config,
            dir,
            endpoint: format!("http://127.0.0.1:{s3}"),
            key_id: String::new(),
            secret: String::new(),
        };
        g.wait_until_up()?;
        Ok(g)
    }

    /// Runs the Garage CLI against this instance; its stdout, or a panic with what it said.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(&self.bin)
            .arg("-c")
            .arg(&self.config)
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run the garage CLI");
        assert!(
            out.status.success(),
            "garage {args:?}: {}{}\nserver log: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("garage.log")).unwrap_or_default()
    }

    /// Waits until the server answers on its RPC port (`garage status`); `Err` if it exited
    /// (a port taken) or did not answer within a minute.
    fn wait_until_up(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let ok = Command::new(&self.bin)
                .arg("-c")
                .arg(&self.config)
                .arg("status")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("garage exited ({status}): {}", self.log()));
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!("no answer within a minute: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn set_up(&mut self) {
        let id = self.cli(&["node", "id", "-q"]);
        let id = id.trim().split('@').next().unwrap_or("").to_string();
        self.cli(&["layout", "assign", "-z", "dc1", "-c", "1G", &id]);
        self.cli(&["layout", "apply", "--version", "1"]);
        self.make_key();
    }

    /// Creates the test key (`git-xet-tests`) and keeps its id and secret.
    fn make_key(&mut self) {
        let created = self.cli(&["key", "create", "git-xet-tests"]);
        let field = |name: &str| {
            created
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == name).then(|| v.trim().to_string())
                })
                .unwrap_or_else(|| panic!("no {name:?} in `garage key create`: {created}"))
        };
        self.key_id = field("Key ID");
        self.secret = field("Secret key");
    }

    /// Creates `bucket` and allows the test key on it; returns once the key can list it (a
    /// request right after the CLI answered was refused now and then, `400 Bad Request`).
    pub fn create_bucket(&self, bucket: &str) {
        use xet_store::backend::ObjectBackend as _;
        self.cli(&["bucket", "create", bucket]);
        self.cli(&[
            "bucket",
            "allow",
            "--read",
            "--write",
            "--owner",
            bucket,
            "--key",
            "git-xet-tests",
        ]);
        let spool = tempfile::tempdir().expect("a spool directory");
        // Garage answers "Unknown API endpoint" for a new bucket until its layout has it,
        // which took over 20 s once under the full suite's load.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let listed = xet_store::s3::S3Backend::open(
                &self.s3_config(bucket, ""),
                spool.path(),
                0,
                Self::runtime(),
            )
            .and_then(|b| b.list_shards());
            match listed {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => {
                    panic!("bucket {bucket} is not usable with the test key: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The `AWS_*` settings that reach this instance with the test key.
    pub fn settings(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT".into(), self.endpoint.clone()),
            ("AWS_REGION".into(), "garage".into()),
            ("AWS_ACCESS_KEY_ID".into(), self.key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY".into(), self.secret.clone()),
        ]
    }

    /// Where a store in `bucket` under `prefix` is, with the test key.
    pub fn s3_config(&self, bucket: &str, prefix: &str) -> S3Config {
        let url: StorageUrl = format!("s3://{bucket}/{prefix}")
            .parse()
            .expect("storage URL");
        S3Config {
            url,
            settings: self.settings(),
        }
    }

    /// A store of a node with its own directory `dir` on `bucket` (no prefix), as `git xet
    /// serve --storage` opens it.
    pub fn open_store(&self, bucket: &str, dir: &std::path::Path) -> xet_store::Store {
        self.open_store_with(bucket, dir, Default::default())
    }

    /// [`Self::open_store`] with options.
    pub fn open_store_with(
        &self,
        bucket: &str,
        dir: &std::path::Path,
        options: xet_store::StoreOptions,
    ) -> xet_store::Store {
        xet_store::Store::open_s3(dir, options, &self.s3_config(bucket, ""), Self::runtime())
            .expect("a store on the bucket")
    }

    /// The runtime a test's S3 backends run their requests on (a server brings its own): one
    /// for the whole test binary, as a server has one for all its stores.
    pub fn runtime() -> tokio::runtime::Handle {
        static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
        RUNTIME
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a runtime for the S3 backends of tests")
            })
            .handle()
            .clone()
    }

    /// Kills the server (an outage of the store): requests are refused until [`Self::restart`].
    #[allow(dead_code)]
    pub fn kill(&mut self) {
        kill_group(&mut self.child);
    }

    /// Starts the killed server again, on the same ports with the same data, and waits until
    /// it answers.
    #[allow(dead_code)]
    pub fn restart(&mut self) {
        self.child = spawn(&self.bin, &self.config, self.dir.path());
        self.wait_until_up()
            .unwrap_or_else(|e| panic!("garage did not start again: {e}"));
    }

    /// The data directory of the instance (to measure what it stores).
    #[allow(dead_code)]
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Three Garage processes on loopback forming one cluster that keeps three copies of every
/// object (each in a zone of its own), so that any one of them can die and the others still
/// answer reads and writes (Garage's quorums are two of three).
#[allow(dead_code)]
pub struct GarageCluster {
    pub nodes: Vec<Garage>,
}

#[allow(dead_code)]
impl GarageCluster {
    /// Starts the three nodes, connects them, lays them out and makes the test key.
    pub fn start() -> Self {
        let secret = Garage::rpc_secret();
        let mut nodes: Vec<Garage> = Vec::new();
        while nodes.len() < 3 {
            let mut last = String::new();
            let started = (0..4).find_map(|_| match Garage::try_spawn(3, &secret) {
                Ok(g) => Some(g),
                Err(why) => {
                    last = why;
                    None
                }
            });
            nodes.push(started.unwrap_or_else(|| panic!("garage did not start: {last}")));
        }
        let ids: Vec<String> = nodes
            .iter()
            .map(|g| g.cli(&["node", "id", "-q"]).trim().to_string())
            .collect();
        for id in &ids[1..] {
            nodes[0].cli(&["node", "connect", id]);
        }
        for (i, id) in ids.iter().enumerate() {
            let short = id.split('@').next().unwrap_or("");
            nodes[0].cli(&[
                "layout",
                "assign",
                "-z",
                &format!("dc{i}"),
                "-c",
                "1G",
                short,
            ]);
        }
        nodes[0].cli(&["layout", "apply", "--version", "1"]);
        nodes[0].make_key();
        let (key_id, secret) = (nodes[0].key_id.clone(), nodes[0].secret.clone());
        for g in &mut nodes[1..] {
            g.key_id = key_id.clone();
            g.secret = secret.clone();
        }
        Self { nodes }
    }

    /// Creates `bucket` (through the first node) and waits until every node serves it.
    pub fn create_bucket(&self, bucket: &str) {
        self.nodes[0].create_bucket(bucket);
    }

    /// Where a store in `bucket` under `prefix` is: every node's endpoint, the first node's
    /// first ([`S3Config::ENDPOINTS`]).
    pub fn s3_config(&self, bucket: &str, prefix: &str) -> S3Config {
        let mut config = self.nodes[0].s3_config(bucket, prefix);
        config.settings.retain(|(k, _)| k != "AWS_ENDPOINT");
        let all: Vec<&str> = self.nodes.iter().map(|g| g.endpoint.as_str()).collect();
        config
            .settings
            .push((S3Config::ENDPOINTS.into(), all.join(",")));
        config
    }
}

/// Starts `garage server` with `config`, its log appended to `dir`/garage.log; `timeout` bounds
/// its life even if this test process is killed.
fn spawn(bin: &Path, config: &Path, dir: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("garage.log"))
        .expect("garage.log");
    Command::new("timeout")
        .args(["--signal=KILL", "600"])
        .process_group(0)
        .arg(bin)
        .arg("-c")
        .arg(config)
        .arg("server")
        .env("RUST_LOG", "garage=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start garage")
}

/// Kills `child`'s whole process group (`timeout` and Garage under it) and reaps it.
fn kill_group(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Garage {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}
