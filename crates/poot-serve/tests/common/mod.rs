//! Shared by the server tests: start `poot-serve` on the tiny chat fixture (wgpu backend, a free
//! loopback port), and speak raw HTTP/1.1 to it.

#![allow(clippy::unwrap_used, dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

pub const MODEL_ID: &str = "tiny-chat";

pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chat")
}

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether a Vulkan adapter opens; prints the SKIP line when not.
pub fn vulkan_or_skip(test: &str) -> bool {
    match poot_llm::open_executor(poot_llm::BackendChoice::Wgpu) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIP {test}: no Vulkan adapter: {e}");
            false
        }
    }
}

/// A running server, killed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    /// Starts the server on the fixture with `extra` flags and waits until it listens.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_model(fixture().as_os_str(), extra, &[])
    }

    /// Starts the server on `model` (a path or a Hub repository) with `extra` flags and `env`
    /// set, and waits until it listens.
    pub fn start_model(
        model: &std::ffi::OsStr,
        extra: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Server {
        Server::start_on("wgpu", model, extra, env)
    }

    /// [`Server::start_model`] on `backend` (`wgpu`, `cpu`).
    pub fn start_on(
        backend: &str,
        model: &std::ffi::OsStr,
        extra: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_poot-serve"))
            .arg("--model")
            .arg(model)
            .args(["--backend", backend, "--host", "127.0.0.1", "--port", "0"])
            .envs(env.iter().map(|(k, v)| (*k, *v)))
            // Software Vulkan compiles slowly: prepare step variants only when a test needs
            // them, unless the test chooses.
            .args(if extra.contains(&"--prepare-variants") {
                &[][..]
            } else {
                &["--prepare-variants", "first-use"][..]
            })
            .args(extra)
            .env(
                "XDG_RUNTIME_DIR",
                std::env::var("XDG_RUNTIME_DIR").unwrap_or("/tmp".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[server] {line}");
                sink.lock().unwrap().push(line);
            }
        });
        let (port_tx, port_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening on http://") {
                    let port = addr.rsplit(':').next().unwrap().parse::<u16>().unwrap();
                    let _ = port_tx.send(port);
                }
            }
        });
        let port = match port_rx.recv_timeout(Duration::from_secs(180)) {
            Ok(port) => port,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(100));
                panic!("the server did not start: {:?}", log.lock().unwrap());
            }
        };
        Server { child, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        s
    }

    /// Sends one request and reads the whole response.
    pub fn request(&self, method: &str, path: &str, body: &str, headers: &[&str]) -> Response {
        let mut s = self.connect();
        write_request(&mut s, method, path, body, headers);
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        Response::parse(&raw)
    }

    pub fn post(&self, path: &str, body: &str) -> Response {
        self.request("POST", path, body, &[])
    }

    /// The value of an unlabelled metric (or one whose labels are written out in `name`).
    pub fn metric(&self, name: &str) -> f64 {
        let r = self.request("GET", "/metrics/prometheus", "", &[]);
        assert_eq!(r.status, 200);
        r.body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (n, v) = l.rsplit_once(' ')?;
                (n == name).then(|| v.parse::<f64>().unwrap())
            })
            .unwrap_or(0.0)
    }

    /// Polls `metric` until `ok` holds or `timeout` passes; returns the last value.
    pub fn wait_metric(&self, name: &str, timeout: Duration, ok: impl Fn(f64) -> bool) -> f64 {
        let start = Instant::now();
        loop {
            let v = self.metric(name);
            if ok(v) || start.elapsed() > timeout {
                return v;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn write_request(s: &mut TcpStream, method: &str, path: &str, body: &str, headers: &[&str]) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
}

/// A parsed HTTP response (chunked bodies decoded).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn parse(raw: &[u8]) -> Response {
        let text = String::from_utf8_lossy(raw);
        let (head, rest) = text.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let body = if chunked {
            dechunk(rest)
        } else {
            rest.to_owned()
        };
        Response {
            status,
            headers,
            body,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of a server-sent event stream.
    pub fn events(&self) -> Vec<String> {
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_owned)
            .collect()
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// poot's cache folder ($POOT_CACHE, else ~/.cache/poot).
pub fn cache() -> PathBuf {
    std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/poot")
        })
}

/// Whether `py` imports `module`.
pub fn imports(py: &str, module: &str) -> bool {
    Command::new(py)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A Python that imports `openai`, or why there is none.
pub fn python() -> Result<String, String> {
    let candidates: Vec<String> = match std::env::var("POOT_PYTHON") {
        Ok(p) => vec![p],
        Err(_) => vec![
            cache().join("venv/bin/python").display().to_string(),
            "python3".to_owned(),
        ],
    };
    for py in &candidates {
        if imports(py, "openai") {
            return Ok(py.clone());
        }
    }
    Err(format!(
        "none of {candidates:?} imports openai (scripts/pyenv.sh client)"
    ))
}
