//! The server's limits, one at a time, against an in-process `git xet serve` with shortened
//! timeouts: stalled readers cut off and their download slots freed (503 with `Retry-After`
//! while saturated), stalled writers answered 408 without holding a thread each, the cap on
//! connections, the request-head timeout, the memory budget of small bodies, chunked bodies
//! over the limit, shutdown within its deadline, damaged chunks never sent, and (where a tiny
//! filesystem can be mounted) 507 for a full disk.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use xet_test_tools::needs;

use reqwest::blocking::Client;
use serde_json::Value;

use crate::common;

use common::server::{
    connect, stalled_get, stalled_upload, ServeProcess, TestServer, READ_TOKEN, WRITE_TOKEN,
};

const REPO: &str = "team/limits.git";

fn http() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Reads until the end of a response head (or EOF); the head as text.
fn read_head(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).to_string()
}

/// Reads until the server closes the connection; the bytes read, or `None` if the socket stayed
/// open (a read timed out).
fn read_until_closed(s: &mut TcpStream) -> Option<u64> {
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Some(total),
            Err(e) => {
                eprintln!("read {total} bytes, then: {e}");
                return None;
            }
        }
    }
}

fn object_path(oid: &str) -> String {
    format!("/{REPO}/info/lfs/objects/{oid}")
}

/// Uploads `bytes` with a basic PUT; returns the oid.
fn put_object(s: &TestServer, bytes: &[u8]) -> String {
    let oid = common::sha256_hex(bytes);
    let r = http()
        .put(format!("{}{}", s.url(), object_path(&oid)))
        .bearer_auth(WRITE_TOKEN)
        .body(bytes.to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text());
    oid
}

