//! Running a model's traced steps on the CPU oracle, as the tests' stand-in for a driver:
//! contiguous KV states carried between steps, slots bound per step, weights bound as stored.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_graph_ir::{Graph, Slot, TensorType, TraceLimits};
use poot_load::{Checkpoint, LoadOptions};
use poot_models::weights::ConstData;
use poot_models::{LoraTables, Model, Registry, StepShape, StepSpec};

pub fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The packaged real checkpoint `file`, or `None` (with a SKIP line) when it was not fetched.
pub fn real_checkpoint(file: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot")
        });
    let path = cache.join("models").join(file);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIP: {} not found (run scripts/fetch-models.sh)",
            path.display()
        );
        None
    }
}

pub struct Loaded {
    pub checkpoint: Checkpoint,
    pub model: Box<dyn Model>,
}

pub fn load(path: &Path) -> Loaded {
    let checkpoint = poot_load::load(path, &LoadOptions::default()).expect("checkpoint loads");
    let registry = Registry::builtin().expect("registry");
    let entry = registry
        .resolve(checkpoint.config())
        .expect("family resolves");
    let parts = (entry.build)(checkpoint.config(), &checkpoint).expect("family builds");
    Loaded {
        checkpoint,
        model: parts.model,
    }
}

/// Binds every constant of `graph` from the model's weight map and the store, as stored.
pub fn bind_weights<'s>(graph: &Graph, loaded: &'s Loaded) -> Inputs<'s> {
    bind_from(graph, loaded.model.weights(), loaded)
}

/// Binds every constant of `graph` from `weights` (a rank's or a stage's share of the model, so
/// a graph reading a weight its share lacks fails here) and the store, as stored.
pub fn bind_from<'s>(
    graph: &Graph,
    weights: &'s poot_models::weights::WeightMap,
    loaded: &'s Loaded,
) -> Inputs<'s> {
    bind_with_lora(graph, weights, loaded, None)
}

/// [`bind_from`], the adapter tables' constants (`lora.*`) bound from `lora`.
pub fn bind_with_lora<'s>(
    graph: &Graph,
    weights: &'s poot_models::weights::WeightMap,
    loaded: &'s Loaded,
    lora: Option<&'s LoraTables>,
) -> Inputs<'s> {
    let mut inputs = Inputs::new();
    for (_, name, ty) in graph.consts() {
        if let Some(table) = lora.and_then(|l| l.table(name)) {
            let t = HostTensor::f32(ty.shape.clone(), table.data.clone()).expect("lora table");
            inputs.set_const(name, t);
            continue;
        }
        let data = weights
            .const_data(name, loaded.checkpoint.store())
            .unwrap_or_else(|e| panic!("{name} is not in the weights: {e}"));
        let t = match data {
            ConstData::Bytes(b) => {
                HostTensor::from_le_bytes(ty.clone(), b).expect("stored bytes match type")
            }
            ConstData::Gathered(b) => HostTensor::from_le_bytes(ty.clone(), &b)
                .expect("stored bytes match type")
                .into_owned(),
            ConstData::F32(v) => HostTensor::f32(ty.shape.clone(), v).expect("table"),
            ConstData::Components(parts) => {
                let poot_graph_ir::DType::Components(format) = ty.dtype else {
                    panic!("components bound to a {} constant", ty.dtype)
                };
                let parts = parts
                    .into_iter()
                    .map(|(role, b)| (role.to_string(), b))
                    .collect();
                HostTensor::components(format, ty.shape.clone(), parts)
                    .expect("components match the format")
            }
        };
        inputs.set_const(name, t);
    }
    inputs
}

/// One contiguous-KV sequence (or several rows of them) decoded on the oracle.
pub struct OracleSession<'m> {
    pub loaded: &'m Loaded,
    pub capacity: usize,
    pub rows: usize,
    states: Vec<(String, HostTensor<'static>)>,
    /// The adapter tables and each row's adapter index, for a step traced with LoRA.
    pub lora: Option<(&'m LoraTables, Vec<i32>)>,
}

impl<'m> OracleSession<'m> {
    pub fn new(loaded: &'m Loaded, rows: usize, capacity: usize) -> OracleSession<'m> {
        OracleSession {
            loaded,
            capacity,
            rows,
            states: Vec::new(),
            lora: None,
        }
    }

    /// Runs one step of `tokens` per row starting at each row's `start` position; returns the
    /// primary output as f32 with its dims.
    pub fn step(
        &mut self,
        tokens: &[Vec<i32>],
        starts: &[usize],
        shape: StepShape,
    ) -> (Vec<f32>, Vec<usize>) {
        let t = tokens[0].len();
        let spec = StepSpec::step(shape);
        let graph = self
            .loaded
            .model
            .trace(&spec, TraceLimits::standard(4096))
            .expect("trace");
        let tables = self.lora.as_ref().map(|(t, _)| *t);
        let mut inputs = bind_with_lora(&graph, self.loaded.model.weights(), self.loaded, tables);
        if let Some((_, index)) = &self.lora {
            let slot = Slot::Named(poot_models::lora::LORA_INDEX_SLOT.into());
            inputs.set_slot(slot, HostTensor::i32([self.rows], index.clone()).unwrap());
        }
        let flat: Vec<i32> = tokens.iter().flatten().copied().collect();
        let pos: Vec<i32> = starts
            .iter()
            .flat_map(|&s| (s..s + t).map(|p| p as i32))
            .collect();
        inputs.set_slot(Slot::Token, HostTensor::i32([self.rows, t], flat).unwrap());
        inputs.set_slot(Slot::Pos, HostTensor::i32([self.rows, t], pos).unwrap());
        let prev = std::mem::take(&mut self.states);
        for (_, name, ty) in graph.states() {
            let value = match prev.iter().find(|(n, _)| n == name) {
                Some((_, v)) => v.view(),
                None => zeros(ty),
            };
            inputs.set_state(name, value);
        }
        let out = eval(&graph, &inputs, EvalOptions::default()).expect("eval");
        self.states = out.state.clone();
        let logits = out.outputs[0].clone();
        (logits.to_f32_vec().unwrap(), logits.dims().to_vec())
    }
}

pub fn zeros(ty: &TensorType) -> HostTensor<'static> {
    let n = ty.shape.n_elems().unwrap();
    HostTensor::f32(ty.shape.clone(), vec![0.0f32; n]).unwrap()
}

pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// Largest |a - b| relative to the reference's largest magnitude; fails on any non-finite value
/// where the reference is finite.
pub fn max_rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "length");
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    let mut worst = 0f32;
    for (g, w) in got.iter().zip(want) {
        assert!(
            g.is_finite() || !w.is_finite(),
            "non-finite {g} where reference is {w}"
        );
        worst = worst.max((g - w).abs() / scale);
    }
    worst
}

