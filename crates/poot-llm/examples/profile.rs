//! Where a step's time goes: every kernel of the greedy step timed on the device (captured back
//! to back, so launch gaps are not counted), grouped by kernel and by the value it computes
//! with layer numbers folded, next to the measured time of whole steps. The step is a decode
//! step of `--rows` rows (1 by default), or with `--prefill T` a prompt chunk of T tokens; the
//! library's contractions are not timed (the whole step less the kernels' sum is theirs).
//!
//!   profile <checkpoint> [--capacity N] [--position P] [--reps R] [--top K] [--tokens T]
//!           [--rows R] [--prefill T] [--backend ptx|wgpu|vulkan|rocm|cpu] [--paged] [--adjusted]
//!           [--kv-f16]

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use poot_llm::sampling::Head;
use poot_llm::{
    BackendChoice, Driver, DriverOptions, GenerateRequest, Layout, LoadOptions, ModelHandle,
    Sampler, open_executor,
};
use poot_models::{KvType, Registry};

fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().unwrap())
}

/// `l12.attn.q` -> `l*.attn.q`.
fn fold_layers(label: &str) -> String {
    let mut out = String::new();
    let mut digits = false;
    for c in label.chars() {
        if c.is_ascii_digit() {
            if !digits {
                out.push('*');
            }
            digits = true;
        } else {
            digits = false;
            out.push(c);
        }
    }
    out
}

fn table(title: &str, rows: &HashMap<String, (usize, f64)>, total: f64, top: usize) {
    let mut v: Vec<_> = rows.iter().collect();
    v.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
    println!("\n| {title} | dispatches | us per step | share |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, (n, s)) in v.into_iter().take(top) {
        println!(
            "| {name} | {n} | {:.1} | {:.1}% |",
            s * 1e6,
            100.0 * s / total.max(1e-12)
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = PathBuf::from(args.get(1).expect("usage: profile <checkpoint> [flags]"));
    let capacity = flag(&args, "--capacity", 256);
    let position = flag(&args, "--position", capacity / 2);
    let reps = flag(&args, "--reps", 20) as u32;
    let top = flag(&args, "--top", 25);
    let tokens = flag(&args, "--tokens", 64);
    let backend = match args
        .iter()
        .position(|a| a == "--backend")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
    {
        Some("wgpu") => BackendChoice::Wgpu,
        Some("cpu") => BackendChoice::Cpu,
        Some("ptx") => BackendChoice::Ptx,
        Some("vulkan") => BackendChoice::Vulkan,
        Some("rocm") => BackendChoice::Rocm,
        _ => BackendChoice::Auto,
    };
    let handle = Arc::new(
        ModelHandle::load(
            &path,
            &Registry::builtin().unwrap(),
            &LoadOptions::default(),
        )
        .unwrap(),
    );
    let opened = open_executor(backend).unwrap();
    println!("device: {} ({})", opened.device_name, opened.backend);
    let rows = flag(&args, "--rows", 1);
    let prefill = flag(&args, "--prefill", 0);
    // --kv-f16: an f16 cache instead of the default f32 one.
    let kv_type = if args.iter().any(|a| a == "--kv-f16") {
        KvType::F16
    } else {
        KvType::F32
    };
    let options = DriverOptions::new(capacity, prefill.max(16).min(capacity))
        .with_rows(rows)
        .with_kv_type(kv_type);
    // --paged: the serving layout (blocks of 16 positions through a block table).
    let layout = if args.iter().any(|a| a == "--paged") {
        Layout::Paged {
            block_tokens: 16,
            blocks: capacity.div_ceil(16) + 1,
        }
    } else {
        Layout::Contiguous
    };
    println!("layout: {layout:?}");
    let mut driver = Driver::new(Arc::clone(&handle), opened.executor, options)
        .unwrap()
        .serve(layout)
        .map_err(|r| r.1)
        .unwrap();
    // Whole steps, for comparison: greedy decode, twice (the first run warms up).
    let prompt: Vec<u32> = (0..prefill.max(8) as u32).map(|i| 100 + i % 1000).collect();
    for run in 0..2 {
        let req = GenerateRequest {
            ignore_eos: true,
            ..GenerateRequest::new(prompt.clone(), tokens, Sampler::greedy())
        };
        let g = driver
            .generate(req, &mut |_| ControlFlow::Continue(()))
            .unwrap();
        let per = g.decode_seconds / (g.tokens.len().max(2) - 1) as f64;
        println!(
            "whole decode steps (run {run}, chained {}): {:.1} us per token, {:.0} tok/s; \
             prompt of {} tokens in {:.1} us ({:.0} tok/s)",
            options.chain,
            per * 1e6,
            1.0 / per,
            prompt.len(),
            g.prefill_seconds * 1e6,
            prompt.len() as f64 / g.prefill_seconds
        );
    }
    // --adjusted: the head penalties, biases and guided masks use.
    let head = if args.iter().any(|a| a == "--adjusted") {
        Head::Adjusted
    } else {
        Head::Greedy
    };
    let step_tokens = prefill.max(1);
    let times = driver
        .profile_step(position, step_tokens, reps, head)
        .unwrap();
    let Some(times) = times else {
        println!("this backend cannot time kernels");
        return;
    };
    let total: f64 = times.iter().map(|t| t.seconds).sum();
    println!(
        "\nsum of kernel times: {:.1} us over {} dispatches (position {position}, capacity {capacity})",
        total * 1e6,
        times.len()
    );
    let mut by_kernel: HashMap<String, (usize, f64)> = HashMap::new();
    let mut by_value: HashMap<String, (usize, f64)> = HashMap::new();
    for t in &times {
        let k = by_kernel.entry(t.kernel.clone()).or_default();
        k.0 += 1;
        k.1 += t.seconds;
        let v = by_value
            .entry(format!("{} {}", t.kernel, fold_layers(&t.label)))
            .or_default();
        v.0 += 1;
        v.1 += t.seconds;
    }
    table("kernel", &by_kernel, total, top);
    table("kernel and value", &by_value, total, top);
    let mut slowest: Vec<_> = times.iter().collect();
    slowest.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    println!("\n| slowest dispatch | grid | us |");
    println!("| --- | --- | ---: |");
    for t in slowest.into_iter().take(10) {
        println!(
            "| {} {} | {:?} | {:.1} |",
            t.kernel,
            t.label,
            t.grid,
            t.seconds * 1e6
        );
    }
}
