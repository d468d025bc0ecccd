//! Dispatches per decode token at real dimensions (SmolLM2-135M, Gemma 3 270M), by kernel kind
//! and per layer: the launch count that sets a small model's decode speed. The models are planned
//! over zero weights for the PTX preset; each count is printed (run with `--nocapture`) and held
//! under a ceiling so a change that adds launches fails here.

#![allow(clippy::unwrap_used)]

mod common;

use common::reference_models::*;
use poot_graph_ir::TraceLimits;
use poot_graph_plan::{Plan, Target, compile};
use poot_models::{KvLayout, StepShape, StepSpec};

/// The cache the driver's decode entry attends over (`poot run`'s default capacity).
const CAPACITY: usize = 2048;

/// The kernel kinds layer `l` launches, in order.
fn layer_kinds(plan: &Plan, l: usize) -> Vec<&str> {
    let prefix = format!("l{l}.");
    plan.dispatches
        .iter()
        .filter(|d| d.label.starts_with(&prefix))
        .map(|d| plan.kernels[d.kernel].kind())
        .collect()
}

/// Plans `r`'s decode step and prints its dispatch counts; returns the plan and layer count.
fn decode_plan(r: &Reference) -> (Plan, usize) {
    step_plan(r, 1)
}

/// Plans `r`'s step of `tokens` tokens and prints its dispatch counts; returns the plan and
/// layer count.
fn step_plan(r: &Reference, tokens: usize) -> (Plan, usize) {
    step_plan_on(r, tokens, &Target::ptx_preset())
}

fn step_plan_on(r: &Reference, tokens: usize, target: &Target) -> (Plan, usize) {
    let model = build(r);
    let layers = model.config().n_layers;
    let spec = StepSpec::step(StepShape::new(1, tokens, CAPACITY));
    let graph = model
        .trace(&spec, TraceLimits::standard(MAX_STEP_TOKENS))
        .unwrap();
    let plan = compile(&graph, target).unwrap();
    let in_layer = |l: usize| {
        let prefix = format!("l{l}.");
        plan.dispatches
            .iter()
            .filter(|d| d.label.starts_with(&prefix))
            .count()
    };
    let per_layer: Vec<usize> = (0..layers).map(in_layer).collect();
    println!(
        "{} step of {tokens} (capacity {CAPACITY}): {} dispatches, {} kernels; per layer {:?}; \
         outside layers {}",
        r.name,
        plan.dispatches.len(),
        plan.kernels.len(),
        per_layer.iter().min()..=per_layer.iter().max(),
        plan.dispatches.len() - per_layer.iter().sum::<usize>(),
    );
    for (kind, n) in plan.dispatches_by_kind() {
        println!("  {kind:>16}: {n}");
    }
    let layer0: Vec<&str> = plan
        .dispatches
        .iter()
        .filter(|d| d.label.starts_with("l0."))
        .map(|d| plan.kernels[d.kernel].kind())
        .collect();
    println!("  layer 0: {}", layer0.join(" "));
    if std::env::var_os("POOT_COUNT_LABELS").is_some() {
        for d in plan
            .dispatches
            .iter()
            .filter(|d| ["l0.", "l1.", "l2."].iter().any(|p| d.label.starts_with(p)))
        {
            println!(
                "    {:>12} {:?} {} {}",
                plan.kernels[d.kernel].kind(),
                d.grid,
                d.label,
                plan.kernels[d.kernel].name,
            );
        }
    }
    (plan, layers)
}

/// A SmolLM2 decode layer's kernels, its cache writes being `writes`: norm and Q/K/V
/// projections; both cache writes with the keys' rotary embedding; attention and its combine;
/// output projection + residual; gate/up + SiLU product; down + residual.
fn smollm2_layer(writes: &str) -> [&str; 7] {
    [
        "gemv",
        writes,
        "attention_decode",
        "attention_combine",
        "gemv_epilogue",
        "gemv_epilogue",
        "gemv_epilogue",
    ]
}

#[test]
fn smollm2_135m_decode_dispatches() {
    let (plan, layers) = decode_plan(&smollm2_135m());
    let layer = smollm2_layer("update_slice");
    for l in 0..layers {
        assert_eq!(layer_kinds(&plan, l), layer, "layer {l}");
    }
    // The final norm and the head (the mask and the embedding rows are computed in place).
    assert_eq!(plan.dispatches.len(), layer.len() * layers + 2);
}

