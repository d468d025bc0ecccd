//! The layer pipeline's side of a model: which layers and weights each stage holds, the
//! hand-over of the hidden state from stage to stage, and the last stage's outputs handed to
//! every stage.
//!
//! A pipeline of `S` stages runs one graph per stage in lockstep, like a tensor-parallel group,
//! joined only by collectives (no host copies). Stage `s` holds the consecutive layers
//! [`stage_layers`] gives it, with their KV cache and weights; the first stage also the
//! embeddings, the last the final norm and the head (a tied embedding on both), every stage the
//! rotary tables ([`held_by_stage`]).
//!
//! Every stage traces the same broadcasts in the same order, so none waits in a collective
//! another never reaches: for `b` in `0..S - 1`, a broadcast from stage `b` of the hidden state
//! after its layers ([`hand_over`]). Stage `b + 1` continues from the result; every other stage
//! passes whatever it holds (its operand is not read) and ignores it. Stage `s` runs its layers
//! between the broadcasts from `s - 1` and from `s`. A stage that does not compute a value
//! (the embeddings before stage 0's hand-over, the logits before the last stage's) uses zeros
//! of its type ([`placeholder`]), so every stage's graph has the same outputs and the driver's
//! sampling suffix appends to each alike; [`broadcast_outputs`] then hands every stage the last
//! stage's outputs, so rank 0 of the group (whose outputs a step returns) and every rank's
//! chained decode see the real picks.

use std::ops::Range;

use poot_graph_ir::{Builder, BuilderError, Graph, Outputs, TraceLimits, Traced};

use crate::error::TraceError;
use crate::step::Stage;
use crate::weights::{Role, WeightMap};

/// Layers of pipeline stage `stage` of `stages` over `layers`: consecutive, the first
/// `layers % stages` stages one layer more. Empty for every stage when `stages > layers` is not
/// refused first ([`Stage::layers`] refuses it).
pub fn stage_layers(stage: usize, stages: usize, layers: usize) -> Range<usize> {
    let stages = stages.max(1);
    let (each, extra) = (layers / stages, layers % stages);
    let start = stage * each + stage.min(extra);
    start..start + each + usize::from(stage < extra)
}

/// Whether a pipeline stage (the first, the last, both, or neither) holds a model-wide role;
/// a layer's roles go with the layer.
pub fn held_by_stage(role: Role, first: bool, last: bool) -> bool {
    match role {
        Role::TokenEmbed
        | Role::PositionEmbed
        | Role::TokenTypeEmbed
        | Role::EmbedNorm
        | Role::EmbedNormBias => first,
        Role::FinalNorm
        | Role::FinalNormBias
        | Role::Head
        | Role::Pooler
        | Role::PoolerBias
        | Role::Classifier
        | Role::ClassifierBias => last,
        Role::RopeCos(_) | Role::RopeSin(_) | Role::AlibiSlopes => true,
        Role::AttnNorm
        | Role::AttnNormBias
        | Role::AttnQ
        | Role::AttnQBias
        | Role::AttnK
        | Role::AttnKBias
        | Role::AttnV
        | Role::AttnVBias
        | Role::AttnO
        | Role::AttnOBias
        | Role::QNorm
        | Role::KNorm
        | Role::PostAttnNorm
        | Role::PostAttnNormBias
        | Role::FfnNorm
        | Role::FfnNormBias
        | Role::PostFfnNorm
        | Role::PostFfnNormBias
        | Role::FfnGate
        | Role::FfnUp
        | Role::FfnUpBias
        | Role::FfnDown
        | Role::FfnDownBias
        | Role::AttnSinks
        | Role::Router
        | Role::RouterBias
        | Role::ExpertGate
        | Role::ExpertUp
        | Role::ExpertDown
        | Role::ExpertGateUp
        | Role::ExpertGateUpBias
        | Role::ExpertDownBias
        | Role::ExpertGateBias
        | Role::ExpertUpBias
        | Role::SharedGate
        | Role::SharedUp
        | Role::SharedDown
        | Role::SharedGateLogit => true,
    }
}

impl WeightMap {
    /// The weight map pipeline stage `stage` of a model of `n_layers` reads: its layers' entries
    /// and the model-wide ones it holds ([`held_by_stage`]). A pipeline of one is this map.
    pub fn stage(&self, stage: Stage, n_layers: usize) -> Result<WeightMap, TraceError> {
        let held = stage.layers(n_layers)?;
        let mut out = WeightMap::new();
        for e in self.iter() {
            let keep = match e.role.layer {
                Some(l) => held.contains(&l),
                None => held_by_stage(e.role.role, stage.is_first(), stage.is_last()),
            };
            if keep {
                out.insert(e.clone());
            }
        }
        Ok(out)
    }
}

/// F32 zeros of `dims`: what a stage passes for a value it does not compute.
pub fn placeholder(b: &Builder, dims: impl Into<Vec<usize>>) -> Result<Traced, BuilderError> {
    b.broadcast(b.lit_f32(0.0)?, dims.into())
}

/// The hand-over after stage `root`'s layers: a broadcast of `x` from `root` on every stage.
/// The next stage continues from the result; every other keeps `x`. Nothing after the last
/// stage (and nothing at all in a pipeline of one).
pub fn hand_over(b: &Builder, x: Traced, stage: Stage, root: usize) -> Result<Traced, TraceError> {
    if root + 1 >= stage.stages {
        return Ok(x);
    }
    let got = b.broadcast_from(x, root, stage.stages)?;
    if stage.index == root + 1 {
        Ok(b.name(got, &format!("stage{}.in", stage.index))?)
    } else {
        Ok(x)
    }
}

/// `graph` (a stage's step with anything appended to it, such as the sampling suffix) with each
/// primary output replaced by the last stage's, broadcast to every stage; the carried state is
/// unchanged. A pipeline of one is `graph` unchanged.
pub fn broadcast_outputs(
    graph: Graph,
    stage: Stage,
    limits: TraceLimits,
) -> Result<Graph, BuilderError> {
    if stage.is_whole() || graph.outputs().primary.is_empty() {
        return Ok(graph);
    }
    let ext = Builder::extend(graph, limits)?;
    let b = &ext.builder;
    let last = stage.stages - 1;
    let mut shared = Vec::with_capacity(ext.outputs.len());
    for (i, &o) in ext.outputs.iter().enumerate() {
        let y = b.broadcast_from(o, last, stage.stages)?;
        shared.push(b.name(y, &format!("stage.out{i}"))?);
    }
    // Non-empty: a graph without outputs returned above.
    let mut outputs = Outputs::new(shared[0]);
    for &o in &shared[1..] {
        outputs = outputs.and(o);
    }
    ext.builder.finish(outputs.with_state(&ext.state))
}
