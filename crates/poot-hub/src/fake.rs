//! A stand-in for the Hub on the loopback interface, for tests (the `fake` feature): it serves
//! repositories held in memory in the Hub's file-API layout, with the headers `huggingface_hub`
//! and `hf-hub` read.
//!
//! - `GET /api/models/{org}/{name}/revision/{rev}`: the listing (`sha`, `siblings` with
//!   `size`, and `lfs.sha256` for `.safetensors` and `.gguf` files);
//! - `GET|HEAD /{org}/{name}/resolve/{rev}/{file}`: a plain file's bytes with `x-repo-commit`
//!   and `etag`; an LFS file answers `302` to `/lfs/{sha256}` on the same server, with
//!   `x-repo-commit` and `x-linked-etag`, as the Hub redirects to its storage;
//! - byte ranges (`Range: bytes=a-b`, `bytes=a-`) answered `206` with `Content-Range`.
//!
//! An unknown repository is `401` with `X-Error-Code: RepoNotFound` (what the Hub answers a
//! request without a token), an unknown revision `404 RevisionNotFound`, a missing file `404
//! EntryNotFound`, and a gated repository's file without the right bearer token `401`/`403`
//! `GatedRepo`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

/// One repository the fake serves.
#[derive(Clone, Debug, Default)]
pub struct FakeRepo {
    files: BTreeMap<String, Vec<u8>>,
    gated: bool,
    /// Digests the listing gives instead of the true ones.
    listed_sha256: BTreeMap<String, String>,
}

impl FakeRepo {
    pub fn new() -> FakeRepo {
        FakeRepo::default()
    }

    /// Every file under `dir`, named by its path relative to it.
    pub fn from_dir(dir: &Path) -> std::io::Result<FakeRepo> {
        let mut repo = FakeRepo::new();
        add_dir(&mut repo, dir, "")?;
        Ok(repo)
    }

    /// Adds (or replaces) `name`.
    pub fn file(mut self, name: &str, bytes: impl Into<Vec<u8>>) -> FakeRepo {
        self.files.insert(name.to_owned(), bytes.into());
        self
    }

    /// Files are served only with the hub's token.
    pub fn gated(mut self) -> FakeRepo {
        self.gated = true;
        self
    }

    /// The listing gives `sha256` for `name` (an LFS file) instead of its true digest.
    pub fn listing_lies_about(mut self, name: &str, sha256: &str) -> FakeRepo {
        self.listed_sha256
            .insert(name.to_owned(), sha256.to_owned());
        self
    }

    /// The commit every revision of this repository resolves to: a digest of its files.
    pub fn commit(&self) -> String {
        let mut h = Sha256::new();
        for (name, bytes) in &self.files {
            h.update(name.as_bytes());
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
        hex::encode(h.finalize())[..40].to_owned()
    }
}

fn add_dir(repo: &mut FakeRepo, dir: &Path, prefix: &str) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.file_type()?.is_dir() {
            add_dir(repo, &entry.path(), &format!("{name}/"))?;
        } else {
            repo.files.insert(name, std::fs::read(entry.path())?);
        }
    }
    Ok(())
}

