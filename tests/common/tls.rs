//! TLS for tests: a CA made for the test, a server certificate for 127.0.0.1 and localhost, a
//! client certificate, and nginx from Debian's packages as the TLS-terminating reverse proxy in
//! front of a server on this machine (started by the test, on 127.0.0.1, stopped when dropped).
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// PEM files of a test PKI.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    /// A CA, a server certificate for `127.0.0.1` and `localhost`, and a client certificate,
    /// all signed by the CA.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "git-xet test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(names).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = vec![usage];
            let cert = p.signed_by(&key, &issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "127.0.0.1",
        );
        let (client_cert, client_key) = leaf(
            vec!["client.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            "developer",
        );
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        Self {
            ca: write("ca.pem", &ca_cert.pem()),
            server_cert: write("server.pem", &server_cert),
            server_key: write("server.key", &server_key),
            client_cert: write("client.pem", &client_cert),
            client_key: write("client.key", &client_key),
            dir,
        }
    }
}

impl Pki {
    /// [`Pki::new`] whose server certificate is self-signed and a CA certificate
    /// (`basicConstraints CA:TRUE`, for `127.0.0.1` and `localhost`), as `openssl req -x509`
    /// makes one; `ca` is that same certificate, as a user points `http.sslCAInfo` at it.
    pub fn self_signed() -> Self {
        let pki = Self::new();
        let key = KeyPair::generate().unwrap();
        let mut p =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()]).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        let cert = p.self_signed(&key).unwrap();
        std::fs::write(&pki.server_cert, cert.pem()).unwrap();
        std::fs::write(&pki.server_key, key.serialize_pem()).unwrap();
        std::fs::write(&pki.ca, cert.pem()).unwrap();
        pki
    }
}

/// nginx (Debian's `nginx` package, `/usr/sbin/nginx`); panics, saying what to install, when it
/// is missing (tests that need it are listed as ignored there: see `build.rs`).
pub fn nginx() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("nginx is not installed: apt-get install nginx"))
}

/// A free port on 127.0.0.1 (bound, then released for the caller to bind).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// nginx terminating TLS on 127.0.0.1 and passing everything to `backend`.
pub struct Nginx {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx with the server certificate of `pki` in front of `backend`
    /// (`127.0.0.1:PORT`) on `port`; `client_certs`: clients must show a certificate of the
    /// PKI's CA. No limit on request bodies, no buffering either way, `Range` passed through.
    pub fn start(bin: &Path, pki: &Pki, port: u16, backend: &str, client_certs: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let verify = if client_certs {
            format!(
                "ssl_client_certificate {}; ssl_verify_client on;",
                pki.ca.display()
            )
        } else {
            String::new()
        };
        let conf = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 512; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {cert}; ssl_certificate_key {key};
    {verify}
    client_max_body_size 0;
    proxy_request_buffering off;
    proxy_buffering off;
    proxy_http_version 1.1;
    proxy_read_timeout 300s;
    proxy_send_timeout 300s;
    location / {{
      proxy_pass http://{backend};
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-Proto https;
    }}
  }}
}}
",
            cert = pki.server_cert.display(),
            key = pki.server_key.display(),
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new(bin)
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
            .spawn()
            .expect("nginx starts");
        let nginx = Self { child, port, dir };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "nginx did not listen on {port}: {}",
                nginx.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// nginx's error log (and what it printed).
    pub fn log(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        read("stderr.log") + &read("error.log")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
