//! The `poot` binary as a user meets it: help, clear one-line errors for bad input, the
//! packaged-model listing, and (when SmolLM2 is cached and a Vulkan adapter exists) greedy
//! generation that streams the transformers reference continuation.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use poot_llm::{BackendChoice, open_executor};
use serde_json::Value as Json;

fn poot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poot"))
        .args(args)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A failure: nonzero exit, exactly one `error:` line, no panic or backtrace.
fn assert_one_error(o: &Output, mentions: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected a failure, stderr: {err}");
    assert_eq!(o.status.code().map(|c| c == 101), Some(false), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(errors[0].contains(mentions), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

fn cache() -> PathBuf {
    std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot")
        })
}

fn smollm2() -> Option<PathBuf> {
    let path = cache().join("models/smollm2-135m-instruct-q4_1.gguf");
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "SKIP: {} not found (run `poot models smollm2`)",
            path.display()
        );
        None
    }
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

/// `poot run smollm2 "The capital of France is"` on wgpu with a small cache, `max_new` tokens
/// and `extra` flags; `None` (after a SKIP line) without the model or a Vulkan adapter.
fn smollm2_on_wgpu(max_new: u32, extra: &[&str]) -> Option<Output> {
    smollm2()?;
    if !vulkan() {
        return None;
    }
    let max_new = max_new.to_string();
    let mut args = vec![
        "run",
        "smollm2",
        "The capital of France is",
        "--max-new",
        &max_new,
        "--backend",
        "wgpu",
        "--prefill-chunk",
        "4",
        "--capacity",
        "64",
    ];
    args.extend(extra);
    Some(poot(&args))
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("poot-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn help_names_the_commands_and_the_sampling_flags() {
    let o = poot(&["--help"]);
    assert!(o.status.success());
    let help = stdout(&o);
    assert!(help.contains("run") && help.contains("models"), "{help}");
    let o = poot(&["run", "--help"]);
    assert!(o.status.success());
    let help = stdout(&o);
    for flag in [
        "--chat",
        "--max-new",
        "--temperature",
        "--backend",
        "--json",
        "--repeat-penalty",
        "--presence-penalty",
        "--frequency-penalty",
        "--logit-bias",
        "--top-logprobs",
        "--tensor-parallel",
        "--pipeline-stages",
    ] {
        assert!(help.contains(flag), "{flag} missing from {help}");
    }
    assert!(!help.contains("not supported"), "{help}");
}

#[test]
fn a_missing_model_path_is_one_error_line() {
    let o = poot(&["run", "/nonexistent/dir/model.gguf", "hello"]);
    assert_one_error(&o, "/nonexistent/dir/model.gguf");
}

#[test]
fn a_file_that_is_not_a_checkpoint_is_one_error_line() {
    let dir = temp_dir("garbage");
    let path = dir.join("garbage.gguf");
    std::fs::write(&path, b"not a gguf file at all").unwrap();
    let o = poot(&["run", path.to_str().unwrap(), "hello"]);
    assert_one_error(&o, "cannot load");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_unknown_short_name_lists_the_packaged_ones() {
    let o = poot(&["run", "llama9", "hello"]);
    assert_one_error(&o, "no model `llama9`");
    assert!(stderr(&o).contains("smollm2"), "{}", stderr(&o));
    let o = poot(&["run", "minilm", "hello"]);
    assert_one_error(&o, "cannot generate text");
}

#[test]
fn bad_flag_values_are_refused_before_loading() {
    for (flag, value) in [
        ("--temperature", "-1"),
        ("--temperature", "nan"),
        ("--top-p", "0"),
        ("--top-p", "1.5"),
        ("--min-p", "2"),
        ("--max-new", "0"),
        ("--capacity", "0"),
        ("--prefill-chunk", "0"),
        ("--top-k", "-3"),
        ("--max-new", "-5"),
        ("--seed", "-1"),
        ("--backend", "cuda"),
        ("--repeat-penalty", "0"),
        ("--repeat-penalty", "-1.1"),
        ("--repeat-penalty", "nan"),
        ("--presence-penalty", "inf"),
        ("--presence-penalty", "much"),
        ("--frequency-penalty", "-5e40"),
        ("--logit-bias", "7042"),
        ("--logit-bias", "x=1"),
        ("--logit-bias", "5=nan"),
        ("--logit-bias", "5="),
        ("--top-logprobs", "21"),
        ("--top-logprobs", "-1"),
        ("--tensor-parallel", "0"),
        ("--tensor-parallel", "65"),
        ("--pipeline-stages", "0"),
        ("--pipeline-stages", "-2"),
        ("--pipeline-stages", "65"),
    ] {
        let o = poot(&["run", "smollm2", "hello", flag, value]);
        assert_one_error(&o, flag);
        assert!(!stderr(&o).contains("loading"), "{}", stderr(&o));
    }
}

#[test]
fn an_empty_stop_and_a_top_k_over_the_candidates_are_refused_before_loading() {
    let o = poot(&["run", "smollm2", "hello", "--stop", ""]);
    assert_one_error(&o, "--stop is empty");
    assert!(!stderr(&o).contains("loading"), "{}", stderr(&o));
    let o = poot(&["run", "smollm2", "hello", "--stop", "x", "--stop", ""]);
    assert_one_error(&o, "--stop is empty");
    let o = poot(&["run", "smollm2", "hello", "--top-k", "33"]);
    assert_one_error(&o, "--top-k 33 exceeds the 32 candidates");
    assert!(!stderr(&o).contains("loading"), "{}", stderr(&o));
}

#[test]
fn logit_bias_beyond_the_limit_or_the_vocabulary_is_refused_early() {
    let mut args = vec!["run", "smollm2", "hello"];
    let biases: Vec<String> = (0..65).map(|i| format!("{i}=1")).collect();
    for b in &biases {
        args.extend(["--logit-bias", b.as_str()]);
    }
    let o = poot(&args);
    assert_one_error(&o, "--logit-bias given 65 times; at most 64");
    assert!(!stderr(&o).contains("loading"), "{}", stderr(&o));
    // Negative penalties are allowed (OpenAI's range includes them).
    let Some(path) = smollm2() else { return };
    let o = poot(&[
        "run",
        path.to_str().unwrap(),
        "hi",
        "--logit-bias",
        "49152=2",
        "--presence-penalty",
        "-0.5",
    ]);
    assert_one_error(&o, "--logit-bias names token 49152");
    assert!(stderr(&o).contains("below 49152"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("backend"), "{}", stderr(&o));
}

#[test]
fn a_banned_token_moves_the_answer_and_json_reports_log_probabilities() {
    let Some(o) = smollm2_on_wgpu(
        2,
        &[
            "--logit-bias",
            "7042=-100",
            "--top-logprobs",
            "3",
            "--json",
            "--quiet",
        ],
    ) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<Json> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for token in &lines[..2] {
        let top = token["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3, "{token}");
        // Greedy: the token is the most likely, and its log-probability is the first listed.
        assert_eq!(top[0]["id"], token["id"], "{token}");
        assert_eq!(top[0]["logprob"], token["logprob"], "{token}");
        assert!(top.iter().all(|t| t["text"].is_string()), "{token}");
        let lps: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(
            lps.windows(2).all(|w| w[0] >= w[1]) && lps[0] <= 0.0,
            "{token}"
        );
    }
    // transformers ranks 7042 (" Paris", log-prob -0.2580711) first and 260 (-2.740749)
    // second; with 7042 banned, 260 leads with -2.740749 - ln(1 - e^-0.2580711).
    let first = &lines[0];
    assert_eq!(first["id"], 260, "{first}");
    let want = -2.740749 - (1.0 - (-0.2580711f64).exp()).ln();
    let got = first["logprob"].as_f64().unwrap();
    assert!((got - want).abs() <= 2e-3, "{got} against {want}");
    let ids: Vec<u64> = first["top_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [260, 4528, 2250]);
}

#[test]
fn models_lists_the_packaged_checkpoints_and_refuses_unknown_names() {
    let dir = temp_dir("cache");
    let o = Command::new(env!("CARGO_BIN_EXE_poot"))
        .arg("models")
        .env("POOT_CACHE", &dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let list = stdout(&o);
    for name in ["smollm2", "gemma3", "minilm"] {
        let line = list.lines().find(|l| l.trim_start().starts_with(name));
        assert!(
            line.is_some_and(|l| l.contains("not fetched")),
            "{name}: {list}"
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_poot"))
        .args(["models", "smollm2", "nope"])
        .env("POOT_CACHE", &dir)
        .output()
        .unwrap();
    // Every name is checked before anything is fetched.
    assert_one_error(&o, "no packaged checkpoint `nope`");
    assert!(!stderr(&o).contains("fetching"), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn groups_are_refused_on_wgpu_and_without_cuda_in_one_line() {
    let dir = repo().join("crates/poot-serve/tests/fixtures/tiny-chat");
    let dir = dir.to_str().unwrap();
    for cmd in ["run", "bench"] {
        let mut args = vec![cmd, dir];
        if cmd == "run" {
            args.push("hello");
        } else {
            args.extend(["--prompt-tokens", "4", "--gen-tokens", "2"]);
        }
        for flag in ["--tensor-parallel", "--pipeline-stages"] {
            let o = poot(&[&args[..], &[flag, "2", "--backend", "wgpu"]].concat());
            assert_one_error(&o, "does not run a group of devices");
            // On a machine without two CUDA devices the group is a typed refusal too.
            if open_executor(BackendChoice::Ptx).is_err() {
                let o = poot(&[&args[..], &[flag, "2", "--backend", "ptx"]].concat());
                assert_one_error(&o, "ptx");
            }
        }
        // One placement or the other, refused before anything loads.
        let o = poot(
            &[
                &args[..],
                &["--tensor-parallel", "2", "--pipeline-stages", "2"],
            ]
            .concat(),
        );
        assert_one_error(&o, "cannot be used with");
        assert!(!stderr(&o).contains("loading"), "{}", stderr(&o));
        // Three stages over the fixture's two layers, refused before the backend opens.
        let o = poot(&[&args[..], &["--pipeline-stages", "3", "--backend", "ptx"]].concat());
        assert_one_error(&o, "a pipeline of 3 stages over 2 layers");
        assert!(!stderr(&o).contains("backend ptx on"), "{}", stderr(&o));
    }
}

#[test]
fn a_prompt_over_the_capacity_is_refused_before_the_backend_opens() {
    let Some(path) = smollm2() else { return };
    let path = path.to_str().unwrap();
    let o = poot(&["run", path, "The capital of France is", "--capacity", "8"]);
    assert_one_error(&o, "more than the capacity of 8");
    assert!(!stderr(&o).contains("backend"), "{}", stderr(&o));
    let o = poot(&["run", path, "hi", "--max-new", "9000"]);
    assert_one_error(&o, "8192");
}

#[test]
fn greedy_text_streams_the_reference_continuation() {
    let Some(o) = smollm2_on_wgpu(4, &[]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with(" Paris."), "{text:?}");
    assert!(stderr(&o).contains("backend wgpu"), "{}", stderr(&o));
}

#[test]
fn json_emits_one_object_per_token_then_a_summary() {
    let Some(o) = smollm2_on_wgpu(4, &["--json", "--quiet"]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "--quiet prints no status lines");
    let lines: Vec<Json> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{lines:?}");
    let ids: Vec<u64> = lines[..4]
        .iter()
        .map(|t| {
            assert!(t["text"].is_string(), "{t}");
            t["id"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(ids, [7042, 30, 198, 198]);
    let summary = &lines[4];
    assert_eq!(summary["tokens"], serde_json::json!([7042, 30, 198, 198]));
    assert_eq!(summary["finish"], "length");
    assert_eq!(summary["backend"], "wgpu");
    assert!(summary["text"].as_str().unwrap().starts_with(" Paris."));
    assert!(!summary["prompt_ids"].as_array().unwrap().is_empty());
    for key in ["prefill_ms", "decode_ms", "decode_tok_s"] {
        assert!(summary[key].as_f64().is_some_and(|v| v > 0.0), "{key}");
    }
    assert!(summary["device"].is_string());
}

fn minilm() -> Option<PathBuf> {
    let path = cache().join("models/all-minilm-l6-v2");
    if path.is_dir() {
        Some(path)
    } else {
        eprintln!(
            "SKIP: {} not found (run `poot models minilm`)",
            path.display()
        );
        None
    }
}

/// The reference Python (scripts/pyenv.sh) when it has gguf, numpy and llama-cpp-python.
fn reference_python() -> Option<PathBuf> {
    let python = cache().join("venv/bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import gguf, numpy, llama_cpp"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Some(python)
    } else {
        eprintln!(
            "SKIP: {} with gguf, numpy and llama-cpp-python not found (scripts/pyenv.sh)",
            python.display()
        );
        None
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn help_names_bench_and_embed_with_their_flags() {
    let help = stdout(&poot(&["--help"]));
    assert!(help.contains("bench") && help.contains("embed"), "{help}");
    let help = stdout(&poot(&["bench", "--help"]));
    for flag in [
        "--prompt-tokens",
        "--gen-tokens",
        "--repeats",
        "--capacity",
        "--backend",
        "--json",
        "--probe-mib",
        "--tensor-parallel",
        "--pipeline-stages",
    ] {
        assert!(help.contains(flag), "{flag} missing from {help}");
    }
    let help = stdout(&poot(&["embed", "--help"]));
    assert!(
        help.contains("--normalize") && help.contains("--json"),
        "{help}"
    );
}

#[test]
fn bad_bench_and_embed_arguments_are_refused_before_loading() {
    for (flag, value) in [
        ("--gen-tokens", "1"),
        ("--prompt-tokens", "0"),
        ("--repeats", "0"),
        ("--probe-mib", "0"),
        ("--capacity", "-4"),
        ("--backend", "cuda"),
    ] {
        let o = poot(&["bench", "smollm2", flag, value]);
        assert_one_error(&o, flag);
        assert!(!stderr(&o).contains("loading"), "{}", stderr(&o));
    }
    let o = poot(&["embed", "minilm", "hi", "--normalize", "maybe"]);
    assert_one_error(&o, "--normalize");
    let o = poot(&["embed", "minilm"]);
    assert_one_error(&o, "required arguments");
    assert!(stderr(&o).contains("<TEXT>"), "{}", stderr(&o));
    let o = poot(&["embed", "smollm2", "hi"]);
    assert_one_error(&o, "needs a sentence-embedding model");
    assert!(stderr(&o).contains("minilm"), "{}", stderr(&o));
    let o = poot(&["bench", "minilm"]);
    assert_one_error(&o, "cannot generate text");
}

#[test]
fn a_benchmark_over_the_model_or_capacity_is_refused_before_the_backend_opens() {
    let Some(path) = smollm2() else { return };
    let path = path.to_str().unwrap();
    let o = poot(&[
        "bench",
        path,
        "--prompt-tokens",
        "8100",
        "--gen-tokens",
        "128",
    ]);
    assert_one_error(&o, "more than 8192 (the model's positions)");
    assert!(!stderr(&o).contains("backend"), "{}", stderr(&o));
    let o = poot(&["bench", path, "--prompt-tokens", "8", "--capacity", "100"]);
    assert_one_error(&o, "more than 100 (--capacity)");
    // Rows take whole KV blocks of 16: 8190 + 8 positions round up to 8208, past the 8192.
    let o = poot(&[
        "bench",
        path,
        "--rows",
        "2",
        "--prompt-tokens",
        "8190",
        "--gen-tokens",
        "8",
    ]);
    assert_one_error(
        &o,
        "need 8208 positions, more than 8192 (the model's positions, counted in whole KV blocks)",
    );
    assert!(!stderr(&o).contains("backend"), "{}", stderr(&o));
}

/// `poot bench` of `path` on wgpu, two prompt tokens and two new ones, once, as JSON, with
/// `POOT_TUNING` set to `tuning` where given.
fn tiny_bench(path: &std::path::Path, tuning: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_poot"));
    cmd.args(["bench", path.to_str().unwrap(), "--backend", "wgpu"])
        .args([
            "--prompt-tokens",
            "2",
            "--gen-tokens",
            "2",
            "--repeats",
            "1",
        ])
        .args(["--probe-mib", "8", "--json"])
        .env("XDG_RUNTIME_DIR", "/tmp");
    if let Some(tuning) = tuning {
        cmd.env("POOT_TUNING", tuning);
    }
    cmd.output().unwrap()
}

#[test]
fn bench_records_the_tuning_overrides_it_ran_with() {
    let Some(path) = smollm2() else { return };
    if !vulkan() {
        return;
    }
    let o = tiny_bench(&path, Some("bytes=32"));
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Json = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(r["tuning"], "bytes=32", "{r}");
}

#[test]
fn bench_reports_speeds_dispatches_and_the_bandwidth_fraction() {
    let Some(path) = smollm2() else { return };
    if !vulkan() {
        return;
    }
    let o = tiny_bench(&path, None);
    assert!(o.status.success(), "{}", stderr(&o));
    // stderr is not a terminal here: status lines, no progress bars.
    assert!(
        stderr(&o).contains("compiled for 4 positions"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains('\r') && !stderr(&o).contains('\x1b'));
    let r: Json = serde_json::from_str(stdout(&o).trim()).unwrap();
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {r}"));
    assert_eq!(r["backend"], "wgpu");
    assert_eq!(r["capacity"], 4, "default capacity is prompt + new tokens");
    assert_eq!(r["decode_tok_s_runs"].as_array().unwrap().len(), 1);
    assert!(r["tuning"].is_null(), "the default kernels: {r}");
    for k in [
        "prefill_tok_s",
        "decode_tok_s",
        "bandwidth_bytes_per_s",
        "floor_ms_per_token",
    ] {
        assert!(f(k) > 0.0 && f(k).is_finite(), "{k}: {r}");
    }
    assert!((f("decode_ms_per_token") * f("decode_tok_s") - 1e3).abs() < 1e-6);
    assert!(
        f("dispatches_per_token") >= 30.0,
        "at least one per layer: {r}"
    );
    // Every weight is read once per token (the tied embedding is the head), except the
    // embedding rows it gathers: nearly the whole file, and never more.
    let file = std::fs::metadata(&path).unwrap().len() as f64;
    let weights = f("weight_bytes_per_token");
    assert!(
        weights > 0.9 * file && weights < file,
        "{weights} of {file}"
    );
    // SmolLM2-135M: 30 layers, 3 KV heads of 64, a key and a value per position.
    assert_eq!(r["kv_elems_per_position"], 30 * 2 * 3 * 64);
    let kv = f("kv_bytes_per_position");
    assert!(kv == 30.0 * 2.0 * 3.0 * 64.0 * 4.0 || kv == 30.0 * 2.0 * 3.0 * 64.0 * 2.0);
    assert_eq!(f("mean_context"), 3.0);
    assert!((f("bytes_per_token") - (weights + 3.0 * kv)).abs() < 1.0);
    let fraction = f("bandwidth_fraction");
    let expected = f("floor_ms_per_token") / f("decode_ms_per_token");
    assert!(fraction > 0.0 && fraction < 1.0, "{r}");
    assert!(
        (fraction - expected).abs() < 1e-9 * expected.max(1.0),
        "{r}"
    );
}

#[derive(serde::Deserialize)]
struct MiniLmReference {
    sentences: Vec<String>,
    embeddings: Vec<Vec<f64>>,
}

fn minilm_reference() -> MiniLmReference {
    let path = repo().join("crates/poot-models/tests/fixtures/real/minilm.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn embed_prints_sentence_transformers_embeddings() {
    let Some(_) = minilm() else { return };
    if !vulkan() {
        return;
    }
    let reference = minilm_reference();
    let texts: Vec<&str> = reference.sentences[..3]
        .iter()
        .map(String::as_str)
        .collect();
    let mut args = vec!["embed", "minilm", "--backend", "wgpu"];
    args.extend(&texts);
    let o = poot(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<Vec<f64>> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for (i, (got, want)) in lines.iter().zip(&reference.embeddings).enumerate() {
        assert_eq!(got.len(), 384);
        let norm: f64 = got.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "text {i}: norm {norm}");
        // The same tolerance as the library's own test against sentence-transformers.
        assert!(1.0 - cosine(got, want) <= 1e-4, "text {i}");
    }
}

#[test]
fn embed_without_normalization_keeps_the_mean_pooled_length() {
    let Some(_) = minilm() else { return };
    if !vulkan() {
        return;
    }
    let reference = minilm_reference();
    let o = poot(&[
        "embed",
        "minilm",
        &reference.sentences[0],
        "--backend",
        "wgpu",
        "--normalize",
        "false",
        "--json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "--quiet prints no status lines");
    let r: Json = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(r["normalized"], false);
    assert_eq!(r["dim"], 384);
    assert_eq!(r["backend"], "wgpu");
    let got: Vec<f64> = serde_json::from_value(r["embeddings"][0].clone()).unwrap();
    let norm: f64 = got.iter().map(|x| x * x).sum::<f64>().sqrt();
    // MiniLM's mean-pooled hidden states are several units long; normalized they are the
    // reference direction.
    assert!(norm > 1.5, "norm {norm}");
    assert!(1.0 - cosine(&got, &reference.embeddings[0]) <= 1e-4);
}

#[test]
fn synthetic_models_generate_llama_cpps_greedy_tokens() {
    let Some(python) = reference_python() else {
        return;
    };
    if !vulkan() {
        return;
    }
    let dir = temp_dir("synthetic");
    for kind in ["q4_k_m", "q4_0", "f16"] {
        let model = dir.join(format!("tiny-{kind}.gguf"));
        let model = model.to_str().unwrap();
        let o = Command::new(&python)
            .arg(repo().join("scripts/bench/synthetic_gguf.py"))
            .args(["--shape", "tiny", "--type", kind, "-q", "-o", model])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let o = Command::new(&python)
            .arg(repo().join("scripts/bench/llama_cpp_greedy.py"))
            .args([model, "tok to", "6"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let want: Json = serde_json::from_str(stdout(&o).trim()).unwrap();
        let o = poot(&[
            "run",
            model,
            "tok to",
            "--max-new",
            "6",
            "--ignore-eos",
            "--backend",
            "wgpu",
            "--json",
            "--quiet",
        ]);
        assert!(o.status.success(), "{kind}: {}", stderr(&o));
        let summary: Json = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
        assert_eq!(summary["prompt_ids"], want["prompt_ids"], "{kind}");
        assert_eq!(summary["tokens"], want["tokens"], "{kind}");
    }
    // An untied head: a decode token reads every tensor but one row of the embedding table.
    let model = dir.join("tiny-q4_0.gguf");
    let o = Command::new(&python)
        .args(["-c", SUM_WITHOUT_EMBEDDING])
        .arg(&model)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let want: f64 = stdout(&o).trim().parse().unwrap();
    let o = poot(&[
        "bench",
        model.to_str().unwrap(),
        "--backend",
        "wgpu",
        "--prompt-tokens",
        "3",
        "--gen-tokens",
        "2",
        "--repeats",
        "1",
        "--probe-mib",
        "4",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Json = serde_json::from_str(stdout(&o).trim()).unwrap();
    let got = r["weight_bytes_per_token"].as_f64().unwrap();
    // Plus the rotary tables' gathered rows and nothing else.
    assert!(got >= want && got < want + 4096.0, "{got} vs {want}");
    // The tiny shape: 2 layers, 2 KV heads of 64.
    assert_eq!(r["kv_elems_per_position"], 2 * 2 * 2 * 64);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The stored bytes of every tensor of a GGUF, with one row of `token_embd.weight` in place of
/// the whole table (gguf's own reader).
const SUM_WITHOUT_EMBEDDING: &str = "
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
total = 0
for t in r.tensors:
    n = int(t.n_bytes)
    if t.name == 'token_embd.weight':
        n //= int(t.shape[-1])
    total += n
print(total)
";

#[test]
fn progress_bars_show_on_a_terminal_only() {
    let Some(_) = minilm() else { return };
    if !vulkan() {
        return;
    }
    // `script` runs the command on a pseudo-terminal and logs what it draws.
    let dir = temp_dir("tty");
    let log = dir.join("tty.log");
    let command = format!(
        "{} embed minilm hello --backend wgpu",
        env!("CARGO_BIN_EXE_poot")
    );
    let Ok(o) = Command::new("script")
        .args(["-qfec", &command])
        .arg(&log)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .output()
    else {
        eprintln!("SKIP: no `script` command to run poot on a terminal");
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let drawn = std::fs::read_to_string(&log).unwrap();
    assert!(drawn.contains("compiling entries ["), "{drawn}");
    assert!(drawn.contains("texts embedded"), "{drawn}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Without `XDG_RUNTIME_DIR` (a headless machine, a container) the Vulkan probes stay quiet:
/// `poot` gives itself a private runtime directory before probing.
#[test]
fn a_run_without_a_runtime_dir_prints_no_runtime_dir_error() {
    if !vulkan() {
        return;
    }
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    let o = Command::new(env!("CARGO_BIN_EXE_poot"))
        .args(["run", fixture.to_str().unwrap(), "hello"])
        .args(["--max-new", "1", "--backend", "wgpu", "--capacity", "16"])
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("XDG_RUNTIME_DIR"), "{err}");
}

/// `--chat` with the end-of-turn token forced (`<|im_end|>`, id 2 in both checkpoints): it ends
/// the answer at once, unless `--ignore-eos`, which runs through it to `--max-new` as
/// transformers does when EOS is ignored.
fn forced_end_of_turn(model: &str, ignore_eos: bool) -> Vec<Json> {
    let mut args = vec![
        "run",
        model,
        "The capital of France is",
        "--chat",
        "--logit-bias",
        "2=100",
        "--max-new",
        "4",
        "--json",
        "--quiet",
        "--backend",
        "wgpu",
        "--capacity",
        "128",
    ];
    if ignore_eos {
        args.push("--ignore-eos");
    }
    let o = poot(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn check_ignore_eos_runs_through_the_end_of_turn(model: &str) {
    let through = forced_end_of_turn(model, true);
    let summary = through.last().unwrap();
    assert_eq!(
        summary["tokens"],
        serde_json::json!([2, 2, 2, 2]),
        "{through:?}"
    );
    assert_eq!(summary["finish"], "length");
    let stopped = forced_end_of_turn(model, false);
    let summary = stopped.last().unwrap();
    // The end-of-turn token is an end-of-generation token too: either ends the answer at once.
    assert!(
        matches!(summary["finish"].as_str(), Some("eos" | "stop")),
        "{stopped:?}"
    );
    assert_eq!(summary["tokens"], serde_json::json!([]), "{stopped:?}");
}

#[test]
fn ignore_eos_chat_runs_through_the_end_of_turn_token() {
    if !vulkan() {
        return;
    }
    let tiny =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    check_ignore_eos_runs_through_the_end_of_turn(tiny.to_str().unwrap());
    if smollm2().is_some() {
        check_ignore_eos_runs_through_the_end_of_turn("smollm2");
    }
}

/// `--verify MANIFEST` checks the checkpoint against a poot integrity manifest: a wrong digest
/// or an unreadable manifest is one error line before any backend opens; a matching one runs.
#[test]
fn verify_checks_the_checkpoint_against_its_manifest() {
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    let model = fixture.to_str().unwrap();
    let dir = temp_dir("verify");
    let recorded = poot_llm::handle::Manifest::record(&fixture)
        .unwrap()
        .to_json();
    let good = dir.join("good.json");
    std::fs::write(&good, &recorded).unwrap();
    let mut tampered: Json = serde_json::from_str(&recorded).unwrap();
    tampered["files"]["model.safetensors"]["sha256"] = Json::from("0".repeat(64));
    let bad = dir.join("bad.json");
    std::fs::write(&bad, tampered.to_string()).unwrap();

    let o = poot(&["run", model, "hi", "--verify", bad.to_str().unwrap()]);
    assert_one_error(&o, "model.safetensors");
    assert!(!stderr(&o).contains("backend"), "{}", stderr(&o));
    for command in ["run", "embed", "bench"] {
        let mut args = vec![command, model];
        if command != "bench" {
            args.push("hi");
        }
        args.extend(["--verify", "/nonexistent/poot-manifest.json"]);
        let o = poot(&args);
        assert_one_error(&o, "--verify /nonexistent/poot-manifest.json");
    }
    if vulkan() {
        let o = poot(&[
            "run",
            model,
            "hi",
            "--verify",
            good.to_str().unwrap(),
            "--max-new",
            "1",
            "--backend",
            "wgpu",
            "--capacity",
            "16",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checkpoint declaring a context of 2^24 runs at a capacity of 16 within 2 GB of address
/// space: its rotary tables are sized by the capacity in use (before, tables for every declared
/// position took 3.3 GB resident and the run failed under this limit).
#[test]
fn a_huge_declared_context_runs_at_the_capacity_in_use() {
    if !vulkan() {
        return;
    }
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    let dir = temp_dir("huge-context");
    for file in [
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(fixture.join(file), dir.join(file)).unwrap();
    }
    let mut config: Json =
        serde_json::from_slice(&std::fs::read(fixture.join("config.json")).unwrap()).unwrap();
    config["max_position_embeddings"] = Json::from(1u64 << 24);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 2000000 && exec "$0" run "$1" hi --max-new 2 --backend wgpu --capacity 16"#)
        .arg(env!("CARGO_BIN_EXE_poot"))
        .arg(&dir)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("16777216 positions"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `poot run --spec-ngram` and `--draft-model` print the greedy text of a plain run, and
/// `--verbose` reports the drafted and accepted tokens; `poot bench --spec-ngram` over a prompt
/// file records what speculation did. A draft model with another vocabulary is one error line.
#[test]
fn speculative_runs_print_the_plain_text_and_report_their_drafts() {
    if !vulkan() {
        return;
    }
    let tiny =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    let model = tiny.to_str().unwrap();
    let common = [
        "run",
        model,
        "abc abc abc abc",
        "--backend",
        "wgpu",
        "--max-new",
        "24",
        "--ignore-eos",
    ];
    let plain = poot(&common);
    assert!(plain.status.success(), "{}", stderr(&plain));
    for extra in [
        &["--spec-ngram", "--verbose"][..],
        &["--draft-model", model, "--spec-tokens", "3", "--verbose"][..],
    ] {
        let args: Vec<&str> = common.iter().chain(extra).copied().collect();
        let o = poot(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&plain), "{extra:?}");
        assert!(
            stderr(&o).contains("speculation: ") && stderr(&o).contains("drafted tokens accepted"),
            "{extra:?}: {}",
            stderr(&o)
        );
    }

    let dir = temp_dir("spec-bench");
    let file = dir.join("prompt.txt");
    std::fs::write(&file, "fn a() { b(); }\nfn a() { b(); }\nfn a() {").unwrap();
    let o = poot(&[
        "bench",
        model,
        "--backend",
        "wgpu",
        "--prompt-file",
        file.to_str().unwrap(),
        "--gen-tokens",
        "8",
        "--repeats",
        "1",
        "--probe-mib",
        "8",
        "--spec-ngram",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Json = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(
        r["prompt_file"].as_str().unwrap().ends_with("prompt.txt"),
        "{r}"
    );
    let spec = &r["speculation"];
    assert_eq!(spec["ngram"], true, "{r}");
    assert!(spec["verify_steps"].as_u64().is_some(), "{r}");
    assert!(spec["acceptance_rate"].as_f64().is_some(), "{r}");

    // Another vocabulary: the fixture with two tokens' spellings swapped.
    let other = dir.join("other-vocab");
    std::fs::create_dir_all(&other).unwrap();
    for f in ["config.json", "tokenizer_config.json", "model.safetensors"] {
        std::fs::copy(tiny.join(f), other.join(f)).unwrap();
    }
    let mut tok: Json =
        serde_json::from_str(&std::fs::read_to_string(tiny.join("tokenizer.json")).unwrap())
            .unwrap();
    let vocab = tok["model"]["vocab"].as_object_mut().unwrap();
    let (a, b) = (vocab["Hello"].clone(), vocab["hello"].clone());
    vocab.insert("Hello".into(), b);
    vocab.insert("hello".into(), a);
    std::fs::write(other.join("tokenizer.json"), tok.to_string()).unwrap();
    let args: Vec<&str> = common
        .iter()
        .copied()
        .chain(["--draft-model", other.to_str().unwrap()])
        .collect();
    assert_one_error(&poot(&args), "vocabulary differs");
}

/// `poot rerank` prints the documents in the order sentence-transformers' CrossEncoder ranks
/// them, with its scores (within 1e-5; the reranker fixture's reference); an embedding model,
/// a packaged name and a query too long for the model are one error line.
#[test]
fn rerank_prints_the_documents_best_first_as_cross_encoder_ranks_them() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../poot-serve/tests/fixtures/tiny-reranker");
    let model = fixture.to_str().unwrap();
    let o = poot(&["rerank", "-m", "minilm", "q", "d"]);
    assert_one_error(&o, "not a cross-encoder");
    let o = poot(&["rerank", "--help"]);
    assert!(stdout(&o).contains("--top-n"), "{}", stdout(&o));
    if !vulkan() {
        return;
    }
    let reference: Json =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("reference.json")).unwrap())
            .unwrap();
    let case = &reference["cases"][0];
    let docs: Vec<&str> = case["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    let mut args = vec!["rerank", "--model", model, case["query"].as_str().unwrap()];
    args.extend(&docs);
    args.extend(["--backend", "wgpu", "--quiet"]);
    let o = poot(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), docs.len());
    for (line, want) in lines.iter().zip(case["ranking"].as_array().unwrap()) {
        let fields: Vec<&str> = line.split('\t').collect();
        let index: usize = fields[0].parse().unwrap();
        assert_eq!(index as u64, want.as_u64().unwrap(), "{line}");
        let score: f64 = fields[1].parse().unwrap();
        assert!(
            (score - case["scores"][index].as_f64().unwrap()).abs() <= 1e-5,
            "{line}"
        );
        assert_eq!(fields[2], docs[index]);
    }
    args.extend(["--json", "--top-n", "2"]);
    let o = poot(&args);
    let v: Json = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["results"].as_array().unwrap().len(), 2);
    assert_eq!(v["results"][0]["index"], case["ranking"][0]);
    let long = "cats ".repeat(80);
    let o = poot(&["rerank", "-m", model, &long, "cats", "--backend", "wgpu"]);
    assert_one_error(&o, "the query is");
    let bert =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-models/tests/fixtures/random/bert");
    let o = poot(&[
        "rerank",
        "-m",
        bert.to_str().unwrap(),
        "q",
        "d",
        "--backend",
        "wgpu",
    ]);
    assert_one_error(&o, "not a cross-encoder");
}

#[test]
fn an_invalid_or_doubled_guide_is_one_error_line_before_the_backend_opens() {
    let dir = repo().join("crates/poot-serve/tests/fixtures/tiny-chat");
    let model = dir.to_str().unwrap();
    let schema_file = temp_dir("guide").join("bad.json");
    std::fs::create_dir_all(schema_file.parent().unwrap()).unwrap();
    std::fs::write(&schema_file, "{not json").unwrap();
    let bad_schema = schema_file.to_str().unwrap();
    for (flags, says) in [
        (vec!["--regex", "([0-9]"], "invalid regex"),
        (vec!["--json-schema", bad_schema], "--json-schema"),
        (vec!["--grammar", "/nonexistent/g.lark"], "--grammar"),
    ] {
        let mut args = vec!["run", model, "x", "--backend", "wgpu"];
        args.extend(flags);
        let o = poot(&args);
        assert_one_error(&o, says);
        assert!(!stderr(&o).contains("backend wgpu on"), "{}", stderr(&o));
    }
    // Two guides at once: clap refuses the pair.
    let o = poot(&["run", model, "x", "--regex", "a", "--json-object"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}

#[test]
fn a_regex_guides_smollm2s_answer() {
    let Some(o) = smollm2_on_wgpu(12, &["--regex", "[0-9]{3}-[a-z]{2}", "-v"]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let text = out.trim_end();
    let b = text.as_bytes();
    assert!(
        b.len() == 6
            && b[..3].iter().all(u8::is_ascii_digit)
            && b[3] == b'-'
            && b[4..].iter().all(u8::is_ascii_lowercase),
        "{text:?}"
    );
    assert!(stderr(&o).contains("guided decoding: "), "{}", stderr(&o));
}

/// `poot run` with `CC` naming a compiler that does not run (`missing`) or fails (`/bin/false`).
fn run_without_compiler(model: &std::path::Path, backend: &str, compiler: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poot"))
        .args(["run", &model.to_string_lossy(), "Hi", "--max-new", "1"])
        .args(["--backend", backend])
        .env("XDG_RUNTIME_DIR", "/tmp")
        .env("CC", compiler)
        .output()
        .unwrap()
}

#[test]
fn a_missing_or_broken_c_compiler_is_one_error_saying_what_to_install() {
    let Some(path) = smollm2() else { return };
    for compiler in ["/nonexistent/bin/cc", "/bin/false"] {
        let o = run_without_compiler(&path, "cpu", compiler);
        assert_one_error(&o, compiler);
        assert!(stderr(&o).contains("apt install gcc"), "{}", stderr(&o));
    }
}

#[test]
fn auto_falls_back_past_a_missing_c_compiler_with_one_line_saying_so() {
    let Some(path) = smollm2() else { return };
    let o = run_without_compiler(&path, "auto", "/nonexistent/bin/cc");
    let err = stderr(&o);
    if open_executor(BackendChoice::Ptx).is_ok() {
        // The GPU comes first: no compiler is needed.
        assert!(o.status.success(), "{err}");
        return;
    }
    let adapter = open_executor(BackendChoice::Wgpu).map(|e| e.device_name);
    if let Ok(name) = &adapter
        && !name.contains("llvmpipe")
    {
        // A hardware Vulkan GPU comes before the CPU: no compiler is needed.
        assert!(o.status.success(), "{err}");
        return;
    }
    if adapter.is_ok() {
        // The software adapter (lavapipe) is what remains: taken with one line.
        assert!(o.status.success(), "{err}");
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("the CPU backend is unavailable"))
            .collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].contains("/nonexistent/bin/cc") && lines[0].contains("instead"),
            "{err}"
        );
        assert!(!stdout(&o).trim().is_empty(), "no token generated");
    } else {
        // Nothing usable: one error naming each backend's reason.
        assert_one_error(&o, "apt install gcc");
    }
}
