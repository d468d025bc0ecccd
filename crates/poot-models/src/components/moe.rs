//! Mixture-of-experts feed-forward: a router picks `top_k` experts per token, and each token's
//! input runs through its selected experts' SwiGLU, weighted by its routing weights.
//!
//! The experts are one `[experts, out, in]` stack per projection, contracted with
//! `IndexedMatMul`: every token's input is repeated once per selected slot and each (token,
//! slot) row reads only its expert's rows, so the step reads the selected experts' weights and
//! no others. The ids are computed inside the graph, so the graph is the same every token.

use poot_graph_ir::ops::{self, binary_bcast, softmax};
use poot_graph_ir::{BinaryOp, Builder, Traced};

use super::Step;
use super::ffn::{Activation, activate, gated_ffn_of};
use crate::error::TraceError;
use crate::weights::{Role, WeightRole};

/// How router logits become expert scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouterScore {
    /// A softmax over all experts (Mixtral, Qwen3-MoE).
    Softmax,
    /// An independent sigmoid per expert.
    Sigmoid,
}

/// How the experts' gate and up projections are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateUp {
    /// Two stacks, `[experts, out, in]` each.
    Separate,
    /// One stack `[experts, 2 * out, in]`, each expert's gate rows before its up rows: one
    /// contraction, whose halves are sliced apart.
    Fused,
    /// One stack `[experts, 2 * out, in]` whose gate and up rows alternate, gate first
    /// (gpt-oss's `gate_up_proj[..., ::2]` and `[..., 1::2]`): one contraction, whose pairs of
    /// columns are split apart.
    Interleaved,
}

/// gpt-oss's clamped SwiGLU: `(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g)` with
/// `g = min(gate, limit)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GluClamp {
    pub alpha: f32,
    pub limit: f32,
}

/// How each selected expert computes, beyond its router.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpertParams {
    pub gate_up: GateUp,
    pub act: Activation,
    /// Per-expert biases: `Role::ExpertGateUpBias` `[experts, 2 * out]` on the fused gate/up
    /// rows (`Role::ExpertGateBias` and `Role::ExpertUpBias`, `[experts, out]` each, beside
    /// separate stacks) and `Role::ExpertDownBias` `[experts, hidden]` on the down projection
    /// (gpt-oss).
    pub biases: bool,
    /// The stacks are stored `[experts, in, out]` (transformers' gpt-oss) and read transposed.
    pub transposed: bool,
    /// The clamped SwiGLU in place of `act(gate) * up`.
    pub clamp: Option<GluClamp>,
}

/// A routed layer's choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterParams {
    pub experts: usize,
    pub top_k: usize,
    pub score: RouterScore,
    /// Divide the selected scores by their sum (Mixtral always; Qwen3-MoE's `norm_topk_prob`).
    pub renormalize: bool,
}

/// An expert every token runs beside its routed ones (Qwen2-MoE's `shared_expert`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedExpert {
    /// Features of its gate and up projections.
    pub intermediate: usize,
    /// Its output is scaled by `sigmoid(gate_logit . x)` per token (`shared_expert_gate`).
    pub gated: bool,
}

/// The shared expert's SwiGLU of `x`, scaled by the sigmoid of its gate logit when gated.
pub fn shared_expert(
    b: &Builder,
    step: &Step,
    layer: usize,
    x: Traced,
    shared: &SharedExpert,
    act: Activation,
) -> Result<Traced, TraceError> {
    let roles = [Role::SharedGate, Role::SharedUp, Role::SharedDown];
    let out = gated_ffn_of(b, step, layer, x, act, roles)?;
    if !shared.gated {
        return Ok(out);
    }
    let w = step.weight(b, WeightRole::layer(layer, Role::SharedGateLogit))?;
    let logit = ops::linear(b, x, w, None)?;
    Ok(binary_bcast(b, BinaryOp::Mul, out, sigmoid(b, logit)?)?)
}

fn sigmoid(b: &Builder, x: Traced) -> Result<Traced, TraceError> {
    let one = ops::scalar_like(b, 1.0, x)?;
    Ok(b.div(one, b.add(one, b.exp(b.neg(x)?)?)?)?)
}

/// The selection of one layer's router for `x [tokens, hidden]`: the expert ids `[tokens,
/// top_k]` (i32, best first) and their weights `[tokens, top_k]` (f32).
pub fn route(
    b: &Builder,
    step: &Step,
    layer: usize,
    x: Traced,
    params: &RouterParams,
) -> Result<(Traced, Traced), TraceError> {
    let router = step.weight(b, WeightRole::layer(layer, Role::Router))?;
    let bias = step.weight_opt(b, WeightRole::layer(layer, Role::RouterBias))?;
    let logits = ops::linear(b, x, router, bias)?;
    let scores = match params.score {
        RouterScore::Softmax => softmax(b, logits, 1)?,
        RouterScore::Sigmoid => sigmoid(b, logits)?,
    };
    let ids = b.name(b.arg_top_k(scores, params.top_k)?, "expert_ids")?;
    let mut weights = b.take_along(scores, ids, 1)?;
    if params.renormalize {
        let sum = b.reduce_sum(weights, 1)?;
        weights = binary_bcast(b, BinaryOp::Div, weights, sum)?;
    }
    Ok((ids, b.name(weights, "expert_weights")?))
}

