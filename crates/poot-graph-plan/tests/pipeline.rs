//! Layer-pipeline stage graphs plan for a rank of a group: every broadcast (the hand-over after
//! each stage's layers, the last stage's outputs) becomes a collective step between the
//! dispatches, with buffers that live across it, and the outputs a step reads back are the
//! broadcasts' results on every stage. A broadcast over a group of one is a copy; a stage's graph
//! is refused for a device alone and for a group of another size. The Llama-3.1-8B reference
//! plans at real dimensions (no bytes) as pipelines of 2 and 4 stages, each holding its layers'
//! weights and KV cache.

#![allow(clippy::unwrap_used)]

mod common;

use common::groups::{fixture, touches};
use common::reference_models::*;
use poot_graph_ir::{Builder, DType, Outputs, TensorType, TraceLimits};
use poot_graph_plan::{BufferId, CollectiveOp, Plan, PlanError, Target, compile};
use poot_models::pipeline::broadcast_outputs;
use poot_models::{KvLayout, Stage, StepShape, StepSpec};

/// Each collective is a broadcast of `ranks`, with the roots `roots` in order; each reads a
/// buffer (of at least its words) into another that no dispatch overwrites before a later
/// dispatch reads it. Returns the collectives' destinations.
fn check_broadcasts(plan: &Plan, ranks: usize, roots: &[usize]) -> Vec<BufferId> {
    let got: Vec<CollectiveOp> = plan.collectives.iter().map(|c| c.op).collect();
    let want: Vec<CollectiveOp> = roots
        .iter()
        .map(|&root| CollectiveOp::Broadcast { root, ranks })
        .collect();
    assert_eq!(got, want);
    let mut before = 0;
    for c in &plan.collectives {
        assert_ne!(c.src, c.dst, "{}", c.label);
        assert!(c.before >= before && c.before <= plan.dispatches.len());
        before = c.before;
        if let Some(read) =
            (c.before..plan.dispatches.len()).find(|&d| touches(plan, d, c.dst, false))
        {
            let clobbered = (c.before..read).find(|&d| touches(plan, d, c.dst, true));
            assert!(
                clobbered.is_none(),
                "{}: the broadcast value is overwritten before it is read",
                c.label
            );
        }
        for b in [c.src, c.dst] {
            assert!(plan.buffers[b.0 as usize].size_bytes >= 4 * c.n_elems);
        }
    }
    plan.collectives.iter().map(|c| c.dst).collect()
}

#[test]
fn a_broadcast_is_a_collective_in_a_group_and_a_copy_alone() {
    let graph = |ranks: usize| {
        let b = Builder::new(TraceLimits::standard(16));
        let x = b
            .slot_named("x", TensorType::new(DType::I32, vec![3, 2]))
            .unwrap();
        let y = b.add(x, x).unwrap();
        let z = b.broadcast_from(y, ranks - 1, ranks).unwrap();
        b.finish(Outputs::new(z)).unwrap()
    };
    for target in [Target::ptx_preset(), Target::lavapipe_preset()] {
        let plan = compile(&graph(2), &target.clone().in_group(2)).unwrap();
        let dsts = check_broadcasts(&plan, 2, &[1]);
        assert_eq!(plan.collectives[0].n_elems, 6);
        // The step reads its output where the broadcast wrote it, after the kernel computing
        // the operand.
        assert_eq!(plan.outputs[0].buffer, dsts[0]);
        assert_eq!(plan.collectives[0].before, plan.dispatches.len());
        // A group of one: a copy, no collective.
        let alone = compile(&graph(1), &target).unwrap();
        assert!(alone.collectives.is_empty());
        assert!(alone.kernels.iter().any(|k| k.name.starts_with("copy")));
        // Another group size, or a device alone.
        for (t, group) in [(target.clone(), 1), (target.clone().in_group(3), 3)] {
            let e = compile(&graph(2), &t).unwrap_err();
            assert!(e.to_string().contains("is a broadcast over 2 ranks"), "{e}");
            match e {
                PlanError::GroupRanks {
                    what,
                    ranks,
                    group_ranks,
                    ..
                } => assert_eq!((what, ranks, group_ranks), ("a broadcast", 2, group)),
                e => panic!("unexpected: {e}"),
            }
        }
    }
}