/// Runs the encode program over padded rows; returns the primary output and its dims.
pub fn encode(
    loaded: &Loaded,
    ids: &[Vec<i32>],
    mask: &[Vec<i32>],
    types: &[Vec<i32>],
) -> (Vec<f32>, Vec<usize>) {
    let (rows, t) = (ids.len(), ids[0].len());
    let graph = loaded
        .model
        .trace(&StepSpec::encode(rows, t), TraceLimits::standard(4096))
        .expect("trace");
    let mut inputs = bind_weights(&graph, loaded);
    let flat = |v: &[Vec<i32>]| v.iter().flatten().copied().collect::<Vec<i32>>();
    let pos: Vec<i32> = (0..rows).flat_map(|_| 0..t as i32).collect();
    inputs.set_slot(Slot::Token, HostTensor::i32([rows, t], flat(ids)).unwrap());
    inputs.set_slot(Slot::Pos, HostTensor::i32([rows, t], pos).unwrap());
    for (_, slot, _) in graph.slots() {
        match slot.name() {
            "token_mask" => inputs.set_slot(
                slot.clone(),
                HostTensor::i32([rows, t], flat(mask)).unwrap(),
            ),
            "token_type" => inputs.set_slot(
                slot.clone(),
                HostTensor::i32([rows, t], flat(types)).unwrap(),
            ),
            _ => None,
        };
    }
    let out = eval(&graph, &inputs, EvalOptions::default()).expect("eval");
    let o = &out.outputs[0];
    (o.to_f32_vec().unwrap(), o.dims().to_vec())
}

/// Mean over the real tokens of one row of `[rows, t, d]` hidden states, L2-normalized.
pub fn mean_pool_normalized(
    hidden: &[f32],
    t: usize,
    d: usize,
    row: usize,
    mask: &[i32],
) -> Vec<f32> {
    let mut acc = vec![0f64; d];
    let mut n = 0f64;
    for (p, &m) in mask.iter().enumerate().take(t) {
        if m != 0 {
            n += 1.0;
            for (j, a) in acc.iter_mut().enumerate() {
                *a += hidden[(row * t + p) * d + j] as f64;
            }
        }
    }
    let mean: Vec<f64> = acc.iter().map(|a| a / n.max(1.0)).collect();
    let norm = mean.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
    mean.iter().map(|x| (x / norm) as f32).collect()
}

/// The state a group member carries from step to step, by name.
pub type Carried = Vec<(String, HostTensor<'static>)>;

/// Inputs of one step of `tokens` from position `start` through `graph` (a group member's):
/// constants from `weights`, the token and position slots, and the state `prev` carried from
/// the member's last step (zeros before its first).
pub fn member_inputs<'s>(
    graph: &Graph,
    weights: &'s poot_models::weights::WeightMap,
    loaded: &'s Loaded,
    tokens: &[i32],
    start: usize,
    prev: Carried,
) -> Inputs<'s> {
    let t = tokens.len();
    let mut inputs = bind_from(graph, weights, loaded);
    let pos: Vec<i32> = (start..start + t).map(|p| p as i32).collect();
    inputs.set_slot(
        Slot::Token,
        HostTensor::i32([1, t], tokens.to_vec()).unwrap(),
    );
    inputs.set_slot(Slot::Pos, HostTensor::i32([1, t], pos).unwrap());
    for (_, name, ty) in graph.states() {
        let value = match prev.iter().find(|(n, _)| n == name) {
            Some((_, v)) => v.clone(),
            None => zeros(ty),
        };
        inputs.set_state(name, value);
    }
    inputs
}

/// Member 0's logits (first output) of a group's step, after checking every member's are the
/// same bits; each member's new state is kept in `states`. `member` names them in failures.
pub fn agreed_logits(
    outs: Vec<poot_eval::Evaluation<'_>>,
    states: &mut [Carried],
    member: &str,
) -> Vec<f32> {
    let logits: Vec<Vec<f32>> = outs
        .iter()
        .map(|o| o.outputs[0].to_f32_vec().unwrap())
        .collect();
    for (r, l) in logits.iter().enumerate().skip(1) {
        assert!(
            l.len() == logits[0].len()
                && l.iter()
                    .zip(&logits[0])
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{member} {r}'s logits differ from {member} 0's"
        );
    }
    for (r, o) in outs.into_iter().enumerate() {
        states[r] = o.state;
    }
    logits.into_iter().next().unwrap()
}
