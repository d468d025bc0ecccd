//! Feed-forward blocks.

use poot_graph_ir::ops::{self, binary_bcast};
use poot_graph_ir::{BinaryOp, Builder, Traced};

use super::{Step, adapted};
use crate::error::TraceError;
use crate::weights::{Role, WeightRole};

/// The nonlinearity of a feed-forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// GeLU, tanh approximation.
    GeluTanh,
    /// GeLU, exact (erf).
    GeluErf,
}

pub fn activate(b: &Builder, x: Traced, act: Activation) -> Result<Traced, TraceError> {
    Ok(match act {
        Activation::Silu => ops::silu(b, x)?,
        Activation::GeluTanh => ops::gelu_tanh(b, x)?,
        Activation::GeluErf => ops::gelu_erf(b, x)?,
    })
}

/// `down(act(gate(x)) * up(x))` (SwiGLU, GeGLU).
pub fn gated_ffn(
    b: &Builder,
    step: &Step,
    layer: usize,
    x: Traced,
    act: Activation,
) -> Result<Traced, TraceError> {
    gated_ffn_of(
        b,
        step,
        layer,
        x,
        act,
        [Role::FfnGate, Role::FfnUp, Role::FfnDown],
    )
}

/// [`gated_ffn`] over the projections bound at `[gate, up, down]` (a shared expert's).
pub fn gated_ffn_of(
    b: &Builder,
    step: &Step,
    layer: usize,
    x: Traced,
    act: Activation,
    [gate_role, up_role, down_role]: [Role; 3],
) -> Result<Traced, TraceError> {
    let w = |r| step.weight(b, WeightRole::layer(layer, r));
    let proj = |r, y| adapted(b, step, layer, r, x, y);
    let gate = proj(gate_role, ops::linear(b, x, w(gate_role)?, None)?)?;
    let up = proj(up_role, ops::linear(b, x, w(up_role)?, None)?)?;
    let h = b.mul(activate(b, gate, act)?, up)?;
    let down = ops::row_parallel_linear(b, h, w(down_role)?, None, step.shape.shard.ranks)?;
    adapted(b, step, layer, down_role, h, down)
}

/// `down(act(up(x) + bu)) + bd` (encoders).
pub fn plain_ffn(
    b: &Builder,
    step: &Step,
    layer: usize,
    x: Traced,
    act: Activation,
) -> Result<Traced, TraceError> {
    let role = |r| WeightRole::layer(layer, r);
    let up = ops::linear(
        b,
        x,
        step.weight(b, role(Role::FfnUp))?,
        step.weight_opt(b, role(Role::FfnUpBias))?,
    )?;
    let h = activate(b, up, act)?;
    let down = ops::row_parallel_linear(
        b,
        h,
        step.weight(b, role(Role::FfnDown))?,
        None,
        step.shape.shard.ranks,
    )?;
    match step.weight_opt(b, role(Role::FfnDownBias))? {
        Some(bias) => Ok(binary_bcast(b, BinaryOp::Add, down, ops::to_f32(b, bias)?)?),
        None => Ok(down),
    }
}
