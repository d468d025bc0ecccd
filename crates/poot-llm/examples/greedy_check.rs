//! Greedy tokens of a real checkpoint on a GPU backend, checked against a committed reference
//! (`crates/poot-models/tests/fixtures/real/*.json`, from transformers on the same weights),
//! with timings. Optionally runs the shared device suite first.
//!
//!   greedy_check <ptx|wgpu|vulkan|rocm|cpu|auto> <checkpoint> <reference.json> [--suite] [--decode-steps N]
//!   greedy_check <ptx|wgpu|vulkan|rocm|cpu|auto> --suite-only
//!
//! Prints one line per case and `N passed, M failed`; exits non-zero on a failure. The host
//! takes the argmax of the logits here: the on-device sampling suffix belongs to the driver.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use poot_executor::{EntryId, ExecutableId, Executor, StepInputs, StepOutputs};
use poot_graph_ir::{Slot, TraceLimits};
use poot_llm::{BackendChoice, HandleWeights, LoadOptions, ModelHandle, open_executor};
use poot_models::{Registry, StepShape, StepSpec};
use serde::Deserialize;

const CAPACITY: usize = 256;
const CHUNK: usize = 16;
const FLIP_MARGIN: f32 = 0.02;

#[derive(Deserialize)]
struct Case {
    name: String,
    prompt_ids: Vec<i32>,
    greedy_ids: Vec<i32>,
    margins: Vec<f32>,
}

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

struct Runner<'a> {
    exec: &'a mut dyn Executor,
    handle: &'a ModelHandle,
    exe: ExecutableId,
    entries: HashMap<usize, EntryId>,
}

impl Runner<'_> {
    fn entry(&mut self, tokens: usize) -> EntryId {
        if let Some(&e) = self.entries.get(&tokens) {
            return e;
        }
        let t0 = Instant::now();
        let spec = StepSpec::step(StepShape::new(1, tokens, CAPACITY));
        let graph = self
            .handle
            .model()
            .trace(&spec, TraceLimits::standard(4096))
            .unwrap();
        let e = self
            .exec
            .add_entry(self.exe, &graph, &poot_llm::entry_label(&spec, None))
            .unwrap();
        eprintln!("entry for {tokens} tokens: {} ms", t0.elapsed().as_millis());
        self.entries.insert(tokens, e);
        e
    }

    /// One step of `tokens` at positions `start..`; returns the last token's logits.
    fn step(&mut self, tokens: &[i32], start: usize) -> Vec<f32> {
        let e = self.entry(tokens.len());
        let mut inputs = StepInputs::new();
        inputs.set_i32(Slot::Token, tokens);
        let pos: Vec<i32> = (start..start + tokens.len()).map(|p| p as i32).collect();
        inputs.set_i32(Slot::Pos, &pos);
        let mut out = StepOutputs::default();
        self.exec.step(e, &inputs, &mut out).unwrap();
        out.f32(0).unwrap()
    }
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let suite_only = args.iter().any(|a| a == "--suite-only");
    if args.len() < 4 && !(suite_only && args.len() == 3) {
        eprintln!(
            "usage: greedy_check <ptx|wgpu|vulkan|rocm|cpu|auto> <checkpoint> <reference.json> [--suite] \
             | greedy_check <ptx|wgpu|vulkan|rocm|cpu|auto> --suite-only"
        );
        std::process::exit(2);
    }
    let choice = match args[1].as_str() {
        "ptx" => BackendChoice::Ptx,
        "wgpu" => BackendChoice::Wgpu,
        "cpu" => BackendChoice::Cpu,
        "vulkan" => BackendChoice::Vulkan,
        "rocm" => BackendChoice::Rocm,
        _ => BackendChoice::Auto,
    };
    let mut opened = match open_executor(choice) {
        Ok(o) => o,
        Err(e) => {
            println!("SKIP: {e}");
            std::process::exit(2);
        }
    };
    println!("backend {} on {}", opened.backend, opened.device_name);
    let mut failed = 0usize;
    let mut passed = 0usize;
    if suite_only || args.iter().any(|a| a == "--suite") {
        let t0 = Instant::now();
        let outcomes = poot_executor::suite::run(opened.executor.as_mut());
        for o in outcomes.iter().filter(|o| !o.passed) {
            println!("FAIL suite {}: {}", o.name, o.detail);
        }
        let bad = outcomes.iter().filter(|o| !o.passed).count();
        println!(
            "suite: {} passed, {} failed ({} ms); steps run in two parts around a late slot: {}",
            outcomes.len() - bad,
            bad,
            t0.elapsed().as_millis(),
            opened.executor.stats().overlapped_steps
        );
        failed += bad;
        passed += outcomes.len() - bad;
        if suite_only {
            std::process::exit(i32::from(bad > 0));
        }
    }
    let registry = Registry::builtin().unwrap();
    let t0 = Instant::now();
    let handle = Arc::new(
        ModelHandle::load(&PathBuf::from(&args[2]), &registry, &LoadOptions::default()).unwrap(),
    );
    println!(
        "loaded {} in {} ms",
        handle.config().family,
        t0.elapsed().as_millis()
    );
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(&args[3]).unwrap()).unwrap();
    let exe = opened
        .executor
        .load_weights(Box::new(HandleWeights::new(Arc::clone(&handle))))
        .unwrap();
    let mut runner = Runner {
        exec: opened.executor.as_mut(),
        handle: &handle,
        exe,
        entries: HashMap::new(),
    };
    for case in &reference.cases {
        let first = runner.entry(1);
        runner.exec.reset_state(first).unwrap();
        let t_prefill = Instant::now();
        let mut pos = 0;
        let mut logits = Vec::new();
        for chunk in case.prompt_ids.chunks(CHUNK) {
            if chunk.len() == CHUNK {
                logits = runner.step(chunk, pos);
                pos += chunk.len();
            } else {
                for &t in chunk {
                    logits = runner.step(&[t], pos);
                    pos += 1;
                }
            }
        }
        let prefill_ms = t_prefill.elapsed().as_secs_f64() * 1e3;
        let t_decode = Instant::now();
        let mut got = Vec::new();
        let mut verdict = Ok(());
        for (i, &want) in case.greedy_ids.iter().enumerate() {
            let id = argmax(&logits) as i32;
            got.push(id);
            if id != want {
                verdict = if case.margins[i] < FLIP_MARGIN {
                    Ok(())
                } else {
                    Err(format!(
                        "step {i}: token {id}, reference {want} (margin {})",
                        case.margins[i]
                    ))
                };
                break;
            }
            if i + 1 < case.greedy_ids.len() {
                logits = runner.step(&[id], pos);
                pos += 1;
            }
        }
        let decode_s = t_decode.elapsed().as_secs_f64();
        let tok_s = (got.len().saturating_sub(1)) as f64 / decode_s.max(1e-9);
        match verdict {
            Ok(()) => {
                passed += 1;
                println!(
                    "PASS {}: {} tokens match; prefill {:.1} ms, decode {:.1} tok/s",
                    case.name,
                    got.len(),
                    prefill_ms,
                    tok_s
                );
            }
            Err(why) => {
                failed += 1;
                println!("FAIL {}: {why}; got {got:?}", case.name);
            }
        }
    }
    let stats = runner.exec.stats();
    println!(
        "dispatches per step by entry: {:?}; last step read {} B",
        stats.dispatches_per_step, stats.last_read_bytes
    );
    println!("{passed} passed, {failed} failed");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
