//! Writes the CUDA source of every kernel in a checkpoint's greedy decode step, one file per
//! kernel, with the step's dispatches (kernel, grid, label) in `dispatches.txt`: what the PTX
//! backend compiles (under `POOT_TUNING`, as the backend reads it), readable without a GPU.
//!
//!   dump_kernels <checkpoint> <out-dir> [--capacity N] [--tokens T] [--rows R]
//!                [--paged-blocks B] [--cpu] [--adjusted] [--kv-f16]
//!
//! `--cpu` writes the C the CPU backend compiles instead (planned for the CPU preset).
//! `--paged-blocks B` plans the step over a paged pool of B blocks of 16 positions, as a
//! server's steps are; `--rows R` plans R rows per step (with `--paged-blocks`).

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;

use poot_graph_ir::TraceLimits;
use poot_graph_plan::{Target, Tuning, compile};
use poot_kernel::render::{entry_name, render_cuda, render_host_c};
use poot_llm::sampling::append_head;
use poot_llm::{Head, LoadOptions, ModelHandle};
use poot_models::{KvLayout, KvType, Registry, StepShape, StepSpec};

fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().unwrap())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: dump_kernels <checkpoint> <out-dir> [--capacity N] [--tokens T] [--paged-blocks B] [--cpu]";
    let path = PathBuf::from(args.get(1).expect(usage));
    let out = PathBuf::from(args.get(2).expect(usage));
    let capacity = flag(&args, "--capacity", 1024);
    let tokens = flag(&args, "--tokens", 1);
    let handle = Arc::new(
        ModelHandle::load(
            &path,
            &Registry::builtin().unwrap(),
            &LoadOptions::default(),
        )
        .unwrap(),
    );
    let rows = flag(&args, "--rows", 1);
    let limits = TraceLimits::standard((rows * tokens) as u64);
    // --kv-f16: an f16 cache instead of the default f32 one.
    let kv_type = if args.iter().any(|a| a == "--kv-f16") {
        KvType::F16
    } else {
        KvType::F32
    };
    let mut shape = StepShape::new(rows, tokens, capacity).with_kv_type(kv_type);
    let blocks = flag(&args, "--paged-blocks", 0);
    if blocks > 0 {
        shape = shape.with_kv(KvLayout::Paged {
            block_tokens: 16,
            blocks,
        });
    }
    let spec = StepSpec::step(shape);
    let graph = handle.model().trace(&spec, limits).unwrap();
    // --adjusted: the head penalties, biases and guided masks use.
    let head = if args.iter().any(|a| a == "--adjusted") {
        Head::Adjusted
    } else {
        Head::Greedy
    };
    let graph = append_head(graph, head, limits, 1).unwrap();
    let cpu = args.iter().any(|a| a == "--cpu");
    let mut target = if cpu {
        Target::cpu_preset()
    } else {
        Target::ptx_preset()
    };
    target.tuning = Tuning::from_env().unwrap();
    let plan = compile(&graph, &target).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    for k in &plan.kernels {
        let (src, ext) = if cpu {
            (render_host_c(k).unwrap(), "c")
        } else {
            (render_cuda(k).unwrap(), "cu")
        };
        std::fs::write(out.join(format!("{}.{ext}", entry_name(k))), src).unwrap();
    }
    let mut listing = String::new();
    for d in &plan.dispatches {
        let k = &plan.kernels[d.kernel];
        listing.push_str(&format!("{} {:?} {}\n", entry_name(k), d.grid, d.label));
    }
    std::fs::write(out.join("dispatches.txt"), listing).unwrap();
    println!(
        "{} kernels, {} dispatches -> {}",
        plan.kernels.len(),
        plan.dispatches.len(),
        out.display()
    );
}
