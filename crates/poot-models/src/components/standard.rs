//! The residual pair almost every model repeats: the stack (embed, layers, final norm, head)
//! and the layer (`x += mixer(norm(x)); x += ffn(norm(x))`), with options instead of copies.

use poot_graph_ir::ops::{self, binary_bcast, scalar_like};
use poot_graph_ir::{BinaryOp, Builder, Traced};

use super::{Norm, Step, apply_norm};
use crate::error::TraceError;
use crate::pipeline;
use crate::step::LogitsMode;
use crate::weights::{Role, WeightRole};

/// Model-wide options of the stack.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StackParams {
    /// Multiplies the token embeddings (Gemma's `sqrt(hidden)`).
    pub embed_scale: Option<f32>,
    /// Adds learned absolute position embeddings (and segment embeddings when the step has
    /// token types) and normalizes them (BERT).
    pub learned_positions: bool,
    /// The norm applied to the embeddings (BERT), if any.
    pub embed_norm: Option<Norm>,
    /// The final norm before the head, if any.
    pub final_norm: Option<Norm>,
    /// `c * tanh(logits / c)` on the logits.
    pub final_softcap: Option<f32>,
    /// Divides the logits (Granite's `logits_scaling`).
    pub logit_divisor: Option<f32>,
    /// Whether the stack ends in the vocabulary head; an encoder returns hidden states.
    pub head: bool,
    /// The hidden size and the vocabulary: the types a pipeline stage that does not compute a
    /// value (the embeddings, the logits) passes in its place.
    pub hidden: usize,
    pub vocab: usize,
}

/// Where a layer's norms sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPlacement {
    /// `x += block(norm(x))`, with `post_*` norms on each block's output when `sandwich`.
    Pre { sandwich: bool },
    /// `x = norm(x + block(x))` (BERT).
    Post,
    /// `x += norm(block(x))`: a norm on each block's output (the `post_*` roles), none on its
    /// input (OLMo 2).
    Output,
}

/// A layer's options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerParams {
    pub norm: Norm,
    pub placement: NormPlacement,
    /// Multiplies each block's output before it joins the residual (Granite's
    /// `residual_multiplier`).
    pub residual_scale: Option<f32>,
}

/// What the stack returns.
pub struct StackOutput {
    /// Logits `[rows, vocab]` (last token) or `[rows, tokens, vocab]`, when the stack has a head.
    pub logits: Option<Traced>,
    /// Final hidden states `[rows, tokens, hidden]` (after the final norm, if any).
    pub hidden: Traced,
}

/// Embeds the step's tokens, runs `layer` once per layer inside a `l{i}` scope, applies the
/// final norm and the head.
///
/// A pipeline stage ([`crate::step::Stage`]) runs only its layers: the first stage embeds the
/// tokens, a later one continues from the hidden state its predecessor hands over
/// ([`pipeline::hand_over`], the same broadcasts in the same order on every stage), and only
/// the last computes the final norm and the head; the others return zeros of the hidden
/// state's and the logits' types in their place (see [`crate::pipeline`]).
pub fn standard_stack(
    b: &Builder,
    step: &Step,
    params: &StackParams,
    layers: usize,
    mut layer: impl FnMut(&Builder, usize, Traced) -> Result<Traced, TraceError>,
) -> Result<StackOutput, TraceError> {
    let stage = step.shape.stage;
    let held = stage.layers(layers)?;
    let (rows, tokens) = (step.shape.rows, step.shape.tokens);
    let mut x = if stage.is_first() {
        embed(b, step, params)?
    } else {
        b.name(
            pipeline::placeholder(b, [rows, tokens, params.hidden])?,
            "stage.placeholder",
        )?
    };
    for root in 0..stage.stages {
        if root == stage.index {
            for l in held.clone() {
                x = b.scope(&format!("l{l}"), |b| -> Result<Traced, TraceError> {
                    let y = layer(b, l, x)?;
                    Ok(b.name(y, "out")?)
                })?;
            }
        }
        x = pipeline::hand_over(b, x, stage, root)?;
    }
    if !stage.is_last() {
        let hidden = b.name(
            pipeline::placeholder(b, [rows, tokens, params.hidden])?,
            "hidden",
        )?;
        let logits = match (params.head, step.shape.logits) {
            (false, _) => None,
            (true, LogitsMode::All) => Some(vec![rows, tokens, params.vocab]),
            (true, LogitsMode::Last) => Some(vec![rows, params.vocab]),
        };
        let logits = match logits {
            Some(dims) => Some(b.name(pipeline::placeholder(b, dims)?, "logits")?),
            None => None,
        };
        return Ok(StackOutput { logits, hidden });
    }
    if let Some(norm) = params.final_norm {
        x = apply_norm(b, step, x, WeightRole::global(Role::FinalNorm), norm)?;
    }
    let hidden = b.name(x, "hidden")?;
    if !params.head {
        return Ok(StackOutput {
            logits: None,
            hidden,
        });
    }
    let d = *b.dims(hidden)?.last().unwrap_or(&0);
    let picked = match step.shape.logits {
        LogitsMode::All => hidden,
        LogitsMode::Last => {
            let last = b.slice(hidden, vec![0, tokens - 1, 0], vec![rows, tokens, d])?;
            b.reshape(last, [rows, d])?
        }
    };
    let mut logits = ops::linear(
        b,
        picked,
        step.weight(b, WeightRole::global(Role::Head))?,
        None,
    )?;
    if let Some(c) = params.final_softcap {
        let inner = b.tanh(b.mul(logits, scalar_like(b, 1.0 / c, logits)?)?)?;
        logits = b.mul(inner, scalar_like(b, c, inner)?)?;
    }
    if let Some(d) = params.logit_divisor {
        logits = b.div(logits, scalar_like(b, d, logits)?)?;
    }
    Ok(StackOutput {
        logits: Some(b.name(logits, "logits")?),
        hidden,
    })
}