#[test]
fn smollm2_135m_paged_decode_writes_keys_and_values_in_one_kernel() {
    let r = smollm2_135m();
    let model = build(&r);
    let layers = model.config().n_layers;
    // A server's step: 64 sequences' blocks of 16 positions in one pool.
    let shape = StepShape::new(1, 1, CAPACITY).with_kv(KvLayout::Paged {
        block_tokens: 16,
        blocks: 64 * CAPACITY / 16 + 1,
    });
    let graph = model
        .trace(
            &StepSpec::step(shape),
            TraceLimits::standard(MAX_STEP_TOKENS),
        )
        .unwrap();
    let plan = compile(&graph, &Target::ptx_preset()).unwrap();
    // As the contiguous step's, the cache writes scattering through the write map.
    let layer = smollm2_layer("scatter");
    for l in 0..layers {
        assert_eq!(layer_kinds(&plan, l), layer, "layer {l}");
    }
}

#[test]
fn gemma3_270m_decode_dispatches() {
    let (plan, layers) = decode_plan(&gemma3_270m());
    // As SmolLM2's, but the sandwich norms after attention and feed-forward each need the
    // whole projection output: the output and down projections stay plain, and each residual
    // add with its norm is a row kernel.
    let layer = [
        "gemv",
        "update_slice",
        "attention_decode",
        "attention_combine",
        "gemv",
        "row_map",
        "gemv_epilogue",
        "gemv",
        "row_map",
    ];
    for l in 0..layers {
        assert_eq!(layer_kinds(&plan, l), layer, "layer {l}");
    }
    // The final norm and the head.
    assert_eq!(plan.dispatches.len(), layer.len() * layers + 2);
}

#[test]
fn prefill_chunks_of_64_run_tiled_projections() {
    // A prefill chunk's projections are tiled contractions with decode's fusions (the norm
    // inside Q/K/V and gate/up, the residual adds and the SiLU product in epilogues). At these
    // widths their tiles are too few to fill a large GPU, so each is split along the
    // contraction axis and a second kernel adds up and finishes: SmolLM2 has 10 launches a
    // layer where one workgroup per output had 8 (with the norms as row kernels of their own).
    // SmolLM2's attention takes 64 queries a workgroup on the matrix units; Gemma 3's query is
    // normed (a row reduction per query), so it keeps one query a workgroup.
    let split = ["gemm_split", "gemm_combine"];
    let smollm2 = [
        &split[..],
        &["update_slice", "attention_mma"],
        &split,
        &split,
        &split,
    ]
    .concat();
    let gemma3 = [
        &split[..],
        &["update_slice", "attention"],
        &split,
        &["row_map"],
        &split,
        &split,
        &["row_map"],
    ]
    .concat();
    // The tf32 tiles, which block weights take with `block_tiles=0` below the library's rows.
    let mut tf32_tiles = Target::ptx_preset();
    tf32_tiles.tuning = poot_graph_plan::Tuning::parse("block_tiles=0,lib_rows=128").unwrap();
    for (r, layer) in [(smollm2_135m(), smollm2), (gemma3_270m(), gemma3)] {
        let (plan, layers) = step_plan_on(&r, 64, &tf32_tiles);
        for l in 0..layers {
            assert_eq!(layer_kinds(&plan, l), layer, "{} layer {l}", r.name);
        }
    }
}

#[test]
fn prefill_chunks_of_block_weights_go_to_block_tiles_then_the_library() {
    // By default a chunk below the library's 64 rows stages its block weights in f16 tiles:
    // each left side (a norm or the attention's output, rounded to f16) computed once by a
    // kernel of its own, the projections split along the contraction axis (the residual adds
    // and the SiLU product in the kernels adding the splits up). From 64 rows the library
    // multiplies, with nothing of the projections left in kernels but their norms and
    // epilogues.
    let split = ["gemm_split", "gemm_combine"];
    let tiles = [
        &["row_map"][..],
        &split,
        &["update_slice", "attention_mma", "map"],
        &split,
        &["row_map"],
        &split,
        &split,
    ]
    .concat();
    let r = smollm2_135m();
    let (plan, layers) = step_plan(&r, 32);
    for l in 0..layers {
        assert_eq!(layer_kinds(&plan, l), tiles, "32 tokens, layer {l}");
    }
    assert!(plan.contractions.is_empty());
    // Q, K, V, the output projection, gate, up and down: seven library products a layer.
    let (plan, layers) = step_plan(&r, 64);
    for l in 0..layers {
        assert!(
            !layer_kinds(&plan, l).iter().any(|k| k.starts_with("gemm")),
            "64 tokens, layer {l}: {:?}",
            layer_kinds(&plan, l)
        );
    }
    assert!(plan.contractions.len() >= 7 * layers);
}
