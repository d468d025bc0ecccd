//! Dispatches per decode token at real dimensions (SmolLM2-135M, Gemma 3 270M), by kernel kind
//! and per layer: the launch count that sets a small model's decode speed. The models are planned
//! over zero weights for the PTX preset; each count is printed (run with `--nocapture`) and held
//! under a ceiling so a change that adds launches fails here.

#![allow(clippy::unwrap_used)]

mod common;

use common::reference_models::*;
use poot_graph_ir::TraceLimits;
use poot_graph_plan::{Plan, Target, compile};
use poot_models::{StepShape, StepSpec};

/// The cache the driver's decode entry attends over (`poot run`'s default capacity).
const CAPACITY: usize = 2048;

/// Plans `r`'s decode step and prints its dispatch counts; returns the plan and layer count.
fn decode_plan(r: &Reference) -> (Plan, usize) {
    let model = build(r);
    let layers = model.config().n_layers;
    let spec = StepSpec::step(StepShape::new(1, 1, CAPACITY));
    let graph = model
        .trace(&spec, TraceLimits::standard(MAX_STEP_TOKENS))
        .unwrap();
    let plan = compile(&graph, &Target::ptx_preset()).unwrap();
    let in_layer = |l: usize| {
        let prefix = format!("l{l}.");
        plan.dispatches
            .iter()
            .filter(|d| d.label.starts_with(&prefix))
            .count()
    };
    let per_layer: Vec<usize> = (0..layers).map(in_layer).collect();
    println!(
        "{} decode (capacity {CAPACITY}): {} dispatches per token, {} kernels; per layer {:?}; \
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

#[test]
fn smollm2_135m_decode_dispatches() {
    let (plan, layers) = decode_plan(&smollm2_135m());
    assert!(plan.dispatches.len() <= 10 * layers + 10);
}

#[test]
fn gemma3_270m_decode_dispatches() {
    let (plan, layers) = decode_plan(&gemma3_270m());
    assert!(plan.dispatches.len() <= 12 * layers + 10);
}
