//! `poot run org/name` against the fake Hub on the loopback interface: a Hub repository
//! generates what its local copy generates (and opens from the cache once the Hub is gone), a
//! GGUF is chosen by quantization, and a missing repository, quantization or revision, a gated
//! repository and an unreachable endpoint are each one error line.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use poot_hub::fake::{FakeHub, FakeRepo};
use poot_llm::{BackendChoice, open_executor};
use serde_json::Value as Json;

fn tiny_chat() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("poot-cli-hub-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `poot ARGS` with the Hub at `endpoint` and its cache (and home, so no real token file is
/// read) under `cache`.
fn poot(endpoint: &str, cache: &Path, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_poot"));
    cmd.args(args)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HOME", cache)
        .env("HF_HUB_CACHE", cache.join("hub"))
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A failure with exactly one `error:` line that mentions each of `mentions`.
fn assert_one_error(o: &Output, mentions: &[&str]) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected a failure, stderr: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    for m in mentions {
        assert!(errors[0].contains(m), "{m} not in {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

fn vulkan() -> bool {
    match open_executor(BackendChoice::Wgpu) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIP: no Vulkan adapter: {e}");
            false
        }
    }
}

fn summary(o: &Output) -> Json {
    assert!(o.status.success(), "{}", stderr(o));
    let out = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(out.lines().last().unwrap()).unwrap()
}

#[test]
fn a_hub_repository_generates_what_its_local_copy_generates() {
    if !vulkan() {
        return;
    }
    let hub = FakeHub::start(
        vec![("org/tiny-chat", FakeRepo::from_dir(&tiny_chat()).unwrap())],
        None,
    )
    .unwrap();
    let cache = temp_dir("run");
    let endpoint = hub.endpoint();
    let flags = [
        "hello there",
        "--max-new",
        "4",
        "--backend",
        "wgpu",
        "--capacity",
        "16",
        "--json",
    ];
    let run = |model: &str, env: &[(&str, &str)]| {
        let mut args = vec!["run", model];
        args.extend(flags);
        poot(&endpoint, &cache, &args, env)
    };
    let local = summary(&run(tiny_chat().to_str().unwrap(), &[]));
    let o = run("org/tiny-chat", &[]);
    let err = stderr(&o);
    assert!(
        err.contains("downloaded") && err.contains("model.safetensors"),
        "{err}"
    );
    let from_hub = summary(&o);
    assert_eq!(from_hub["prompt_ids"], local["prompt_ids"]);
    assert_eq!(from_hub["tokens"], local["tokens"]);
    assert!(cache.join("hub/models--org--tiny-chat/snapshots").is_dir());
    // Offline, the cached copy runs without asking the Hub.
    let asked = hub.requests().len();
    let offline = summary(&run("org/tiny-chat", &[("HF_HUB_OFFLINE", "1")]));
    assert_eq!(offline["tokens"], local["tokens"]);
    assert_eq!(hub.requests().len(), asked);
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn a_gguf_chosen_by_quantization_streams_smollm2s_continuation() {
    let cache_root = std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot")
        });
    let smollm2 = cache_root.join("models/smollm2-135m-instruct-q4_1.gguf");
    if !smollm2.is_file() {
        eprintln!(
            "SKIP: {} not found (run `poot models smollm2`)",
            smollm2.display()
        );
        return;
    }
    if !vulkan() {
        return;
    }
    let repo = FakeRepo::new()
        .file(
            "SmolLM2-135M-Instruct-Q4_1.gguf",
            std::fs::read(&smollm2).unwrap(),
        )
        .file(
            "SmolLM2-135M-Instruct-Q8_0.gguf",
            b"never downloaded".to_vec(),
        );
    let hub = FakeHub::start(vec![("org/SmolLM2-GGUF", repo)], None).unwrap();
    let cache = temp_dir("gguf");
    let o = poot(
        &hub.endpoint(),
        &cache,
        &[
            "run",
            "org/SmolLM2-GGUF:q4_1",
            "The capital of France is",
            "--max-new",
            "4",
            "--backend",
            "wgpu",
            "--prefill-chunk",
            "4",
            "--capacity",
            "64",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with(" Paris."), "{text:?}");
    assert!(!hub.requests().iter().any(|r| r.contains("Q8_0")));
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn hub_refusals_are_one_error_line_naming_the_problem() {
    let tiny = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../poot-models/tests/fixtures/tiny_llama.gguf"),
    )
    .unwrap();
    let hub = FakeHub::start(
        vec![
            (
                "org/Tiny-GGUF",
                FakeRepo::new()
                    .file("Tiny-Q8_0.gguf", tiny.clone())
                    .file("Tiny-F16.gguf", tiny),
            ),
            (
                "org/gated",
                FakeRepo::from_dir(&tiny_chat()).unwrap().gated(),
            ),
        ],
        Some("hf_secret"),
    )
    .unwrap();
    let cache = temp_dir("errors");
    let e = hub.endpoint();
    let o = poot(&e, &cache, &["run", "org/no-such-model", "hi"], &[]);
    assert_one_error(&o, &["org/no-such-model", "not found"]);
    let o = poot(&e, &cache, &["run", "org/Tiny-GGUF:Q4_K_M", "hi"], &[]);
    assert_one_error(&o, &["Q4_K_M", "F16, Q8_0"]);
    let o = poot(&e, &cache, &["run", "org/Tiny-GGUF", "hi"], &[]);
    assert_one_error(&o, &["org/Tiny-GGUF:QUANT"]);
    let o = poot(
        &e,
        &cache,
        &["run", "org/Tiny-GGUF:Q8_0", "hi", "--revision", "v2"],
        &[],
    );
    assert_one_error(&o, &["no revision `v2`"]);
    let o = poot(&e, &cache, &["run", "org/gated", "hi"], &[]);
    assert_one_error(&o, &["gated", "HF_TOKEN"]);
    let o = poot(
        &e,
        &cache,
        &["embed", "org/gated", "hi"],
        &[("HF_TOKEN", "hf_wrong")],
    );
    assert_one_error(&o, &["gated", "refused"]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let o = poot(
        &format!("http://{closed}"),
        &cache,
        &["bench", "org/elsewhere"],
        &[],
    );
    assert_one_error(&o, &["cannot reach", "org/elsewhere"]);
    // A path that does not exist is still a missing path, not a repository.
    let o = poot(&e, &cache, &["run", "./org/no-such-model", "hi"], &[]);
    assert_one_error(&o, &["no such file or directory"]);
    std::fs::remove_dir_all(&cache).unwrap();
}
