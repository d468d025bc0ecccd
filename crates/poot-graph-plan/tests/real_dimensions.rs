//! Reference models at their real dimensions plan for the PTX preset: each is built from its
//! published config and a synthetic tensor index (shapes and stored types derived from the
//! config, no bytes), traced for a decode step and a 512-token prefill chunk over a cache of the
//! model's whole context, and compiled. A device whose single-buffer limit is below the 8B's
//! embedding table refuses it, naming the constant and both sizes.
//!
//! The same models' paged steps (decode of one and eight rows, a prefill chunk, over a pool of
//! the whole context) plan for the PTX and wgpu presets wherever their contiguous steps do.
//!
//! Run with `--nocapture` to see each graph's dispatch and kernel counts and the time spent.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::reference_models::*;
use poot_graph_ir::TraceLimits;
use poot_graph_plan::{BufferRole, Plan, PlanError, Target, compile};
use poot_models::{KvLayout, StepShape, StepSpec};

/// Bytes of the plan's buffers of each kind: constants, states, scratch.
fn buffer_bytes(plan: &Plan) -> (u64, u64, u64) {
    let mut sums = (0, 0, 0);
    for b in &plan.buffers {
        match b.role {
            BufferRole::Const { .. } | BufferRole::Table { .. } => sums.0 += b.size_bytes,
            BufferRole::State { .. } => sums.1 += b.size_bytes,
            BufferRole::Scratch => sums.2 += b.size_bytes,
            BufferRole::Slot { .. } => {}
        }
    }
    sums
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Traces `r`'s decode step and a prefill chunk over its whole context and plans both for the
/// PTX preset; prints each graph's counts and times.
fn plans_at_real_dimensions(r: Reference) {
    let t0 = Instant::now();
    let model = build(&r);
    let build_time = t0.elapsed();
    let capacity = model.config().max_positions;
    let target = Target::ptx_preset();
    println!(
        "{}: built in {:.2?} ({} layers, context {capacity})",
        r.name,
        build_time,
        model.config().n_layers
    );
    for (what, tokens) in [("decode", 1), ("prefill", PREFILL_TOKENS)] {
        let spec = StepSpec::step(StepShape::new(1, tokens, capacity));
        let t = Instant::now();
        let graph = model
            .trace(&spec, TraceLimits::standard(MAX_STEP_TOKENS))
            .unwrap_or_else(|e| panic!("{} {what}: trace: {e}", r.name));
        let trace_time = t.elapsed();
        let t = Instant::now();
        let plan = compile(&graph, &target)
            .unwrap_or_else(|e| panic!("{} {what} on {}: {e}", r.name, target.backend));
        let plan_time = t.elapsed();
        for k in &plan.kernels {
            k.validate().unwrap();
        }
        for d in &plan.dispatches {
            assert_eq!(d.args.len(), plan.kernels[d.kernel].params.len());
            assert!(d.grid[0] >= 1 && d.grid[0] <= target.limits.max_groups_x);
        }
        assert_eq!(plan.states.len(), 2 * model.config().n_layers);
        assert_eq!(plan.states.len(), graph.states().count());
        let (const_bytes, state_bytes, scratch_bytes) = buffer_bytes(&plan);
        println!(
            "{} {what} (tokens {tokens}, capacity {capacity}) on {}: {} eqns, {} dispatches, \
             {} kernels; consts {:.2} GiB, states {:.2} GiB, scratch {:.2} GiB; \
             trace {trace_time:.2?}, plan {plan_time:.2?}",
            r.name,
            target.backend,
            graph.eqns().len(),
            plan.dispatches.len(),
            plan.kernels.len(),
            gib(const_bytes),
            gib(state_bytes),
            gib(scratch_bytes),
        );
    }
    let total: Duration = t0.elapsed();
    println!("{}: total {total:.2?}", r.name);
}

/// Tokens per block of the paged pools below.
const BLOCK_TOKENS: usize = 16;

/// Traces `r`'s paged steps over a pool of the whole context plus one scratch block (decode of
/// one and of eight rows, a prefill chunk) and plans them for the PTX and wgpu presets. The
/// paged layout plans wherever the contiguous one does for the same rows and tokens (on PTX,
/// every graph). Where a preset refuses the contiguous graph, the paged graph is refused with
/// the same error, or plans because the refusal was the contiguous cache itself (eight rows of
/// a whole-context cache in one buffer), which the shared pool replaces. Each row's cache is
/// read through the block table inside the attention contractions, so paging adds no scratch
/// for the gathered cache.
fn paged_plans_at_real_dimensions(r: Reference) {
    let model = build(&r);
    let capacity = model.config().max_positions;
    let kv = KvLayout::Paged {
        block_tokens: BLOCK_TOKENS,
        blocks: capacity / BLOCK_TOKENS + 1,
    };
    let trace = |shape: StepShape| {
        model
            .trace(
                &StepSpec::step(shape),
                TraceLimits::standard(MAX_STEP_TOKENS),
            )
            .unwrap_or_else(|e| panic!("{} {shape:?}: trace: {e}", r.name))
    };
    for target in [Target::ptx_preset(), Target::wgpu_preset()] {
        for (what, rows, tokens) in [
            ("decode", 1, 1),
            ("8-row decode", 8, 1),
            ("prefill", 1, PREFILL_TOKENS),
        ] {
            let shape = StepShape::new(rows, tokens, capacity);
            let paged = trace(shape.with_kv(kv));
            let t = Instant::now();
            let got = compile(&paged, &target);
            let plan_time = t.elapsed();
            let want = compile(&trace(shape), &target);
            match (&got, &want) {
                (Ok(plan), Ok(contiguous)) => {
                    for k in &plan.kernels {
                        k.validate().unwrap();
                    }
                    assert_eq!(plan.states.len(), 2 * model.config().n_layers);
                    let (_, state_bytes, scratch_bytes) = buffer_bytes(plan);
                    let contiguous_scratch = buffer_bytes(contiguous).2;
                    assert!(
                        scratch_bytes <= contiguous_scratch,
                        "{} paged {what} on {}: scratch {scratch_bytes} B, contiguous \
                         {contiguous_scratch} B",
                        r.name,
                        target.backend
                    );
                    println!(
                        "{} paged {what} on {}: {} dispatches; pool {:.2} GiB, scratch {:.2} GiB; \
                         plan {plan_time:.2?}",
                        r.name,
                        target.backend,
                        plan.dispatches.len(),
                        gib(state_bytes),
                        gib(scratch_bytes),
                    );
                }
                (Ok(_), Err(w)) => {
                    let contiguous_cache = matches!(
                        w,
                        PlanError::ValueTooLarge { label, .. } if label.starts_with("kv.")
                    );
                    assert!(
                        contiguous_cache,
                        "{} paged {what} on {} plans, contiguous refused for another reason: {w}",
                        r.name, target.backend
                    );
                    println!(
                        "{} paged {what} on {}: plans; the contiguous cache is refused: {w}",
                        r.name, target.backend
                    );
                }
                (Err(g), Err(w)) => {
                    assert_eq!(g, w, "{} paged {what} on {}", r.name, target.backend);
                    println!(
                        "{} paged {what} on {}: refused as contiguous is: {g}",
                        r.name, target.backend
                    );
                }
                (Err(g), Ok(_)) => panic!(
                    "{} paged {what} on {} is refused where contiguous plans: {g}",
                    r.name, target.backend
                ),
            }
            if target.backend == Target::ptx_preset().backend {
                assert!(
                    got.is_ok(),
                    "{} paged {what} on ptx: {:?}",
                    r.name,
                    got.err()
                );
            }
        }
    }
}

#[test]
fn qwen2_5_0_5b_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(qwen2_5_0_5b());
}