/// `sum_j w_j * down_j(act(gate_j(x)) * up_j(x))` over each token's selected experts `j`, for
/// `x [rows, tokens, hidden]`.
pub fn routed_experts(
    b: &Builder,
    step: &Step,
    layer: usize,
    x: Traced,
    params: &RouterParams,
    experts: &ExpertParams,
) -> Result<Traced, TraceError> {
    let dims = b.dims(x)?;
    let hidden = *dims.last().unwrap_or(&0);
    let tokens: usize = dims.iter().rev().skip(1).product();
    let k = params.top_k;
    let n = tokens * k;
    let flat = b.reshape(x, [tokens, hidden])?;
    let (ids, weights) = b.scope("router", |b| route(b, step, layer, flat, params))?;
    // One row per (token, slot), slot-minor, so row `t * k + j` is token `t`'s `j`-th choice.
    let repeated = b.broadcast(b.reshape(flat, [tokens, 1, hidden])?, [tokens, k, hidden])?;
    let rows = b.reshape(repeated, [n, hidden])?;
    let row_ids = b.reshape(ids, [n])?;
    let w = |r| -> Result<Traced, TraceError> {
        let stack = step.weight(b, WeightRole::layer(layer, r))?;
        Ok(match experts.transposed {
            true => b.transpose(stack, vec![0, 2, 1])?,
            false => stack,
        })
    };
    // Each row's expert's bias row, when the experts have biases (widened: a checkpoint may
    // store them bf16).
    let bias = |y: Traced, r| -> Result<Traced, TraceError> {
        if !experts.biases {
            return Ok(y);
        }
        let stack = step.weight(b, WeightRole::layer(layer, r))?;
        Ok(b.add(y, ops::to_f32(b, b.gather(stack, row_ids, 0)?)?)?)
    };
    let contract =
        |r| -> Result<Traced, TraceError> { Ok(b.indexed_matmul(rows, w(r)?, row_ids)?) };
    let (gate, up) = match experts.gate_up {
        GateUp::Separate => (
            bias(contract(Role::ExpertGate)?, Role::ExpertGateBias)?,
            bias(contract(Role::ExpertUp)?, Role::ExpertUpBias)?,
        ),
        GateUp::Fused | GateUp::Interleaved => {
            let both = bias(contract(Role::ExpertGateUp)?, Role::ExpertGateUpBias)?;
            let out = *b.dims(both)?.last().unwrap_or(&0) / 2;
            match experts.gate_up {
                GateUp::Interleaved => {
                    let pairs = b.reshape(both, [n, out, 2])?;
                    let half = |i| -> Result<Traced, TraceError> {
                        let s = b.slice(pairs, vec![0, 0, i], vec![n, out, i + 1])?;
                        Ok(b.reshape(s, [n, out])?)
                    };
                    (half(0)?, half(1)?)
                }
                _ => (
                    b.slice(both, vec![0, 0], vec![n, out])?,
                    b.slice(both, vec![0, out], vec![n, 2 * out])?,
                ),
            }
        }
    };
    let h = match experts.clamp {
        None => b.mul(activate(b, gate, experts.act)?, up)?,
        Some(c) => clamped_glu(b, gate, up, c)?,
    };
    let down = bias(
        b.indexed_matmul(h, w(Role::ExpertDown)?, row_ids)?,
        Role::ExpertDownBias,
    )?;
    let weighted = binary_bcast(b, BinaryOp::Mul, down, b.reshape(weights, [n, 1])?)?;
    let summed = b.reduce_sum(b.reshape(weighted, [tokens, k, hidden])?, 1)?;
    Ok(b.reshape(summed, dims)?)
}

/// [`GluClamp`]'s SwiGLU of `gate` and `up`.
fn clamped_glu(b: &Builder, gate: Traced, up: Traced, c: GluClamp) -> Result<Traced, TraceError> {
    let limit = ops::scalar_like(b, c.limit, gate)?;
    let gate = b.binary(BinaryOp::Min, gate, limit)?;
    let up = b.max(b.binary(BinaryOp::Min, up, limit)?, b.neg(limit)?)?;
    let alpha = ops::scalar_like(b, c.alpha, gate)?;
    let glu = b.mul(gate, sigmoid(b, b.mul(gate, alpha)?)?)?;
    Ok(b.mul(b.add(up, ops::scalar_like(b, 1.0, up)?)?, glu)?)
}
