//! Llama checkpoints quantized in each Hugging Face packed layout (GPTQ, GPTQ with act-order,
//! AWQ, FP8 per channel, per tensor and in 128x128 blocks, MXFP4), written at test time with random weights
//! by `scripts/ref/models/gen_quantized_checkpoints.py`, which also runs transformers on the
//! weights it dequantizes from the stored tensors with each library's own formula.
//!
//! - The CPU oracle, reading the stored components through `poot-formats`, matches transformers:
//!   every step's logits within 2e-5 of the largest reference logit (both sides compute in f32
//!   on the same weight values and differ only in summation order; measured about 1e-6), and
//!   the same greedy tokens over a 9-token prompt and 8 decode steps.
//! - On wgpu (lavapipe in CI) the planner's kernels, decoding inside the contraction, match the
//!   oracle within 1e-4 per step with the same greedy tokens, and the executor holds exactly the
//!   stored bytes of every component (no decoded copy of any weight).
//!
//! The Python interpreter is $POOT_PYTHON when it imports torch, transformers, numpy and
//! safetensors, else the reference venv ($POOT_CACHE/venv, scripts/pyenv.sh), else `python3`;
//! with none of them the tests report a skip, as they do without a Vulkan adapter.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use common::oracle::{Oracle, argmax, rel_err};
use common::python::generator_python;
use poot_executor::{EntryId, Executor, StepInputs, StepOutputs};
use poot_graph_ir::{DType, Graph, Slot, TraceLimits};
use poot_llm::{
    BackendChoice, HandleWeights, LoadOptions, ModelHandle, entry_label, open_executor,
};
use poot_models::weights::{ConstData, Role, WeightRole};
use poot_models::{Registry, StepShape, StepSpec};
use serde::Deserialize;

const CAPACITY: usize = 32;
/// Oracle vs transformers: largest |difference| over the largest |reference logit|.
const REFERENCE_TOLERANCE: f32 = 2e-5;
/// Device vs oracle: the device sums in another order.
const DEVICE_TOLERANCE: f32 = 1e-4;

/// Each checkpoint the script writes, with the family of layout its projections bind as.
const LAYOUTS: [(&str, &str); 7] = [
    ("gptq", "gptq_int4"),
    ("gptq_act_order", "gptq_int4"),
    ("awq", "awq_int4"),
    ("fp8_channel", "fp8_e4m3"),
    ("fp8_tensor", "fp8_e4m3"),
    ("fp8_block", "fp8_e4m3"),
    ("mxfp4", "fp4_e2m1"),
];

#[derive(Deserialize)]
struct Reference {
    prompt_ids: Vec<i32>,
    greedy_ids: Vec<i32>,
    margins: Vec<f32>,
    logits: Vec<Vec<f32>>,
}

/// The generated checkpoints' directory (written once per test binary), or `None` after a
/// skip line.
fn checkpoints(test: &str) -> Option<&'static Path> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let py = generator_python()?;
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("quantized_checkpoints-{}", std::process::id()));
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts/ref/models/gen_quantized_checkpoints.py");
        let run = Command::new(&py).arg(&script).arg(&out).output().unwrap();
        assert!(
            run.status.success(),
            "{}: {}",
            script.display(),
            String::from_utf8_lossy(&run.stderr)
        );
        eprint!("{}", String::from_utf8_lossy(&run.stdout));
        Ok(out)
    });
    match dir {
        Ok(d) => Some(d.as_path()),
        Err(why) => {
            eprintln!("SKIP {test}: {why}");
            None
        }
    }
}

fn reference(dir: &Path) -> Reference {
    serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap()
}