/// The embedded tokens: scaled, with learned positions (and segments) and their norm when the
/// stack has them.
fn embed(b: &Builder, step: &Step, params: &StackParams) -> Result<Traced, TraceError> {
    let mut x = ops::embed(
        b,
        step.weight(b, WeightRole::global(Role::TokenEmbed))?,
        step.tokens,
    )?;
    if let Some(s) = params.embed_scale {
        x = b.mul(x, scalar_like(b, s, x)?)?;
    }
    if params.learned_positions {
        let pos = ops::embed(
            b,
            step.weight(b, WeightRole::global(Role::PositionEmbed))?,
            step.pos,
        )?;
        x = b.add(x, pos)?;
        if let (Some(types), Some(table)) = (
            step.token_types(),
            step.weight_opt(b, WeightRole::global(Role::TokenTypeEmbed))?,
        ) {
            x = b.add(x, ops::embed(b, table, types)?)?;
        }
    }
    if let Some(norm) = params.embed_norm {
        x = apply_norm(b, step, x, WeightRole::global(Role::EmbedNorm), norm)?;
    }
    Ok(b.name(x, "embed")?)
}

/// One residual layer: the mixer then the feed-forward, each wrapped in its norms.
pub fn standard_layer(
    b: &Builder,
    step: &Step,
    layer: usize,
    x: Traced,
    params: &LayerParams,
    mixer: impl FnOnce(&Builder, Traced) -> Result<Traced, TraceError>,
    ffn: impl FnOnce(&Builder, Traced) -> Result<Traced, TraceError>,
) -> Result<Traced, TraceError> {
    let norm =
        |x: Traced, r: Role| apply_norm(b, step, x, WeightRole::layer(layer, r), params.norm);
    let scaled = |y: Traced| -> Result<Traced, TraceError> {
        match params.residual_scale {
            Some(s) => Ok(b.mul(y, scalar_like(b, s, y)?)?),
            None => Ok(y),
        }
    };
    match params.placement {
        NormPlacement::Pre { sandwich } => {
            let mut a = mixer(b, norm(x, Role::AttnNorm)?)?;
            if sandwich {
                a = norm(a, Role::PostAttnNorm)?;
            }
            let x = b.add(x, scaled(a)?)?;
            let mut f = ffn(b, norm(x, Role::FfnNorm)?)?;
            if sandwich {
                f = norm(f, Role::PostFfnNorm)?;
            }
            Ok(b.add(x, scaled(f)?)?)
        }
        NormPlacement::Output => {
            let a = norm(mixer(b, x)?, Role::PostAttnNorm)?;
            let x = b.add(x, a)?;
            let f = norm(ffn(b, x)?, Role::PostFfnNorm)?;
            Ok(b.add(x, f)?)
        }
        NormPlacement::Post => {
            let a = mixer(b, x)?;
            let x = norm(b.add(x, scaled(a)?)?, Role::AttnNorm)?;
            let f = ffn(b, x)?;
            norm(
                binary_bcast(b, BinaryOp::Add, x, scaled(f)?)?,
                Role::FfnNorm,
            )
        }
    }
}