#[test]
fn each_stages_graph_plans_with_its_hand_overs_between_its_dispatches() {
    for name in ["llama", "gemma3"] {
        let model = fixture(name);
        let layers = model.config().n_layers;
        for stages in [2, 3] {
            if stages > layers {
                continue;
            }
            for shape in [
                StepShape::new(1, 1, 64),
                StepShape::new(1, 16, 64),
                StepShape::new(4, 1, 64).with_kv(KvLayout::Paged {
                    block_tokens: 16,
                    blocks: 17,
                }),
            ] {
                for s in 0..stages {
                    let stage = Stage::new(s, stages).unwrap();
                    let limits = TraceLimits::standard(256);
                    let spec = StepSpec::step(shape.with_stage(stage));
                    let graph = model.trace(&spec, limits).unwrap();
                    let graph = broadcast_outputs(graph, stage, limits).unwrap();
                    for target in [Target::ptx_preset(), Target::lavapipe_preset()] {
                        let plan = compile(&graph, &target.in_group(stages))
                            .unwrap_or_else(|e| panic!("{name} stage {s} {shape:?}: {e}"));
                        // The hand-overs from stages 0..S-1, then the logits from the last.
                        let roots: Vec<usize> = (0..stages).collect();
                        let dsts = check_broadcasts(&plan, stages, &roots);
                        assert_eq!(plan.outputs[0].buffer, dsts[stages - 1]);
                        // Only the stage's layers' caches.
                        let held = stage.layers(layers).unwrap();
                        assert_eq!(plan.states.len(), 2 * held.len());
                        for k in &plan.kernels {
                            k.validate().unwrap();
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn llama_8b_splits_into_two_and_four_stages_of_its_layers() {
    let r = llama_3_1_8b();
    let model = build(&r);
    let capacity = 8192;
    let limits = TraceLimits::standard(MAX_STEP_TOKENS);
    let whole = model
        .trace(&StepSpec::step(StepShape::new(1, 1, capacity)), limits)
        .unwrap();
    let whole = compile(&whole, &Target::ptx_preset()).unwrap().memory();
    // The embedding and the head (128256 x 4096 BF16 each) and the final norm; rotary tables
    // (cos and sin, 131072 positions x 64 f32) on every stage.
    let (embed, head) = (128256 * 4096 * 2, 128256 * 4096 * 2 + 4096 * 2);
    let rope = 2 * 131072 * 64 * 4;
    let per_layer = (whole.weight_bytes - embed - head - rope) / 32;
    for stages in [2usize, 4] {
        let mut layer_sum = 0;
        for s in 0..stages {
            let stage = Stage::new(s, stages).unwrap();
            let spec = StepSpec::step(StepShape::new(1, 1, capacity).with_stage(stage));
            let graph =
                broadcast_outputs(model.trace(&spec, limits).unwrap(), stage, limits).unwrap();
            let plan = compile(&graph, &Target::ptx_preset().in_group(stages))
                .unwrap_or_else(|e| panic!("8B stage {s} of {stages}: {e}"));
            let roots: Vec<usize> = (0..stages).collect();
            check_broadcasts(&plan, stages, &roots);
            let m = plan.memory();
            let layers = 32 / stages as u64;
            layer_sum += layers;
            assert_eq!(m.state_bytes, whole.state_bytes * layers / 32);
            let mut want = rope + layers * per_layer;
            if s == 0 {
                want += embed;
            }
            if s == stages - 1 {
                want += head;
            }
            assert_eq!(m.weight_bytes, want, "stage {s} of {stages}");
        }
        assert_eq!(layer_sum, 32);
    }
}