/// The path and query of the presigned URL of the (single) xorb of a stored object.
fn presigned_path(s: &TestServer, oid: &str) -> String {
    let file: Value = http()
        .get(format!("{}/v1/lfs-files/{oid}", s.url()))
        .bearer_auth(READ_TOKEN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let rec: Value = http()
        .get(format!(
            "{}/v1/reconstructions/{}",
            s.url(),
            file["file_hash"].as_str().unwrap()
        ))
        .bearer_auth(READ_TOKEN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let url = rec["fetch_info"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()[0]["url"]
        .as_str()
        .unwrap()
        .to_string();
    url.strip_prefix(s.url()).unwrap().to_string()
}

/// Asserts a 503 `server_busy` answer with `Retry-After`.
fn assert_busy(r: reqwest::blocking::Response) {
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: Value = r.json().unwrap();
    assert_eq!(body["error"], "server_busy", "{body}");
}

fn spool_files(s: &TestServer) -> usize {
    std::fs::read_dir(s.store_dir().join("tmp"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("spool-"))
                .count()
        })
        .unwrap_or(0)
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn stalled_readers_are_cut_off_and_their_download_slots_freed() {
    let s = common::server::start_with(|c| {
        c.limits.send_timeout = Duration::from_secs(3);
        c.limits.max_downloads = 2;
    });
    let big = common::splitmix64(1, 24 << 20);
    let oid = put_object(&s, &big);
    let presigned = presigned_path(&s, &oid);
    let addr = s.server.addr;

    let mut readers = vec![
        stalled_get(addr, &object_path(&oid), Some(READ_TOKEN)),
        stalled_get(addr, &presigned, None),
    ];
    // Both download slots are taken: a third download is 503, other classes are not affected.
    wait_for("downloads saturated", Duration::from_secs(10), || {
        let r = http()
            .get(format!("{}{presigned}", s.url()))
            .send()
            .unwrap();
        if r.status() == 503 {
            assert_busy(r);
            true
        } else {
            false
        }
    });
    let r = http()
        .get(format!("{}{}", s.url(), object_path(&oid)))
        .bearer_auth(READ_TOKEN)
        .send()
        .unwrap();
    assert_busy(r);
    let small = common::splitmix64(2, 100_000);
    put_object(&s, &small);
    assert_eq!(
        http()
            .get(format!("{}/health", s.url()))
            .send()
            .unwrap()
            .status(),
        200
    );

    // The server closes both stalled connections once their writes stall for 3 s (after the
    // socket buffers filled up): what the client can still read is a truncated response.
    std::thread::sleep(Duration::from_secs(6));
    for r in &mut readers {
        let got = read_until_closed(r).expect("the server closes a stalled reader's connection");
        assert!(
            got < big.len() as u64,
            "only part of the body was sent ({got} bytes)"
        );
    }

    // Their slots are free again: whole downloads go through, byte for byte.
    let got = http()
        .get(format!("{}{}", s.url(), object_path(&oid)))
        .bearer_auth(READ_TOKEN)
        .send()
        .unwrap();
    assert_eq!(got.status(), 200);
    assert!(got.bytes().unwrap()[..] == big[..]);
    let r = http()
        .get(format!("{}{presigned}", s.url()))
        .send()
        .unwrap();
    assert_eq!(r.status(), 206, "the range the URL grants");
    assert!(r.bytes().unwrap().len() > big.len() / 2);
}

#[test]
fn stalled_writers_get_408_and_hold_no_thread() {
    // More stalled uploads than tokio's blocking pool has threads (512).
    const STALLED: usize = 600;
    let s = common::server::start_with(|c| {
        c.limits.body_timeout = Duration::from_secs(3);
        c.limits.max_uploads = 2 * STALLED;
    });
    let addr = s.server.addr;
    let opened = Instant::now();
    let mut writers: Vec<TcpStream> = (0..STALLED as u64)
        .map(|i| {
            let oid = common::sha256_hex(&i.to_le_bytes());
            stalled_upload(addr, "PUT", &object_path(&oid), 10 << 20, 32 << 10)
        })
        .collect();
    wait_for(
        "every stalled body spooled",
        Duration::from_secs(20),
        || spool_files(&s) == STALLED,
    );
    // Meanwhile uploads and downloads of others go through, promptly.
    let served = Instant::now();
    let data = common::splitmix64(3, 1 << 20);
    let oid = put_object(&s, &data);
    let r = http()
        .get(format!("{}{}", s.url(), object_path(&oid)))
        .bearer_auth(READ_TOKEN)
        .send()
        .unwrap();
    assert!(r.bytes().unwrap()[..] == data[..]);
    let served = served.elapsed();
    assert!(served < Duration::from_secs(10), "took {served:?}");

    // Each stalled writer is told 408 once its body has paused for the body timeout.
    for w in &mut writers {
        let head = read_head(w);
        assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    }
    let all = opened.elapsed();
    eprintln!(
        "{STALLED} stalled uploads: others served in {served:?}, all answered 408 after {all:?}"
    );
    assert!(all < Duration::from_secs(30), "{all:?}");
    wait_for("spool files removed", Duration::from_secs(10), || {
        spool_files(&s) == 0
    });
}

#[test]
fn connections_over_the_cap_are_told_to_retry() {
    let s = common::server::start_with(|c| c.limits.max_connections = 4);
    let addr = s.server.addr;
    let mut idle: Vec<TcpStream> = (0..4).map(|_| connect(addr)).collect();
    // Let the server accept them all.
    std::thread::sleep(Duration::from_millis(300));
    let mut extra = connect(addr);
    let head = read_head(&mut extra);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(head.contains("Retry-After: 1"), "{head}");
    let mut rest = String::new();
    let _ = extra.read_to_string(&mut rest);
    assert!(rest.contains("server_busy"), "{rest}");

    // One fewer, and a new connection is served.
    idle.pop();
    wait_for("a slot frees up", Duration::from_secs(10), || {
        http()
            .get(format!("{}/health", s.url()))
            .send()
            .is_ok_and(|r| r.status() == 200)
    });
    drop(idle);
}

#[test]
fn request_heads_must_arrive_in_time_and_idle_connections_close() {
    let s = common::server::start_with(|c| c.limits.header_timeout = Duration::from_millis(500));
    let addr = s.server.addr;
    // Half a head, then nothing.
    let mut slow = connect(addr);
    write!(slow, "GET /health HTTP/1.1\r\nHost: x\r\n").unwrap();
    let started = Instant::now();
    assert!(
        read_until_closed(&mut slow).is_some(),
        "the server closed it"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");

    // A keep-alive connection after one request: closed once idle for the header timeout.
    let mut idle = connect(addr);
    write!(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let head = read_head(&mut idle);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        read_until_closed(&mut idle).is_some(),
        "the idle connection was closed"
    );
}

#[test]
fn small_bodies_share_a_memory_budget() {
    let s = common::server::start_with(|c| c.limits.body_memory = 1 << 20);
    let addr = s.server.addr;
    let batch = || {
        http()
            .post(format!("{}/{REPO}/info/lfs/objects/batch", s.url()))
            .bearer_auth(READ_TOKEN)
            .body(r#"{"operation":"download","objects":[]}"#)
            .send()
            .unwrap()
    };
    assert_eq!(batch().status(), 200);
    // A shard upload that declared 1 MiB and sent all but 16 bytes of it holds the whole
    // budget: its buffer grows to what it declared, at most (the buffer is charged, not the
    // bytes in it, so a 40-byte batch request does not fit any more).
    let stalled_shard = || {
        let s = stalled_upload(addr, "POST", "/v1/shards", 1 << 20, (1 << 20) - 16);
        s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        s
    };
    let mut shard = stalled_shard();
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the budget is never spent"
        );
        let r = batch();
        if r.status() == 503 {
            assert_busy(r);
            break;
        }
        // A batch request in flight while the shard's buffer grew makes the shard the one
        // refused (it gets an answer): then start it again.
        if shard.peek(&mut [0u8; 1]).is_ok() {
            shard = stalled_shard();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Once that client goes away, its share comes back.
    drop(shard);
    wait_for("the budget is back", Duration::from_secs(10), || {
        batch().status() == 200
    });
}

#[test]
fn chunked_bodies_longer_than_their_limit_are_413() {
    let s = common::server::start();
    let limit = git_xet::server::cas::upload::TELEMETRY_LIMIT as usize;
    let mut sock = connect(s.server.addr);
    // A chunked body (no Content-Length) one chunk longer than the limit, sent in full.
    let mut request = format!(
        "POST /v1/telemetry HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {READ_TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..(limit / 8192 + 1) {
        request.extend_from_slice(format!("{:x}\r\n", 8192).as_bytes());
        request.extend_from_slice(&[b' '; 8192]);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let _ = sock.write_all(&request);
    let head = read_head(&mut sock);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
}

#[test]
fn shutdown_finishes_requests_in_flight_and_cuts_stalled_ones_at_the_deadline() {
    let deadline = Duration::from_secs(2);
    let s = common::server::start_with(|c| c.limits.shutdown_timeout = deadline);
    let big = common::splitmix64(4, 16 << 20);
    let oid = put_object(&s, &big);
    let addr = s.server.addr;
    let stalled = stalled_upload(addr, "PUT", &object_path(&"a".repeat(64)), 1 << 20, 1000);
    // A download in flight, read slowly.
    let mut reader = stalled_get(addr, &object_path(&oid), Some(READ_TOKEN));
    let head = read_head(&mut reader);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut first = vec![0u8; 1 << 20];
    reader.read_exact(&mut first).unwrap();

    let TestServer { server, dir } = s;
    let stopping = std::thread::spawn(move || {
        let started = Instant::now();
        server.stop().expect("stops cleanly");
        started.elapsed()
    });
    std::thread::sleep(Duration::from_millis(300));
    // New connections are refused once the listener is closed.
    assert!(TcpStream::connect(addr).is_err(), "the listener is closed");
    // The download in flight still completes.
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    first.extend_from_slice(&rest);
    assert!(
        first == big,
        "the download in flight completed during the shutdown"
    );
    // The stalled upload does not hold the shutdown past its deadline.
    let took = stopping.join().unwrap();
    eprintln!("stop took {took:?} with a {deadline:?} deadline");
    assert!(took >= deadline - Duration::from_millis(500), "{took:?}");
    assert!(took < deadline + Duration::from_secs(3), "{took:?}");
    drop((stalled, dir));
}

#[test]
fn damaged_chunks_are_never_sent() {
    let s = common::server::start();
    let data = common::splitmix64(5, 4 << 20);
    let oid = put_object(&s, &data);
    // Flip a byte in the middle of the stored xorb's chunk data.
    let mut xorbs = Vec::new();
    for d in std::fs::read_dir(s.store_dir().join("xorbs"))
        .unwrap()
        .flatten()
    {
        for f in std::fs::read_dir(d.path()).unwrap().flatten() {
            xorbs.push(f.path());
        }
    }
    assert_eq!(xorbs.len(), 1, "{xorbs:?}");
    let mut stored = std::fs::read(&xorbs[0]).unwrap();
    let at = stored.len() / 2;
    stored[at] ^= 0x55;
    std::fs::write(&xorbs[0], &stored).unwrap();

    // The store notices the object changed since it was verified, verifies it before the
    // response starts and refuses it naming the xorb; damage it could not notice beforehand
    // (silent media errors) ends the body early, after a correct prefix.
    let mut sock = stalled_get(s.server.addr, &object_path(&oid), Some(READ_TOKEN));
    let head = read_head(&mut sock);
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let mut got = Vec::new();
    let _ = (&mut sock).take(length).read_to_end(&mut got);
    if head.starts_with("HTTP/1.1 200") {
        assert!(
            got.len() < data.len(),
            "the body stops early ({} bytes)",
            got.len()
        );
        assert!(
            got[..] == data[..got.len()],
            "what was sent is the right data"
        );
    } else {
        assert!(head.starts_with("HTTP/1.1 500"), "{head}");
        let body = String::from_utf8_lossy(&got);
        assert!(body.contains("xorb_damaged"), "{body}");
        let name = xorbs[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(body.contains(&name), "the xorb is named: {body}");
    }
}

#[needs(userns_mount)]
#[test]
fn a_full_disk_is_507_not_500() {
    // A private 4 MiB tmpfs holds the store: needs unshare and a kernel that allows mounting a
    // tmpfs in a user namespace.
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let probe = std::process::Command::new("unshare")
        .args([
            "-rm",
            "sh",
            "-c",
            "mount -t tmpfs -o size=1m tmpfs \"$1\"",
            "sh",
        ])
        .arg(&mnt)
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "cannot mount a tmpfs in a user namespace here (unshare -rm): see build.rs"
    );
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "-rm",
        "sh",
        "-c",
        "mount -t tmpfs -o size=4m tmpfs \"$1\" && shift && exec \"$@\"",
        "sh",
    ])
    .arg(&mnt)
    .arg(env!("CARGO_BIN_EXE_git-xet"))
    .args(common::server::serve_args(&mnt.join("store")));
    let server = ServeProcess::from_command(cmd, dir);
    let body = common::splitmix64(6, 8 << 20);
    // A basic upload and a xorb upload larger than the disk: 507 with a JSON code.
    let oid = common::sha256_hex(&body);
    let r = http()
        .put(format!("{}{}", server.url, object_path(&oid)))
        .bearer_auth(WRITE_TOKEN)
        .body(body.clone())
        .send()
        .unwrap();
    assert_eq!(r.status(), 507, "{:?}", r.text());
    let v: Value = r.json().unwrap();
    assert_eq!(v["error"], "insufficient_storage", "{v}");
    let r = http()
        .post(format!(
            "{}/v1/xorbs/default/{}",
            server.url,
            "b".repeat(64)
        ))
        .bearer_auth(WRITE_TOKEN)
        .body(body)
        .send()
        .unwrap();
    assert_eq!(r.status(), 507);
    let v: Value = r.json().unwrap();
    assert_eq!(v["error"], "insufficient_storage", "{v}");
    // The server still answers, and the failed spool files are gone (seen through the
    // server's own view of its mounts).
    let r = http().get(format!("{}/health", server.url)).send().unwrap();
    assert_eq!(r.status(), 200);
    let tmp = std::path::Path::new(&format!("/proc/{}/root", server.pid()))
        .join(mnt.strip_prefix("/").unwrap())
        .join("store/tmp");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(server.log().contains("storage full"), "{}", server.log());
}
