//! The layer pipeline on the CPU oracle: a model traced as the S stage graphs of a pipeline,
//! each with the last stage's outputs broadcast to every stage, evaluated in lockstep
//! (`poot_eval::eval_group`, which copies the root's value at each broadcast) against the same
//! model traced whole and evaluated alone.
//!
//! Tolerance: none. A stage runs exactly the whole model's equations for its layers and a
//! broadcast copies, so every stage's logits equal the whole model's bit for bit at every step,
//! and each stage's KV cache equals the whole model's cache of its layers.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::*;
use poot_eval::{EvalOptions, eval, eval_group};
use poot_graph_ir::{Graph, OpKind, TraceLimits};
use poot_models::pipeline::{broadcast_outputs, stage_layers};
use poot_models::weights::{Role, WeightMap};
use poot_models::{Program, Shard, Stage, StepShape, StepSpec, TraceError};

/// One contiguous-KV sequence decoded by a pipeline of `stages` (1: the whole model, evaluated
/// alone with `eval`).
struct PipelineSession<'m> {
    loaded: &'m Loaded,
    stages: usize,
    capacity: usize,
    weights: Vec<WeightMap>,
    states: Vec<Carried>,
}

impl<'m> PipelineSession<'m> {
    fn new(loaded: &'m Loaded, stages: usize, capacity: usize) -> Result<Self, TraceError> {
        let mut weights = Vec::new();
        for s in 0..stages {
            let stage = Stage::new(s, stages)?;
            weights.push(
                loaded
                    .model
                    .placed_weights(Shard::WHOLE, stage)?
                    .into_owned(),
            );
        }
        Ok(PipelineSession {
            loaded,
            stages,
            capacity,
            weights,
            states: vec![Vec::new(); stages],
        })
    }

    fn graphs(&self, t: usize) -> Vec<Graph> {
        (0..self.stages)
            .map(|s| {
                let stage = Stage::new(s, self.stages).unwrap();
                let shape = StepShape::new(1, t, self.capacity).with_stage(stage);
                let limits = TraceLimits::standard(4096);
                let g = self
                    .loaded
                    .model
                    .trace(&StepSpec::step(shape), limits)
                    .unwrap();
                broadcast_outputs(g, stage, limits).unwrap()
            })
            .collect()
    }

    /// One step of `tokens` from `start`; returns stage 0's logits, after checking every
    /// stage's are the same bits.
    fn step(&mut self, tokens: &[i32], start: usize) -> Vec<f32> {
        let t = tokens.len();
        let graphs = self.graphs(t);
        let mut all_inputs = Vec::new();
        for (s, g) in graphs.iter().enumerate() {
            let prev = std::mem::take(&mut self.states[s]);
            all_inputs.push(member_inputs(
                g,
                &self.weights[s],
                self.loaded,
                tokens,
                start,
                prev,
            ));
        }
        let outs = if self.stages == 1 {
            vec![eval(&graphs[0], &all_inputs[0], EvalOptions::default()).unwrap()]
        } else {
            let refs: Vec<&Graph> = graphs.iter().collect();
            eval_group(&refs, &all_inputs, EvalOptions::default()).unwrap()
        };
        agreed_logits(outs, &mut self.states, "stage")
    }