fn load(dir: &Path) -> Arc<ModelHandle> {
    let handle = ModelHandle::load(dir, &Registry::builtin().unwrap(), &LoadOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    Arc::new(handle)
}

/// Every projection of every layer binds as one component-format constant of `family`.
fn assert_projections_packed(handle: &ModelHandle, family: &str, name: &str) {
    let roles = [
        Role::AttnQ,
        Role::AttnK,
        Role::AttnV,
        Role::AttnO,
        Role::FfnGate,
        Role::FfnUp,
        Role::FfnDown,
    ];
    for layer in 0..handle.config().n_layers {
        for role in roles {
            let e = handle
                .model()
                .weights()
                .get(WeightRole::layer(layer, role))
                .unwrap();
            match e.ty.dtype {
                DType::Components(c) => assert_eq!(c.name(), family, "{name}: {}", e.role),
                other => panic!("{name}: {} binds as {other}", e.role),
            }
        }
    }
    let head = handle
        .model()
        .weights()
        .get(WeightRole::global(Role::Head))
        .unwrap();
    assert_eq!(head.ty.dtype, DType::F32, "{name}: lm_head is dense");
}

fn trace(handle: &ModelHandle, tokens: usize) -> Graph {
    handle
        .model()
        .trace(
            &StepSpec::step(StepShape::new(1, tokens, CAPACITY)),
            TraceLimits::standard(256),
        )
        .unwrap()
}

/// A greedy pick against the reference's: equal, or a flip where the reference's top-two
/// margin is inside what the tolerance allows.
fn assert_same_pick(got: usize, r: &Reference, step: usize, what: &str) {
    let want = r.greedy_ids[step] as usize;
    let scale = r.logits[step].iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(
        got == want || r.margins[step] <= 2.0 * REFERENCE_TOLERANCE * scale,
        "{what}: step {step}: greedy token {got}, transformers {want} (margin {})",
        r.margins[step]
    );
}

#[test]
fn the_oracle_matches_transformers_on_every_packed_layout() {
    let Some(dir) = checkpoints("oracle vs transformers") else {
        return;
    };
    for (name, family) in LAYOUTS {
        let dir = dir.join(name);
        let r = reference(&dir);
        let handle = load(&dir);
        assert_projections_packed(&handle, family, name);
        let (prefill, decode) = (trace(&handle, r.prompt_ids.len()), trace(&handle, 1));
        let mut oracle = Oracle::new(&handle);
        let mut logits = oracle.step(&prefill, &r.prompt_ids, 0);
        let mut worst = 0f32;
        for step in 0..r.logits.len() {
            let err = rel_err(&logits, &r.logits[step]);
            assert!(
                err <= REFERENCE_TOLERANCE,
                "{name}: step {step}: relative error {err} against transformers"
            );
            worst = worst.max(err);
            let pick = argmax(&logits);
            assert_same_pick(pick, &r, step, name);
            if step + 1 < r.logits.len() {
                // Feed the reference's token so a tolerated flip cannot derail later steps.
                let fed = r.greedy_ids[step];
                logits = oracle.step(&decode, &[fed], r.prompt_ids.len() + step);
            }
        }
        println!(
            "{name}: {} steps, largest relative error {worst:e} against transformers",
            r.logits.len()
        );
    }
}

fn device_step(exec: &mut dyn Executor, entry: EntryId, tokens: &[i32], start: usize) -> Vec<f32> {
    let mut inputs = StepInputs::new();
    inputs.set_i32(Slot::Token, tokens);
    let pos: Vec<i32> = (start..start + tokens.len()).map(|p| p as i32).collect();
    inputs.set_i32(Slot::Pos, &pos);
    let mut out = StepOutputs::default();
    exec.step(entry, &inputs, &mut out).unwrap();
    out.f32(0).unwrap()
}

#[test]
fn wgpu_decodes_every_packed_layout_inside_the_contraction() {
    let Some(dir) = checkpoints("packed layouts on wgpu") else {
        return;
    };
    let mut exec = match open_executor(BackendChoice::Wgpu) {
        Ok(o) => o.executor,
        Err(e) => {
            eprintln!("SKIP packed layouts on wgpu: {e}");
            return;
        }
    };
    for (name, family) in LAYOUTS {
        let dir = dir.join(name);
        let r = reference(&dir);
        let handle = load(&dir);
        assert_projections_packed(&handle, family, name);
        // The executor holds each buffer's stored bytes, rounded up to whole words, and nothing
        // else: the components of a packed linear as the checkpoint stores them.
        let weights = handle.model().weights();
        let stored: u64 = weights
            .buffer_names()
            .iter()
            .map(|n| match weights.buffer_data(n, handle.store()).unwrap() {
                ConstData::Bytes(b) => (b.len() as u64).div_ceil(4) * 4,
                ConstData::Gathered(b) => (b.len() as u64).div_ceil(4) * 4,
                ConstData::F32(v) => 4 * v.len() as u64,
                ConstData::Components(_) => panic!("{n}: a buffer name is one buffer"),
            })
            .sum();
        let before = exec.stats().weight_bytes;
        let exe = exec
            .load_weights(Box::new(HandleWeights::new(Arc::clone(&handle))))
            .unwrap();
        assert_eq!(
            exec.stats().weight_bytes - before,
            stored,
            "{name}: uploaded bytes"
        );

        let spec = |t: usize| StepSpec::step(StepShape::new(1, t, CAPACITY));
        let (prefill_graph, decode_graph) = (trace(&handle, r.prompt_ids.len()), trace(&handle, 1));
        let prefill = exec
            .add_entry(
                exe,
                &prefill_graph,
                &entry_label(&spec(r.prompt_ids.len()), None),
            )
            .unwrap();
        let step = exec
            .add_entry(exe, &decode_graph, &entry_label(&spec(1), None))
            .unwrap();
        exec.reset_state(step).unwrap();
        let mut oracle = Oracle::new(&handle);
        let mut got = device_step(exec.as_mut(), prefill, &r.prompt_ids, 0);
        let mut want = oracle.step(&prefill_graph, &r.prompt_ids, 0);
        let mut worst = 0f32;
        for i in 0..r.logits.len() {
            let err = rel_err(&got, &want);
            assert!(
                err <= DEVICE_TOLERANCE,
                "{name}: step {i}: relative error {err} against the oracle"
            );
            worst = worst.max(err);
            let (tg, tw) = (argmax(&got), argmax(&want));
            assert_eq!(tg, tw, "{name}: step {i}: greedy token against the oracle");
            assert_same_pick(tg, &r, i, name);
            if i + 1 == r.logits.len() {
                break;
            }
            let pos = r.prompt_ids.len() + i;
            let fed = r.greedy_ids[i];
            got = device_step(exec.as_mut(), step, &[fed], pos);
            want = oracle.step(&decode_graph, &[fed], pos);
        }
        println!(
            "{name}: {} steps on wgpu, largest relative error {worst:e} against the oracle",
            r.logits.len()
        );
        exec.remove_entry(prefill);
        exec.remove_entry(step);
        exec.unload(exe);
    }
}