#[test]
fn qwen3_0_6b_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(qwen3_0_6b());
}

#[test]
fn llama_3_1_8b_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(llama_3_1_8b());
}

#[test]
fn llama_3_1_8b_q4_k_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(llama_3_1_8b_q4_k());
}

#[test]
fn gemma3_27b_plans_paged_at_real_dimensions() {
    paged_plans_at_real_dimensions(gemma3_27b());
}

#[test]
fn qwen2_5_0_5b_plans_at_real_dimensions() {
    plans_at_real_dimensions(qwen2_5_0_5b());
}

#[test]
fn qwen3_0_6b_plans_at_real_dimensions() {
    plans_at_real_dimensions(qwen3_0_6b());
}

#[test]
fn llama_3_1_8b_plans_at_real_dimensions() {
    plans_at_real_dimensions(llama_3_1_8b());
}

#[test]
fn llama_3_1_8b_q4_k_plans_at_real_dimensions() {
    plans_at_real_dimensions(llama_3_1_8b_q4_k());
}

#[test]
fn gemma3_27b_plans_at_real_dimensions() {
    plans_at_real_dimensions(gemma3_27b());
}

/// The 8B's decode graph on a device whose largest buffer (512 MiB) is below its BF16 embedding
/// table (128256 x 4096 x 2 B): refused, naming the table and both sizes. The full-context KV
/// cache of one layer is exactly 512 MiB and fits.
#[test]
fn llama_3_1_8b_is_refused_below_its_embedding_table() {
    let model = build(&llama_3_1_8b());
    let capacity = model.config().max_positions;
    let spec = StepSpec::step(StepShape::new(1, 1, capacity));
    let graph = model
        .trace(&spec, TraceLimits::standard(MAX_STEP_TOKENS))
        .unwrap();
    let limit_bytes: u64 = 512 << 20;
    let embed_bytes: u64 = 128_256 * 4096 * 2;
    for mut target in [Target::ptx_preset(), Target::wgpu_preset()] {
        target.limits.max_buffer_bytes = limit_bytes;
        let err = compile(&graph, &target).unwrap_err();
        let message = err.to_string();
        println!("Llama-3.1-8B decode, {limit_bytes} B buffer limit: {message}");
        assert_eq!(
            err,
            PlanError::ConstantTooLarge {
                backend: target.backend,
                name: "w.embed".into(),
                needed_bytes: embed_bytes,
                limit_bytes,
            }
        );
        for part in [
            "w.embed".to_string(),
            embed_bytes.to_string(),
            limit_bytes.to_string(),
        ] {
            assert!(message.contains(&part), "`{message}` lacks `{part}`");
        }
    }
}
