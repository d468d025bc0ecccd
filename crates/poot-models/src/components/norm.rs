//! Norm kinds and their application by role.

use poot_graph_ir::Builder;
use poot_graph_ir::Traced;
use poot_graph_ir::ops::{self, RmsNormOptions};

use super::Step;
use crate::error::TraceError;
use crate::weights::{Role, WeightRole};

/// Which normalization a model uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Norm {
    Rms(RmsNormOptions),
    /// LayerNorm with scale and (when the checkpoint has one) bias.
    Layer {
        eps: f32,
    },
}

impl Norm {
    pub fn rms(eps: f32) -> Norm {
        Norm::Rms(RmsNormOptions {
            eps,
            weight_offset: 0.0,
        })
    }
}

/// The bias role paired with a norm scale role, for LayerNorm.
fn bias_of(role: Role) -> Option<Role> {
    Some(match role {
        Role::EmbedNorm => Role::EmbedNormBias,
        Role::FinalNorm => Role::FinalNormBias,
        Role::AttnNorm => Role::AttnNormBias,
        Role::PostAttnNorm => Role::PostAttnNormBias,
        Role::FfnNorm => Role::FfnNormBias,
        Role::PostFfnNorm => Role::PostFfnNormBias,
        _ => return None,
    })
}

/// Normalizes `x` over its last axis with the scale (and bias) bound to `role`.
pub fn apply_norm(
    b: &Builder,
    step: &Step,
    x: Traced,
    role: WeightRole,
    norm: Norm,
) -> Result<Traced, TraceError> {
    let w = step.weight(b, role)?;
    match norm {
        Norm::Rms(opts) => Ok(ops::rmsnorm_with(b, x, w, opts)?),
        Norm::Layer { eps } => {
            let bias_role = bias_of(role.role).map(|r| WeightRole {
                layer: role.layer,
                role: r,
            });
            let bias = match bias_role {
                Some(r) => step.weight_opt(b, r)?,
                None => None,
            };
            let bias = match bias {
                Some(t) => t,
                None => {
                    let d = b.dims(x)?;
                    let zero = b.lit_f32(0.0)?;
                    b.broadcast(zero, [*d.last().unwrap_or(&1)])?
                }
            };
            Ok(ops::layernorm(b, x, w, bias, eps)?)
        }
    }
}