    /// Every stage's KV states by name, as f32.
    fn states(&self) -> Vec<(String, Vec<f32>)> {
        let mut all: Vec<(String, Vec<f32>)> = self
            .states
            .iter()
            .flatten()
            .map(|(n, v)| (n.clone(), v.to_f32_vec().unwrap()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Prefills `prompt` and decodes `steps` greedy tokens both whole and as a pipeline of
/// `stages`; checks every step's logits and the caches bit for bit. Returns the tokens.
fn pipeline_matches_whole(
    loaded: &Loaded,
    stages: usize,
    prompt: &[i32],
    steps: usize,
) -> Vec<i32> {
    let cap = prompt.len() + steps + 1;
    let mut whole = PipelineSession::new(loaded, 1, cap).unwrap();
    let mut piped = PipelineSession::new(loaded, stages, cap).unwrap();
    let mut want = whole.step(prompt, 0);
    let mut got = piped.step(prompt, 0);
    let mut tokens = Vec::new();
    for i in 0..steps {
        assert!(
            same_bits(&got, &want),
            "{stages} stages, step {i}: logits differ (largest relative difference {})",
            max_rel_err(&got, &want)
        );
        let states = piped.states();
        assert_eq!(
            states.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            whole.states().iter().map(|(n, _)| n).collect::<Vec<_>>(),
            "the stages together carry the whole model's states"
        );
        for ((name, a), (_, b)) in states.iter().zip(&whole.states()) {
            assert!(same_bits(a, b), "{stages} stages, step {i}: state {name}");
        }
        let a = argmax(&got) as i32;
        tokens.push(a);
        let pos = prompt.len() + i;
        want = whole.step(&[a], pos);
        got = piped.step(&[a], pos);
    }
    eprintln!("{stages} stages: tokens {tokens:?}");
    tokens
}

fn fixture(name: &str) -> Loaded {
    load(&fixture_dir("random").join(name))
}

const PROMPT: &[i32] = &[1, 17, 42, 99, 7, 3];

#[test]
fn gemma3_over_two_three_four_and_five_stages_matches_the_whole_model() {
    // Six layers with sliding windows, sandwich norms, a tied embedding (on the first and the
    // last stage); five stages split them 2, 1, 1, 1, 1.
    let loaded = fixture("gemma3");
    assert_eq!(loaded.model.config().n_layers, 6);
    let want = pipeline_matches_whole(&loaded, 1, PROMPT, 5);
    for stages in [2, 3, 4, 5] {
        assert_eq!(pipeline_matches_whole(&loaded, stages, PROMPT, 5), want);
    }
}

#[test]
fn llama_qwen2_and_the_serving_fixture_over_two_stages() {
    for name in ["llama", "qwen2"] {
        let loaded = fixture(name);
        pipeline_matches_whole(&loaded, 2, PROMPT, 5);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    pipeline_matches_whole(&load(&dir), 2, &[5, 60, 300, 11, 2], 5);
}

/// Each stage holds its layers' routers and expert stacks (the Hugging Face per-expert tensors
/// stacked at load).
#[test]
fn the_moe_fixtures_over_two_stages() {
    for name in ["mixtral", "qwen3moe"] {
        let loaded = fixture(name);
        pipeline_matches_whole(&loaded, 2, PROMPT, 5);
    }
}

#[test]
fn smollm2_over_two_and_three_stages_matches_the_whole_model() {
    let Some(path) = real_checkpoint("smollm2-135m-instruct-q4_1.gguf") else {
        return;
    };
    let loaded = load(&path);
    let prompt: Vec<i32> = vec![1, 504, 3458, 282, 4649, 314];
    let want = pipeline_matches_whole(&loaded, 1, &prompt, 3);
    for stages in [2, 3] {
        assert_eq!(pipeline_matches_whole(&loaded, stages, &prompt, 3), want);
    }
}

#[test]
fn each_stage_holds_its_layers_and_traces_the_same_hand_overs() {
    let loaded = fixture("gemma3");
    let model = &loaded.model;
    let whole = model.weights();
    let limits = TraceLimits::standard(64);
    let stages = 3;
    let mut layer_entries = 0;
    for s in 0..stages {
        let stage = Stage::new(s, stages).unwrap();
        let held = stage.layers(6).unwrap();
        assert_eq!(held, stage_layers(s, stages, 6));
        assert_eq!(held, 2 * s..2 * s + 2);
        let map = model.placed_weights(Shard::WHOLE, stage).unwrap();
        for e in map.iter() {
            match e.role.layer {
                Some(l) => {
                    assert!(held.contains(&l), "stage {s} holds {:?}", e.role);
                    layer_entries += 1;
                }
                None => match e.role.role {
                    Role::TokenEmbed => assert_eq!(s, 0),
                    Role::FinalNorm | Role::Head => assert_eq!(s, stages - 1),
                    Role::RopeCos(_) | Role::RopeSin(_) => {}
                    r => panic!("stage {s} holds {r:?}"),
                },
            }
        }
        let shape = StepShape::new(1, 2, 16).with_stage(stage);
        let g = model.trace(&StepSpec::step(shape), limits).unwrap();
        // Its layers' caches only.
        let states: Vec<String> = g.states().map(|(_, n, _)| n.to_string()).collect();
        let want: Vec<String> = held
            .clone()
            .flat_map(|l| [format!("kv.l{l}.k"), format!("kv.l{l}.v")])
            .collect();
        let mut sorted = states.clone();
        sorted.sort();
        let mut want_sorted = want;
        want_sorted.sort();
        assert_eq!(sorted, want_sorted);
        // The same hand-overs, in the same order, on every stage.
        let roots: Vec<(usize, usize)> = g
            .eqns()
            .iter()
            .filter_map(|e| match e.op {
                OpKind::BroadcastFrom { root, ranks } => Some((root, ranks)),
                _ => None,
            })
            .collect();
        assert_eq!(roots, vec![(0, 3), (1, 3)], "stage {s}");
        let outs = broadcast_outputs(g, stage, limits).unwrap();
        let last: Vec<(usize, usize)> = outs
            .eqns()
            .iter()
            .filter_map(|e| match e.op {
                OpKind::BroadcastFrom { root, ranks } => Some((root, ranks)),
                _ => None,
            })
            .collect();
        assert_eq!(last, vec![(0, 3), (1, 3), (2, 3)], "stage {s}");
    }
    // Every layer's weights are on exactly one stage.
    assert_eq!(
        layer_entries,
        whole.iter().filter(|e| e.role.layer.is_some()).count()
    );
    // A pipeline of one is the whole model's graph.
    let shape = StepShape::new(1, 3, 16);
    let plain = model.trace(&StepSpec::step(shape), limits).unwrap();
    let one = model
        .trace(&StepSpec::step(shape.with_stage(Stage::WHOLE)), limits)
        .unwrap();
    assert_eq!(plain.to_string(), one.to_string());
    assert_eq!(
        broadcast_outputs(one, Stage::WHOLE, limits)
            .unwrap()
            .to_string(),
        plain.to_string()
    );
}

#[test]
fn bad_pipelines_are_refused() {
    let loaded = fixture("llama"); // 2 layers
    let limits = TraceLimits::standard(64);
    let trace = |shape: StepShape| {
        loaded
            .model
            .trace(&StepSpec::step(shape), limits)
            .unwrap_err()
    };
    let shape = StepShape::new(1, 1, 16);
    match trace(shape.with_stage(Stage::new(0, 3).unwrap())) {
        TraceError::TooManyStages { stages, layers } => assert_eq!((stages, layers), (3, 2)),
        e => panic!("unexpected: {e}"),
    }
    assert_eq!(
        PipelineSession::new(&loaded, 3, 16)
            .err()
            .unwrap()
            .to_string(),
        "a pipeline of 3 stages over 2 layers (each stage needs at least one)"
    );
    assert!(matches!(
        Stage::new(2, 2),
        Err(TraceError::StageIndex {
            index: 2,
            stages: 2
        })
    ));
    assert!(matches!(
        Stage::new(0, 0),
        Err(TraceError::StageIndex {
            index: 0,
            stages: 0
        })
    ));
    // A stage built by hand outside its pipeline is refused the same way.
    match trace(shape.with_stage(Stage {
        index: 2,
        stages: 2,
    })) {
        TraceError::StageIndex { index, stages } => assert_eq!((index, stages), (2, 2)),
        e => panic!("unexpected: {e}"),
    }
    match trace(
        shape
            .with_stage(Stage::new(0, 2).unwrap())
            .with_shard(Shard::new(1, 2).unwrap()),
    ) {
        TraceError::ShardedStage {
            rank,
            ranks,
            stage,
            stages,
        } => assert_eq!((rank, ranks, stage, stages), (1, 2, 0, 2)),
        e => panic!("unexpected: {e}"),
    }
    // An encoder pass runs whole.
    let bert = fixture("bert");
    let mut spec = StepSpec::encode(1, 4);
    spec.shape = spec.shape.with_stage(Stage::new(0, 2).unwrap());
    match bert.model.trace(&spec, limits).unwrap_err() {
        TraceError::StagedProgram { program } => assert_eq!(program, Program::Encode),
        e => panic!("unexpected: {e}"),
    }
}
