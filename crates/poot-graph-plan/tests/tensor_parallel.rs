//! Tensor-parallel rank graphs plan for a rank of a group: every all-reduce becomes a collective
//! step between the dispatches (not a kernel), with buffers that live across it; a rank's graph
//! is refused for a device alone and for a group of another size. The Llama-3.1-8B reference
//! plans at real dimensions (no bytes) for PTX groups of 2, 4 and 8, each rank holding its
//! share of the weights and of the KV cache.

#![allow(clippy::unwrap_used)]

mod common;

use common::groups::{fixture, touches};
use common::reference_models::*;
use poot_graph_ir::TraceLimits;
use poot_graph_plan::{CollectiveOp, Plan, PlanError, Target, compile};
use poot_models::{KvLayout, Shard, StepShape, StepSpec};

/// Each collective reads a buffer a dispatch before it wrote, into another buffer that a later
/// dispatch reads before any dispatch overwrites it.
fn check_collectives(plan: &Plan, ranks: usize, expected: usize) {
    assert_eq!(plan.collectives.len(), expected);
    let mut before = 0;
    for (i, c) in plan.collectives.iter().enumerate() {
        assert_eq!(c.op, CollectiveOp::AllReduceSum { ranks });
        assert_ne!(c.src, c.dst, "{}", c.label);
        assert!(c.before >= before && c.before <= plan.dispatches.len());
        before = c.before;
        let written = (0..c.before).rev().find(|&d| touches(plan, d, c.src, true));
        // A library contraction ordered before the collective may write its input instead.
        let contracted = plan.contractions.iter().any(|k| {
            k.out == c.src
                && (k.before < c.before || (k.before == c.before && k.collectives_before <= i))
        });
        assert!(
            written.is_some() || contracted,
            "{}: nothing writes the collective's input",
            c.label
        );
        let read = (c.before..plan.dispatches.len()).find(|&d| touches(plan, d, c.dst, false));
        let read = read.unwrap_or_else(|| panic!("{}: nothing reads the sum", c.label));
        let clobbered = (c.before..read).find(|&d| touches(plan, d, c.dst, true));
        assert!(
            clobbered.is_none(),
            "{}: the sum is overwritten before it is read",
            c.label
        );
        let n = plan.buffers[c.dst.0 as usize].size_bytes;
        assert!(n >= 4 * c.n_elems && plan.buffers[c.src.0 as usize].size_bytes >= 4 * c.n_elems);
    }
}

#[test]
fn a_ranks_graph_plans_with_collectives_between_its_dispatches() {
    for name in ["llama", "qwen2", "gemma3"] {
        let model = fixture(name);
        let layers = model.config().n_layers;
        for shape in [
            StepShape::new(1, 1, 64),
            StepShape::new(1, 16, 64),
            StepShape::new(4, 1, 64).with_kv(KvLayout::Paged {
                block_tokens: 16,
                blocks: 17,
            }),
        ] {
            for rank in 0..2 {
                let spec = StepSpec::step(shape.with_shard(Shard::new(rank, 2).unwrap()));
                let graph = model.trace(&spec, TraceLimits::standard(256)).unwrap();
                for target in [Target::ptx_preset(), Target::lavapipe_preset()] {
                    let plan = compile(&graph, &target.in_group(2))
                        .unwrap_or_else(|e| panic!("{name} {shape:?}: {e}"));
                    check_collectives(&plan, 2, 2 * layers);
                    for k in &plan.kernels {
                        k.validate().unwrap();
                    }
                }
            }
        }
        // The whole model plans with no collective, alone or in a group's target.
        let whole = model
            .trace(
                &StepSpec::step(StepShape::new(1, 1, 64)),
                TraceLimits::standard(256),
            )
            .unwrap();
        assert!(
            compile(&whole, &Target::ptx_preset())
                .unwrap()
                .collectives
                .is_empty()
        );
    }
}

#[test]
fn a_ranks_graph_is_refused_outside_its_group() {
    let model = fixture("llama");
    let spec = StepSpec::step(StepShape::new(1, 1, 64).with_shard(Shard::new(0, 2).unwrap()));
    let graph = model.trace(&spec, TraceLimits::standard(256)).unwrap();
    for (target, group) in [
        (Target::ptx_preset(), 1),
        (Target::ptx_preset().in_group(4), 4),
        (Target::lavapipe_preset(), 1),
    ] {
        match compile(&graph, &target).unwrap_err() {
            PlanError::GroupRanks {
                ranks, group_ranks, ..
            } => assert_eq!((ranks, group_ranks), (2, group)),
            e => panic!("unexpected: {e}"),
        }
    }
}

#[test]
fn llama_8b_splits_over_two_four_and_eight_h200s() {
    let r = llama_3_1_8b();
    let model = build(&r);
    let capacity = 8192;
    let whole = model
        .trace(
            &StepSpec::step(StepShape::new(1, 1, capacity)),
            TraceLimits::standard(MAX_STEP_TOKENS),
        )
        .unwrap();
    let whole = compile(&whole, &Target::ptx_preset()).unwrap().memory();
    // Embedding and head (128256 x 4096 BF16 each), the norms and the rotary tables (cos and
    // sin, 131072 positions x 64 f32) stay whole on every rank.
    let replicated = 2 * 128256 * 4096 * 2 + (2 * 32 + 1) * 4096 * 2 + 2 * 131072 * 64 * 4;
    for ranks in [2usize, 4, 8] {
        for (what, tokens) in [("decode", 1), ("prefill", PREFILL_TOKENS)] {
            let mut weights = Vec::new();
            for rank in 0..ranks {
                let shape = StepShape::new(1, tokens, capacity)
                    .with_shard(Shard::new(rank, ranks).unwrap());
                let graph = model
                    .trace(
                        &StepSpec::step(shape),
                        TraceLimits::standard(MAX_STEP_TOKENS),
                    )
                    .unwrap();
                let plan = compile(&graph, &Target::ptx_preset().in_group(ranks))
                    .unwrap_or_else(|e| panic!("8B {what}, rank {rank} of {ranks}: {e}"));
                check_collectives(&plan, ranks, 64);
                let m = plan.memory();
                assert_eq!(m.state_bytes, whole.state_bytes / ranks as u64);
                weights.push(m.weight_bytes);
            }
            assert!(weights.iter().all(|&w| w == weights[0]));
            let split = whole.weight_bytes - replicated;
            assert_eq!(
                weights[0],
                replicated + split / ranks as u64,
                "{ranks} ranks"
            );
        }
    }
}

#[test]
fn llama_8b_q4_k_splits_its_packed_rows_by_whole_blocks() {
    let model = build(&llama_3_1_8b_q4_k());
    for ranks in [2usize, 8] {
        let shape = StepShape::new(1, 1, 4096).with_shard(Shard::new(ranks - 1, ranks).unwrap());
        let graph = model
            .trace(
                &StepSpec::step(shape),
                TraceLimits::standard(MAX_STEP_TOKENS),
            )
            .unwrap();
        let plan = compile(&graph, &Target::ptx_preset().in_group(ranks)).unwrap();
        check_collectives(&plan, ranks, 64);
    }
    // Sixteen ranks would split the 8 key/value heads: refused before any graph is built.
    let shape = StepShape::new(1, 1, 4096).with_shard(Shard::new(0, 16).unwrap());
    let e = model
        .trace(
            &StepSpec::step(shape),
            TraceLimits::standard(MAX_STEP_TOKENS),
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "8 key/value heads cannot be shared by 16 ranks (each needs at least one)"
    );
}
