//! A tiny HTTP/1.1 server on 127.0.0.1 for tests (this crate's, and with the `test-util`
//! feature those of crates built on it): answers each request with a handler, records every
//! request (method, path, headers, body, arrival time), stops when dropped or by itself after a
//! minute. One request per connection (`Connection: close`). Written by hand on `std`'s
//! `TcpListener` so that a test can script any answer, malformed ones included.

// Test code: a failure should stop the test right there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A request as the fake server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The request line, headers and body as one text, for "never contains" checks.
    pub fn text(&self) -> String {
        let mut t = format!("{} {}\n", self.method, self.path);
        for (k, v) in &self.headers {
            t.push_str(&format!("{k}: {v}\n"));
        }
        t.push_str(&String::from_utf8_lossy(&self.body));
        t
    }
}

/// A canned answer.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

pub fn reply(status: u16, body: &str) -> Reply {
    Reply {
        status,
        headers: vec![],
        body: body.as_bytes().to_vec(),
    }
}

/// A reply header that is not sent: its value is the `Content-Length` announced instead of
/// the body's length, for a body that breaks off.
pub const FAKE_LENGTH: &str = "x-fake-content-length";

type Handler = Box<dyn FnMut(&Seen) -> Reply + Send>;

/// A CAS behind a token refresh route: `GET /refresh` answers the token `fresh` (valid for 15
/// minutes) after `refresh_delay`; every other request succeeds (`{"was_inserted":false}`) with
/// `Authorization: Bearer fresh` and is refused with 401 otherwise.
pub fn refreshing_cas(refresh_delay: Duration) -> Fake {
    Fake::start(move |req| {
        if req.path == "/refresh" {
            std::thread::sleep(refresh_delay);
            let exp = xet_protocol::util::now_unix() + 900;
            return reply(
                200,
                &format!(r#"{{"casUrl":"http://cas.example","accessToken":"fresh","exp":{exp}}}"#),
            );
        }
        if req.header("authorization") == Some("Bearer fresh") {
            reply(200, r#"{"was_inserted":false}"#)
        } else {
            reply(
                401,
                r#"{"error":"token_expired","message":"token expired"}"#,
            )
        }
    })
}

/// The running fake.
pub struct Fake {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Fake {
    pub fn start(handler: impl FnMut(&Seen) -> Reply + Send + 'static) -> Fake {
        Self::start_on(0, handler)
    }

    /// A fake on `port` of 127.0.0.1 (0: any free port).
    pub fn start_on(port: u16, handler: impl FnMut(&Seen) -> Reply + Send + 'static) -> Fake {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let mut handler: Handler = Box::new(handler);
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => serve_one(stream, &mut handler, &seen2),
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Fake {
            url,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn paths(&self) -> Vec<String> {
        self.seen().into_iter().map(|s| s.path).collect()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(stream: TcpStream, handler: &mut Handler, log: &Mutex<Vec<Seen>>) {
    if let Some(seen) = read_request(&stream) {
        let r = handler(&seen);
        log.lock().unwrap().push(seen);
        // A reply may announce more than its body (FAKE_LENGTH): the body then breaks off.
        let length = (r.headers.iter())
            .find(|(k, _)| *k == FAKE_LENGTH)
            .map_or(r.body.len().to_string(), |(_, v)| v.clone());
        let mut out = format!(
            "HTTP/1.1 {} X\r\nContent-Length: {length}\r\nConnection: close\r\n",
            r.status,
        );
        for (k, v) in r.headers.iter().filter(|(k, _)| *k != FAKE_LENGTH) {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        let mut stream = stream;
        let _ = stream.write_all(out.as_bytes());
        let _ = stream.write_all(&r.body);
        let _ = stream.flush();
    }
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    stream.set_nonblocking(false).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        at: Instant::now(),
        method,
        path,
        headers,
        body,
    })
}