fn is_lfs(name: &str) -> bool {
    name.ends_with(".safetensors") || name.ends_with(".gguf")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

struct State {
    repos: BTreeMap<String, FakeRepo>,
    token: Option<String>,
    addr: SocketAddr,
    log: Mutex<Vec<String>>,
}

/// The fake Hub, serving until dropped.
pub struct FakeHub {
    state: Arc<State>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeHub {
    /// Serves `repos` (by `org/name`) on a free loopback port; `token` is the bearer token
    /// gated repositories need.
    pub fn start(repos: Vec<(&str, FakeRepo)>, token: Option<&str>) -> std::io::Result<FakeHub> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let state = Arc::new(State {
            repos: repos
                .into_iter()
                .map(|(id, r)| (id.to_owned(), r))
                .collect(),
            token: token.map(str::to_owned),
            addr: listener.local_addr()?,
            log: Mutex::new(Vec::new()),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&state), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    // A client that goes away mid-answer is its own business.
                    let _ = serve(&s, conn);
                });
            }
        });
        Ok(FakeHub {
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, for `HF_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.state.addr)
    }

    /// Every request so far, as `METHOD PATH` (with ` RANGE` when one was asked).
    pub fn requests(&self) -> Vec<String> {
        self.state.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// How many requests fetched file bytes (not a one-byte probe).
    pub fn downloads(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.starts_with("GET ") && !r.ends_with("bytes=0-0") && !r.contains("/api/"))
            .filter(|r| r.contains("/lfs/") || !r.contains(" 302"))
            .count()
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.state.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn error(status: u16, code: &str, message: &str) -> Answer {
        Answer {
            status,
            headers: vec![
                ("X-Error-Code".into(), code.into()),
                ("X-Error-Message".into(), message.into()),
                ("Content-Type".into(), "application/json".into()),
            ],
            body: format!("{{\"error\": {message:?}}}").into_bytes(),
        }
    }
}

fn serve(state: &State, conn: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let range = headers.get("range").cloned();
    let answer = route(state, &method, &target, &headers);
    if let Ok(mut log) = state.log.lock() {
        log.push(format!(
            "{method} {target} {}{}",
            answer.status,
            range.map(|r| format!(" {r}")).unwrap_or_default()
        ));
    }
    let mut out = conn;
    let reason = match answer.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Error",
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\n", answer.status);
    for (k, v) in &answer.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        answer.body.len()
    ));
    out.write_all(head.as_bytes())?;
    if method != "HEAD" {
        out.write_all(&answer.body)?;
    }
    out.flush()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn route(state: &State, method: &str, target: &str, headers: &BTreeMap<String, String>) -> Answer {
    if method != "GET" && method != "HEAD" {
        return Answer::error(405, "MethodNotAllowed", "only GET and HEAD");
    }
    let path = target.split('?').next().unwrap_or("");
    let segments: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    match seg.as_slice() {
        ["api", "models", org, name, "revision", rev] => {
            let id = format!("{org}/{name}");
            let repo = match find(state, &id, rev) {
                Ok(r) => r,
                Err(a) => return a,
            };
            listing(&id, repo)
        }
        ["lfs", sha] => {
            let found = state
                .repos
                .values()
                .flat_map(|r| r.files.values())
                .find(|b| sha256_hex(b) == *sha);
            match found {
                Some(bytes) => ranged(bytes, headers, Vec::new()),
                None => Answer::error(404, "EntryNotFound", "no such object"),
            }
        }
        [org, name, "resolve", rev, file @ ..] if !file.is_empty() => {
            let id = format!("{org}/{name}");
            let repo = match find(state, &id, rev) {
                Ok(r) => r,
                Err(a) => return a,
            };
            if repo.gated {
                let want = state.token.as_ref().map(|t| format!("Bearer {t}"));
                match headers.get("authorization") {
                    None => {
                        return Answer::error(
                            401,
                            "GatedRepo",
                            "Access to this model is restricted",
                        );
                    }
                    Some(a) if Some(a) != want.as_ref() => {
                        return Answer::error(
                            403,
                            "GatedRepo",
                            "Access to this model is restricted",
                        );
                    }
                    Some(_) => {}
                }
            }
            let file = file.join("/");
            let Some(bytes) = repo.files.get(&file) else {
                return Answer::error(404, "EntryNotFound", "Entry not found");
            };
            let commit = repo.commit();
            let sha = sha256_hex(bytes);
            if is_lfs(&file) {
                return Answer {
                    status: 302,
                    headers: vec![
                        (
                            "Location".into(),
                            format!("http://{}/lfs/{sha}", state.addr),
                        ),
                        ("x-repo-commit".into(), commit),
                        ("x-linked-etag".into(), format!("\"{sha}\"")),
                        ("x-linked-size".into(), bytes.len().to_string()),
                        ("etag".into(), format!("\"{}\"", &sha[..40])),
                    ],
                    body: Vec::new(),
                };
            }
            ranged(
                bytes,
                headers,
                vec![
                    ("x-repo-commit".into(), commit),
                    ("etag".into(), format!("\"{}\"", &sha[..40])),
                ],
            )
        }
        _ => Answer::error(404, "NotFound", "no such route"),
    }
}

/// The repository `id` if `rev` names a revision of it (`main`, or its commit).
fn find<'a>(state: &'a State, id: &str, rev: &str) -> Result<&'a FakeRepo, Answer> {
    let Some(repo) = state.repos.get(id) else {
        return Err(Answer::error(401, "RepoNotFound", "Repository not found"));
    };
    if rev != "main" && rev != repo.commit() {
        return Err(Answer::error(404, "RevisionNotFound", "Invalid rev id"));
    }
    Ok(repo)
}

fn listing(id: &str, repo: &FakeRepo) -> Answer {
    let siblings: Vec<serde_json::Value> = repo
        .files
        .iter()
        .map(|(name, bytes)| {
            let mut s = serde_json::json!({
                "rfilename": name,
                "size": bytes.len(),
                "blobId": &sha256_hex(bytes)[..40],
            });
            if is_lfs(name) {
                let sha = repo
                    .listed_sha256
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| sha256_hex(bytes));
                s["lfs"] =
                    serde_json::json!({"sha256": sha, "size": bytes.len(), "pointerSize": 134});
            }
            s
        })
        .collect();
    let body = serde_json::json!({
        "id": id,
        "modelId": id,
        "sha": repo.commit(),
        "gated": if repo.gated { serde_json::json!("manual") } else { serde_json::json!(false) },
        "private": false,
        "siblings": siblings,
    });
    Answer {
        status: 200,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

/// `bytes`, or the range the request asks for.
fn ranged(
    bytes: &[u8],
    headers: &BTreeMap<String, String>,
    mut extra: Vec<(String, String)>,
) -> Answer {
    let total = bytes.len();
    let Some(spec) = headers.get("range").and_then(|r| r.strip_prefix("bytes=")) else {
        return Answer {
            status: 200,
            headers: extra,
            body: bytes.to_vec(),
        };
    };
    let (start, end) = spec.split_once('-').unwrap_or((spec, ""));
    let start: usize = start.parse().unwrap_or(0);
    let end: usize = end.parse().map_or(total.saturating_sub(1), |e: usize| {
        e.min(total.saturating_sub(1))
    });
    if start >= total || start > end {
        extra.push(("Content-Range".into(), format!("bytes */{total}")));
        return Answer {
            status: 416,
            headers: extra,
            body: Vec::new(),
        };
    }
    extra.push((
        "Content-Range".into(),
        format!("bytes {start}-{end}/{total}"),
    ));
    Answer {
        status: 206,
        headers: extra,
        body: bytes.get(start..=end).unwrap_or_default().to_vec(),
    }
}
