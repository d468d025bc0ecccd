//! The shared wrapper for dense decoders: a family reads its config into a
//! [`DenseDecoderSpec`], binds its name table, and gets its tracer from here.

use std::borrow::Cow;

use poot_graph_ir::ops::RopeStyle;
use poot_graph_ir::{Builder, Graph};

use super::{
    Activation, AttentionParams, ExpertParams, GateUp, GluClamp, KvSource, LayerParams, Norm,
    NormPlacement, QkNormSpan, RopeConfig, RopeUse, RouterParams, RouterScore, SharedExpert,
    StackParams, Step, attention, bind_alibi_slopes, gated_ffn, plain_ffn, routed_experts,
    shared_expert, standard_layer, standard_stack,
};
use crate::config::{ConfigReader, Key, SourceKind, key};
use crate::error::{ModelError, TraceError};
use crate::lora::QkRows;
use crate::model::{Model, ModelConfig, narrowed_positions};
use crate::schema::ModelSchema;
use crate::step::{Program, Shard, StepSpec};
use crate::table::ComputedTable;
use crate::tensor_parallel::Heads;
use crate::weights::{FusedParts, FusedRows, NameTable, Role, TensorIndex, WeightMap, WeightRole};

/// Per-layer attention choices (which rotary table, which window).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerAttention {
    /// The rotary table the layer's queries and keys turn by; `None` for a layer without
    /// rotary embeddings (SmolLM3's NoPE layers).
    pub rope_table: Option<u8>,
    pub window: Option<usize>,
}

/// How a checkpoint stores a layer's query, key and value projections (and their biases).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkvLayout {
    /// Three tensors.
    Separate,
    /// One tensor, the query rows, then the key rows, then the value rows (Phi-3's `qkv_proj`,
    /// MPT's `Wqkv`, llama.cpp's `attn_qkv`), bound as its row ranges; the name table spells
    /// all three roles (and all three biases) as that tensor.
    Fused,
    /// One tensor holding each head's query, key and value rows in turn, `[heads, 3,
    /// head_dim]` rows (BLOOM's `query_key_value`), each part bound as its runs of rows
    /// (copied together at upload); multi-head attention only.
    FusedPerHead,
}

/// A decoder whose every feed-forward is routed experts instead of one SwiGLU.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeSpec {
    pub router: RouterParams,
    /// Features of each expert's gate and up projections.
    pub expert_intermediate: usize,
    /// The config key the expert count was read from (named if the checkpoint disagrees).
    pub experts_key: String,
    /// Whether the gate and up stacks are stored apart or fused.
    pub gate_up: GateUp,
    /// An expert every token runs beside the routed ones, added to their sum.
    pub shared: Option<SharedExpert>,
    /// A router bias and per-expert biases (gpt-oss).
    pub biases: bool,
    /// Expert stacks stored `[experts, in, out]` (transformers' gpt-oss).
    pub transposed: bool,
    /// Expert stacks stored as transformers' MXFP4 blocks and scales (`{stack}_blocks`,
    /// `{stack}_scales`, `[experts, out, in]`; gpt-oss as released), bound as MXFP4 stacks.
    pub mxfp4_blocks: bool,
    /// gpt-oss's clamped SwiGLU in place of the decoder's activation.
    pub clamp: Option<GluClamp>,
}

impl MoeSpec {
    /// Reads the expert count and top-k at `experts_key` and `top_k_key` (top-k refused when it
    /// is zero or above the expert count), with a softmax router.
    pub fn read(
        cfg: &ConfigReader,
        experts_key: Key,
        top_k_key: Key,
        expert_intermediate: usize,
        renormalize: bool,
    ) -> Result<MoeSpec, ModelError> {
        use crate::limits::EXPERTS;
        let experts = cfg.usize_at_most(experts_key, EXPERTS)?;
        let top_k = cfg.usize_at_most(top_k_key, EXPERTS)?;
        if top_k == 0 || top_k > experts {
            return Err(ModelError::TopK {
                key: cfg.key_name(top_k_key),
                top_k,
                experts,
            });
        }
        Ok(MoeSpec {
            router: RouterParams {
                experts,
                top_k,
                score: RouterScore::Softmax,
                renormalize,
            },
            expert_intermediate,
            experts_key: cfg.key_name(experts_key),
            gate_up: GateUp::Separate,
            shared: None,
            biases: false,
            transposed: false,
            mxfp4_blocks: false,
            clamp: None,
        })
    }
}

/// Refuses a config that makes some of a routed decoder's layers dense (`mlp_only_layers`, or a
/// `decoder_sparse_step` other than 1) rather than run it wrong: every layer here is routed.
pub fn refuse_dense_layers(cfg: &ConfigReader) -> Result<(), ModelError> {
    let dense_key = key("mlp_only_layers", "");
    if let Some(v) = cfg.hf(dense_key.hf) {
        match v.as_array() {
            Some(layers) if layers.is_empty() => {}
            Some(_) => {
                return Err(cfg.unsupported(dense_key, v, "[] (every layer routed)"));
            }
            None => {
                return Err(ModelError::KeyType {
                    key: dense_key.hf.into(),
                    expected: "a list of layer indices",
                });
            }
        }
    }
    let step_key = key("decoder_sparse_step", "");
    match cfg.opt_usize(step_key)? {
        Some(step) if step != 1 => Err(cfg.unsupported(step_key, step, "1 (every layer routed)")),
        _ => Ok(()),
    }
}

/// Everything that distinguishes one dense decoder from another.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseDecoderSpec {
    pub config: ModelConfig,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub norm: Norm,
    /// A norm before each block (false: only the `post_*` norms after it, OLMo 2).
    pub pre_norms: bool,
    pub sandwich_norms: bool,
    pub qk_norm: bool,
    /// What the q/k norms span (each head, or the whole projection).
    pub qk_norm_span: QkNormSpan,
    pub activation: Activation,
    pub rope_style: RopeStyle,
    /// Rotary configs, indexed by [`LayerAttention::rope_table`].
    pub ropes: Vec<RopeConfig>,
    pub layers: Vec<LayerAttention>,
    pub attn_scale: f32,
    pub attn_softcap: Option<f32>,
    pub embed_scale: Option<f32>,
    pub final_softcap: Option<f32>,
    /// Multiplies each block's output before the residual add (Granite).
    pub residual_scale: Option<f32>,
    /// Divides the logits (Granite).
    pub logit_divisor: Option<f32>,
    /// The stored Q and K rows pair rotary features interleaved within each head (llama.cpp's
    /// converter permutes a Llama's rows so): an adapter's Q and K rows are permuted to match.
    pub qk_rows_interleaved: bool,
    /// Routed experts in place of every layer's SwiGLU.
    pub moe: Option<MoeSpec>,
    /// Q, K and V stored apart or as one projection.
    pub qkv: QkvLayout,
    /// Gate and up stored as one projection, gate rows first (Phi-3's `gate_up_proj`), bound
    /// as its two halves; the name table spells both roles as that tensor.
    pub fused_gate_up: bool,
    /// A learned sink logit per query head in every layer's attention (gpt-oss).
    pub attn_sinks: bool,
    /// ALiBi in every layer's attention with this largest bias (MPT, BLOOM); such a decoder has
    /// no rotary tables (see [`DenseDecoderSpec::alibi`]).
    pub alibi: Option<f32>,
    /// Query, key and value projections clamped to `[-c, c]` (MPT's `clip_qkv`).
    pub clip_qkv: Option<f32>,
    /// `down(act(up(x)))` in place of the gated feed-forward (MPT, BLOOM).
    pub plain_ffn: bool,
    /// A norm on the token embeddings (BLOOM's `word_embeddings_layernorm`).
    pub embed_norm: bool,
    /// Every projection and every norm has a bias, which the checkpoint must hold (BLOOM).
    /// Without it, attention biases are read where present.
    pub biases: bool,
}

/// A dense decoder: the spec, its schema and its weight map.
pub struct DenseDecoder {
    spec: DenseDecoderSpec,
    schema: ModelSchema,
    weights: WeightMap,
}

impl DenseDecoder {
    /// Binds the weights the spec needs through the family's name table: every layer's norms and
    /// projections (biases and qk-norms when present or required), the head (the embedding when
    /// the checkpoint ties them), and the computed rotary tables.
    pub fn build(
        spec: DenseDecoderSpec,
        index: &dyn TensorIndex,
        names: &NameTable,
        kind: SourceKind,
    ) -> Result<DenseDecoder, ModelError> {
        let c = &spec.config;
        let (d, v) = (c.hidden_size as u64, c.vocab_size as u64);
        let (q_out, kv_out) = (
            (spec.n_heads * spec.head_dim) as u64,
            (spec.n_kv_heads * spec.head_dim) as u64,
        );
        let ff = spec.intermediate as u64;
        let mut w = WeightMap::new();
        w.bind_named(
            index,
            names,
            kind,
            WeightRole::global(Role::TokenEmbed),
            Some(&[v, d]),
        )?;
        let g = WeightRole::global;
        w.bind_named(index, names, kind, g(Role::FinalNorm), Some(&[d]))?;
        if spec.biases {
            w.bind_named(index, names, kind, g(Role::FinalNormBias), Some(&[d]))?;
        }
        if spec.embed_norm {
            w.bind_named(index, names, kind, g(Role::EmbedNorm), Some(&[d]))?;
            if spec.biases {
                w.bind_named(index, names, kind, g(Role::EmbedNormBias), Some(&[d]))?;
            }
        }
        if !w.bind_named_opt(
            index,
            names,
            kind,
            WeightRole::global(Role::Head),
            Some(&[v, d]),
        )? {
            let embed = names.name(kind, None, Role::TokenEmbed).unwrap_or_default();
            w.bind_tensor(index, WeightRole::global(Role::Head), &embed, Some(&[v, d]))?;
        }
        for l in 0..c.n_layers {
            let role = |r| WeightRole::layer(l, r);
            let req = |w: &mut WeightMap, r, shape: &[u64]| {
                w.bind_named(index, names, kind, role(r), Some(shape))
            };
            if spec.pre_norms {
                req(&mut w, Role::AttnNorm, &[d])?;
                req(&mut w, Role::FfnNorm, &[d])?;
                if spec.biases {
                    req(&mut w, Role::AttnNormBias, &[d])?;
                    req(&mut w, Role::FfnNormBias, &[d])?;
                }
            }
            let qkv_rows = match spec.qkv {
                QkvLayout::Separate => None,
                QkvLayout::Fused => Some(FusedRows::Consecutive),
                QkvLayout::FusedPerHead => Some(FusedRows::PerHead {
                    heads: spec.n_heads as u64,
                }),
            };
            match qkv_rows {
                None => {
                    req(&mut w, Role::AttnQ, &[q_out, d])?;
                    req(&mut w, Role::AttnK, &[kv_out, d])?;
                    req(&mut w, Role::AttnV, &[kv_out, d])?;
                }
                Some(rows) => {
                    let parts = [
                        (Role::AttnQ, q_out),
                        (Role::AttnK, kv_out),
                        (Role::AttnV, kv_out),
                    ];
                    let fused = FusedParts {
                        parts: &parts,
                        cols: Some(d),
                        rows,
                    };
                    w.bind_fused_parts(index, names, kind, l, &fused)?;
                    if spec.biases {
                        let parts = [
                            (Role::AttnQBias, q_out),
                            (Role::AttnKBias, kv_out),
                            (Role::AttnVBias, kv_out),
                        ];
                        let fused = FusedParts {
                            parts: &parts,
                            cols: None,
                            rows,
                        };
                        w.bind_fused_parts(index, names, kind, l, &fused)?;
                    }
                }
            }
            req(&mut w, Role::AttnO, &[d, q_out])?;
            if spec.plain_ffn {
                req(&mut w, Role::FfnUp, &[ff, d])?;
                req(&mut w, Role::FfnDown, &[d, ff])?;
                if spec.biases {
                    req(&mut w, Role::FfnUpBias, &[ff])?;
                    req(&mut w, Role::FfnDownBias, &[d])?;
                }
            } else if spec.moe.is_none() {
                if spec.fused_gate_up {
                    let parts = [(Role::FfnGate, ff), (Role::FfnUp, ff)];
                    w.bind_fused(index, names, kind, l, &parts, d)?;
                } else {
                    req(&mut w, Role::FfnGate, &[ff, d])?;
                    req(&mut w, Role::FfnUp, &[ff, d])?;
                }
                req(&mut w, Role::FfnDown, &[d, ff])?;
            }
            if spec.sandwich_norms || !spec.pre_norms {
                req(&mut w, Role::PostAttnNorm, &[d])?;
                req(&mut w, Role::PostFfnNorm, &[d])?;
            }
            if spec.qk_norm {
                let (q, k) = match spec.qk_norm_span {
                    QkNormSpan::Head => (spec.head_dim as u64, spec.head_dim as u64),
                    QkNormSpan::Projection => (q_out, kv_out),
                };
                req(&mut w, Role::QNorm, &[q])?;
                req(&mut w, Role::KNorm, &[k])?;
            }
            if spec.attn_sinks {
                req(&mut w, Role::AttnSinks, &[spec.n_heads as u64])?;
            }
            if spec.biases {
                if qkv_rows.is_none() {
                    req(&mut w, Role::AttnQBias, &[q_out])?;
                    req(&mut w, Role::AttnKBias, &[kv_out])?;
                    req(&mut w, Role::AttnVBias, &[kv_out])?;
                }
                req(&mut w, Role::AttnOBias, &[d])?;
            } else {
                for (r, n) in [
                    (Role::AttnQBias, q_out),
                    (Role::AttnKBias, kv_out),
                    (Role::AttnVBias, kv_out),
                    (Role::AttnOBias, d),
                ] {
                    w.bind_named_opt(index, names, kind, role(r), Some(&[n]))?;
                }
            }
            if let Some(moe) = &spec.moe {
                // Experts before the router, so a config that miscounts them names an expert.
                let (e, ef) = (moe.router.experts, moe.expert_intermediate as u64);
                let stacks: &[(Role, [u64; 2])] = match moe.gate_up {
                    GateUp::Separate => &[
                        (Role::ExpertGate, [ef, d]),
                        (Role::ExpertUp, [ef, d]),
                        (Role::ExpertDown, [d, ef]),
                    ],
                    GateUp::Fused | GateUp::Interleaved => &[
                        (Role::ExpertGateUp, [2 * ef, d]),
                        (Role::ExpertDown, [d, ef]),
                    ],
                };
                for &(r, [out, inp]) in stacks {
                    let shape = if moe.transposed {
                        [inp, out]
                    } else {
                        [out, inp]
                    };
                    if moe.mxfp4_blocks {
                        w.bind_mxfp4_experts(index, names, kind, role(r), e, shape)?;
                    } else {
                        w.bind_experts(index, names, kind, role(r), e, shape, &moe.experts_key)?;
                    }
                }
                w.bind_named(index, names, kind, role(Role::Router), Some(&[e as u64, d]))?;
                if moe.biases {
                    let e = e as u64;
                    match moe.gate_up {
                        GateUp::Separate => {
                            req(&mut w, Role::ExpertGateBias, &[e, ef])?;
                            req(&mut w, Role::ExpertUpBias, &[e, ef])?;
                        }
                        GateUp::Fused | GateUp::Interleaved => {
                            req(&mut w, Role::ExpertGateUpBias, &[e, 2 * ef])?;
                        }
                    }
                    req(&mut w, Role::ExpertDownBias, &[e, d])?;
                    req(&mut w, Role::RouterBias, &[e])?;
                }
                if let Some(shared) = &moe.shared {
                    let sf = shared.intermediate as u64;
                    let mut req =
                        |r, shape: &[u64]| w.bind_named(index, names, kind, role(r), Some(shape));
                    req(Role::SharedGate, &[sf, d])?;
                    req(Role::SharedUp, &[sf, d])?;
                    req(Role::SharedDown, &[d, sf])?;
                    if shared.gated {
                        req(Role::SharedGateLogit, &[1, d])?;
                    }
                }
            }
        }
        for (i, rope) in spec.ropes.iter().enumerate() {
            let i = u8::try_from(i).map_err(|_| ModelError::Unsupported {
                key: "rope tables".into(),
                value: spec.ropes.len().to_string(),
                supported: "at most 255",
            })?;
            // Described here, computed on first read (after any narrowing to the capacity in use).
            for (role, sin) in [(Role::RopeCos(i), false), (Role::RopeSin(i), true)] {
                let role = WeightRole::global(role);
                let table =
                    ComputedTable::rope(&role.const_name(), rope.clone(), sin, c.max_positions)?;
                w.bind_table(role, table);
            }
        }
        if let Some(max_bias) = spec.alibi {
            bind_alibi_slopes(&mut w, spec.n_heads, max_bias);
        }
        let schema = ModelSchema::decoder(c.n_layers, spec.n_kv_heads, spec.head_dim);
        Ok(DenseDecoder {
            spec,
            schema,
            weights: w,
        })
    }

    pub fn spec(&self) -> &DenseDecoderSpec {
        &self.spec
    }
}

impl Model for DenseDecoder {
    fn config(&self) -> &ModelConfig {
        &self.spec.config
    }

    fn lora_qk_rows(&self) -> QkRows {
        let s = &self.spec;
        if s.qk_rows_interleaved {
            QkRows::Interleaved {
                head_dim: s.head_dim,
            }
        } else {
            QkRows::AsStored
        }
    }

    fn schema(&self) -> &ModelSchema {
        &self.schema
    }

    fn weights(&self) -> &WeightMap {
        &self.weights
    }

    fn narrow_positions(&mut self, positions: usize) -> Result<(), TraceError> {
        let c = &mut self.spec.config;
        c.max_positions = narrowed_positions(positions, c.max_positions)?;
        self.weights.narrow_rope_tables(c.max_positions);
        Ok(())
    }

    /// Checks the heads split over the group before narrowing the weights, so a refusal names
    /// what cannot be shared.
    fn shard_weights(&self, shard: Shard) -> Result<Cow<'_, WeightMap>, TraceError> {
        Shard::new(shard.rank, shard.ranks)?;
        if shard.is_whole() {
            return Ok(Cow::Borrowed(&self.weights));
        }
        let s = &self.spec;
        // A norm over the whole projection needs every head's features on one rank.
        if s.moe.is_some() || (s.qk_norm && s.qk_norm_span == QkNormSpan::Projection) {
            return Err(TraceError::Unsharded {
                family: s.config.family,
                ranks: shard.ranks,
            });
        }
        let heads = Heads {
            n_heads: s.n_heads,
            n_kv_heads: s.n_kv_heads,
            head_dim: s.head_dim,
        };
        heads.share(shard)?;
        Ok(Cow::Owned(self.weights.shard(shard, heads)?))
    }

    fn trace_into(&self, spec: &StepSpec, b: Builder) -> Result<Graph, TraceError> {
        if spec.program != Program::Step {
            return Err(TraceError::NoProgram {
                program: spec.program,
            });
        }
        let s = &self.spec;
        for rope in &s.ropes {
            if let Some(limit) = rope.scaling.max_positions()
                && spec.shape.capacity > limit
            {
                return Err(TraceError::RopeCapacity {
                    key: "original_max_position_embeddings",
                    capacity: spec.shape.capacity,
                    limit,
                });
            }
        }
        let weights = self.placed_weights(spec.shape.shard, spec.shape.stage)?;
        let step = Step::new(&b, spec.shape, &weights)?;
        let stack = StackParams {
            embed_scale: s.embed_scale,
            learned_positions: false,
            embed_norm: s.embed_norm.then_some(s.norm),
            final_norm: Some(s.norm),
            final_softcap: s.final_softcap,
            logit_divisor: s.logit_divisor,
            head: true,
            hidden: s.config.hidden_size,
            vocab: s.config.vocab_size,
        };
        let layer = LayerParams {
            norm: s.norm,
            placement: if s.pre_norms {
                NormPlacement::Pre {
                    sandwich: s.sandwich_norms,
                }
            } else {
                NormPlacement::Output
            },
            residual_scale: s.residual_scale,
        };
        let out = standard_stack(&b, &step, &stack, s.config.n_layers, |b, l, x| {
            let la = s.layers[l];
            let attn = AttentionParams {
                n_heads: s.n_heads,
                n_kv_heads: s.n_kv_heads,
                head_dim: s.head_dim,
                scale: s.attn_scale,
                rope: la.rope_table.map(|table| RopeUse {
                    table,
                    style: s.rope_style,
                }),
                window: la.window,
                softcap: s.attn_softcap,
                qk_norm: if s.qk_norm { Some(s.norm) } else { None },
                qk_norm_span: s.qk_norm_span,
                kv: KvSource::Cache,
                sinks: s.attn_sinks,
                alibi: s.alibi.is_some(),
                clip: s.clip_qkv,
            };
            standard_layer(
                b,
                &step,
                l,
                x,
                &layer,
                |b, h| b.scope("attn", |b| attention(b, &step, l, h, &attn)),
                |b, h| {
                    b.scope("ffn", |b| match &s.moe {
                        None if s.plain_ffn => plain_ffn(b, &step, l, h, s.activation),
                        None => gated_ffn(b, &step, l, h, s.activation),
                        Some(moe) => {
                            let act = s.activation;
                            let experts = ExpertParams {
                                gate_up: moe.gate_up,
                                act,
                                biases: moe.biases,
                                transposed: moe.transposed,
                                clamp: moe.clamp,
                            };
                            let routed = routed_experts(b, &step, l, h, &moe.router, &experts)?;
                            match &moe.shared {
                                None => Ok(routed),
                                Some(shared) => {
                                    let always = b.scope("shared", |b| {
                                        shared_expert(b, &step, l, h, shared, act)
                                    })?;
                                    Ok(b.add(routed, always)?)
                                }
                            }
                        }
                    })
                },
            )
        })?;
        if spec.shape.hidden_carry {
            step.add_output(out.hidden);
        }
        let logits = out.logits.ok_or(TraceError::NoProgram {
            program: Program::Step,
        })?;
        step.finish(b, logits)
    }
}

/// The checkpoint spellings most dense decoders share (Llama, Mistral, Qwen2, Qwen3, ...).
pub const STANDARD_DECODER_NAMES: NameTable = NameTable::new(&[
    crate::weights::spell(
        Role::TokenEmbed,
        "model.embed_tokens.weight",
        "token_embd.weight",
    ),
    crate::weights::spell(Role::Head, "lm_head.weight", "output.weight"),
    crate::weights::spell(Role::FinalNorm, "model.norm.weight", "output_norm.weight"),
    crate::weights::spell(
        Role::AttnNorm,
        "model.layers.{l}.input_layernorm.weight",
        "blk.{l}.attn_norm.weight",
    ),
    crate::weights::spell(
        Role::FfnNorm,
        "model.layers.{l}.post_attention_layernorm.weight",
        "blk.{l}.ffn_norm.weight",
    ),
    crate::weights::spell(
        Role::AttnQ,
        "model.layers.{l}.self_attn.q_proj.weight",
        "blk.{l}.attn_q.weight",
    ),
    crate::weights::spell(
        Role::AttnK,
        "model.layers.{l}.self_attn.k_proj.weight",
        "blk.{l}.attn_k.weight",
    ),
    crate::weights::spell(
        Role::AttnV,
        "model.layers.{l}.self_attn.v_proj.weight",
        "blk.{l}.attn_v.weight",
    ),
    crate::weights::spell(
        Role::AttnO,
        "model.layers.{l}.self_attn.o_proj.weight",
        "blk.{l}.attn_output.weight",
    ),
    crate::weights::spell(
        Role::AttnQBias,
        "model.layers.{l}.self_attn.q_proj.bias",
        "blk.{l}.attn_q.bias",
    ),
    crate::weights::spell(
        Role::AttnKBias,
        "model.layers.{l}.self_attn.k_proj.bias",
        "blk.{l}.attn_k.bias",
    ),
    crate::weights::spell(
        Role::AttnVBias,
        "model.layers.{l}.self_attn.v_proj.bias",
        "blk.{l}.attn_v.bias",
    ),
    crate::weights::spell(
        Role::AttnOBias,
        "model.layers.{l}.self_attn.o_proj.bias",
        "blk.{l}.attn_output.bias",
    ),
    crate::weights::spell(
        Role::QNorm,
        "model.layers.{l}.self_attn.q_norm.weight",
        "blk.{l}.attn_q_norm.weight",
    ),
    crate::weights::spell(
        Role::KNorm,
        "model.layers.{l}.self_attn.k_norm.weight",
        "blk.{l}.attn_k_norm.weight",
    ),
    crate::weights::spell(
        Role::FfnGate,
        "model.layers.{l}.mlp.gate_proj.weight",
        "blk.{l}.ffn_gate.weight",
    ),
    crate::weights::spell(
        Role::FfnUp,
        "model.layers.{l}.mlp.up_proj.weight",
        "blk.{l}.ffn_up.weight",
    ),
    crate::weights::spell(
        Role::FfnDown,
        "model.layers.{l}.mlp.down_proj.weight",
        "blk.{l}.ffn_down.weight",
    ),
]);

/// The hyperparameters every dense decoder config spells the same way.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderBasics {
    pub hidden: usize,
    pub layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub eps: f32,
    pub theta: f32,
    pub vocab: usize,
    pub max_positions: usize,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    /// Rotary features per head (`rope.dimension_count`; the head dim when absent).
    pub rope_dims: usize,
}

impl DecoderBasics {
    /// Reads the shared keys; the vocabulary size comes from the embedding tensor's rows so a
    /// config and its weights cannot disagree about it.
    pub fn read(
        cfg: &crate::config::ConfigReader,
        index: &dyn TensorIndex,
        names: &NameTable,
    ) -> Result<DecoderBasics, ModelError> {
        use crate::limits::{LAYERS, POSITIONS, WIDTH};
        let hidden = cfg.usize_at_most(key("hidden_size", "embedding_length"), WIDTH)?;
        let layers_key = key("num_hidden_layers", "block_count");
        let layers = cfg.usize_at_most(layers_key, LAYERS)?;
        let heads_key = key("num_attention_heads", "attention.head_count");
        let n_heads = cfg.usize_at_most(heads_key, WIDTH)?;
        let n_kv_heads = cfg
            .opt_usize_at_most(key("num_key_value_heads", "attention.head_count_kv"), WIDTH)?
            .unwrap_or(n_heads);
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(ModelError::Unsupported {
                key: "num_key_value_heads".into(),
                value: format!("{n_kv_heads} for {n_heads} query heads"),
                supported: "a positive divisor of the query head count",
            });
        }
        let head_dim_key = key("head_dim", "attention.key_length");
        let head_dim = match cfg.opt_usize_at_most(head_dim_key, WIDTH)? {
            Some(d) => d,
            None => hidden / n_heads,
        };
        let intermediate =
            cfg.usize_at_most(key("intermediate_size", "feed_forward_length"), WIDTH)?;
        let eps_key = key("rms_norm_eps", "attention.layer_norm_rms_epsilon");
        let eps = cfg.opt_f32(eps_key)?.unwrap_or(1e-6);
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(cfg.out_of_range(eps_key, eps, "a finite epsilon >= 0"));
        }
        // transformers 5 may spell the base only inside `rope_parameters`.
        let nested_theta = cfg
            .hf("rope_parameters")
            .and_then(|p| p.get("rope_theta"))
            .and_then(|t| t.as_f64())
            .map(|t| t as f32);
        let theta_key = key("rope_theta", "rope.freq_base");
        let theta = cfg.opt_f32(theta_key)?.or(nested_theta).unwrap_or(10000.0);
        check_rope_base(cfg, theta_key, theta)?;
        let max_positions = cfg
            .opt_usize_at_most(key("max_position_embeddings", "context_length"), POSITIONS)?
            .unwrap_or(2048);
        let checked = DecoderBasics::check_tensors(cfg, index, names, layers_key, layers, hidden)?;
        let (vocab, bos_id, eos_ids) = (checked.vocab, checked.bos_id, checked.eos_ids);
        let rope_dims_key = key("", "rope.dimension_count");
        let rope_dims = cfg
            .opt_usize_at_most(rope_dims_key, WIDTH)?
            .unwrap_or(head_dim);
        let partial_key = key("partial_rotary_factor", "");
        // transformers 5 may spell it only inside `rope_parameters` (Phi-3).
        let nested_partial = cfg
            .hf("rope_parameters")
            .and_then(|p| p.get("partial_rotary_factor"))
            .and_then(|f| f.as_f64())
            .map(|f| f as f32);
        let partial = cfg.opt_f32(partial_key)?.or(nested_partial);
        // The key the rotary feature count came from, for a refusal.
        let rope_source = match (partial, cfg.opt_usize(rope_dims_key)?) {
            (Some(_), _) => partial_key,
            (None, Some(_)) => rope_dims_key,
            (None, None) => head_dim_key,
        };
        let rope_dims = match partial {
            Some(f) if f.is_finite() && f > 0.0 && f <= 1.0 => ((head_dim as f32) * f) as usize,
            Some(f) => return Err(cfg.out_of_range(partial_key, f, "a fraction in (0, 1]")),
            None => rope_dims,
        };
        if rope_dims == 0 || rope_dims % 2 != 0 || rope_dims > head_dim {
            return Err(cfg.out_of_range(
                rope_source,
                rope_dims,
                "an even number of rotary features, at most the head dim",
            ));
        }
        Ok(DecoderBasics {
            hidden,
            layers,
            n_heads,
            n_kv_heads,
            head_dim,
            intermediate,
            eps,
            theta,
            vocab,
            max_positions,
            bos_id,
            eos_ids,
            rope_dims,
        })
    }
}

/// What [`DecoderBasics::check_tensors`] reads from the tensors and the special-token keys.
pub struct CheckedVocab {
    /// The embedding's rows.
    pub vocab: usize,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
}

impl DecoderBasics {
    /// The layer count (`layers`, read at `layers_key`) against the layer tensors, the vocabulary
    /// from the embedding's rows against the config's and the tokenizer's, and the special
    /// tokens: the checks [`DecoderBasics::read`] makes after reading its keys, for a family
    /// whose config spells them otherwise (MPT's `d_model`, BLOOM's `n_layer`).
    pub fn check_tensors(
        cfg: &crate::config::ConfigReader,
        index: &dyn TensorIndex,
        names: &NameTable,
        layers_key: Key,
        layers: usize,
        hidden: usize,
    ) -> Result<CheckedVocab, ModelError> {
        // Every layer's first norm: the input norm, or the attention output's norm in a family
        // with no input norms (OLMo 2).
        let first_norm = match names.name(cfg.kind(), Some(0), Role::AttnNorm) {
            Some(_) => Role::AttnNorm,
            None => Role::PostAttnNorm,
        };
        crate::consistency::check_layer_count(cfg, layers_key, layers, index, names, first_norm)?;
        let embed_name = names
            .name(cfg.kind(), None, Role::TokenEmbed)
            .unwrap_or_default();
        let embed = index
            .tensor_meta(&embed_name)
            .ok_or(ModelError::MissingTensor {
                name: embed_name.clone(),
                role: "w.embed".into(),
            })?;
        let vocab = match embed.shape.as_slice() {
            [v, d] if *d == hidden as u64 && usize::try_from(*v).is_ok() => *v as usize,
            _ => {
                return Err(ModelError::TensorShape {
                    name: embed_name,
                    expected: vec![0, hidden as u64],
                    found: embed.shape,
                });
            }
        };
        crate::consistency::check_vocab(cfg, &embed_name, vocab)?;
        let bos_id = cfg
            .opt_ids(key("bos_token_id", "tokenizer.ggml.bos_token_id"))?
            .first()
            .copied();
        let eos_ids = cfg.opt_ids(key("eos_token_id", "tokenizer.ggml.eos_token_id"))?;
        Ok(CheckedVocab {
            vocab,
            bos_id,
            eos_ids,
        })
    }
}

/// Refuses a rotary base the frequencies `1 / theta^(2i / dims)` cannot come from: zero,
/// negative or not finite.
pub fn check_rope_base(
    cfg: &crate::config::ConfigReader,
    k: crate::config::Key,
    theta: f32,
) -> Result<(), ModelError> {
    if theta.is_finite() && theta > 0.0 {
        Ok(())
    } else {
        Err(cfg.out_of_range(k, theta, "a finite rotary base > 0"))
    }
}

impl DenseDecoderSpec {
    /// The plain pre-norm SwiGLU decoder with one rotary table and full attention in every
    /// layer; families change the fields where they differ.
    pub fn standard(
        family: &'static str,
        basics: &DecoderBasics,
        rope: RopeConfig,
        rope_style: RopeStyle,
    ) -> DenseDecoderSpec {
        DenseDecoderSpec {
            config: ModelConfig {
                family,
                kind: crate::model::ModelKind::Decoder,
                vocab_size: basics.vocab,
                hidden_size: basics.hidden,
                n_layers: basics.layers,
                max_positions: basics.max_positions,
                bos_id: basics.bos_id,
                eos_ids: basics.eos_ids.clone(),
                chat_format: None,
            },
            n_heads: basics.n_heads,
            n_kv_heads: basics.n_kv_heads,
            head_dim: basics.head_dim,
            intermediate: basics.intermediate,
            norm: Norm::rms(basics.eps),
            pre_norms: true,
            sandwich_norms: false,
            qk_norm: false,
            qk_norm_span: QkNormSpan::Head,
            activation: Activation::Silu,
            rope_style,
            ropes: vec![rope],
            layers: vec![
                LayerAttention {
                    rope_table: Some(0),
                    window: None
                };
                basics.layers
            ],
            attn_scale: 1.0 / (basics.head_dim as f32).sqrt(),
            attn_softcap: None,
            embed_scale: None,
            final_softcap: None,
            residual_scale: None,
            logit_divisor: None,
            qk_rows_interleaved: false,
            moe: None,
            qkv: QkvLayout::Separate,
            fused_gate_up: false,
            attn_sinks: false,
            alibi: None,
            clip_qkv: None,
            plain_ffn: false,
            embed_norm: false,
            biases: false,
        }
    }

    /// [`DenseDecoderSpec::standard`] with ALiBi of largest bias `max_bias` in every layer in
    /// place of rotary embeddings: no rotary table, and no layer turns its queries and keys
    /// (the basics' `theta` and `rope_dims` are not read).
    pub fn alibi(family: &'static str, basics: &DecoderBasics, max_bias: f32) -> DenseDecoderSpec {
        let unused = RopeConfig::plain(1.0, basics.head_dim);
        let mut spec = DenseDecoderSpec::standard(family, basics, unused, RopeStyle::HalfSplit);
        spec.alibi = Some(max_bias);
        spec.ropes.clear();
        for layer in &mut spec.layers {
            layer.rope_table = None;
        }
        spec
    }
}

/// Builds a standard dense decoder from its config: the shared keys, one rotary table with the
/// config's scaling, the standard name table; `adjust` changes what the family does differently.
pub fn build_standard(
    raw: &crate::config::RawConfig,
    index: &dyn TensorIndex,
    family: &'static str,
    adjust: impl FnOnce(&crate::config::ConfigReader, &mut DenseDecoderSpec) -> Result<(), ModelError>,
) -> Result<crate::model::ModelParts, ModelError> {
    build_standard_named(raw, index, family, &STANDARD_DECODER_NAMES, adjust)
}

/// [`build_standard`] over the family's own name table (one extending the standard spellings).
pub fn build_standard_named(
    raw: &crate::config::RawConfig,
    index: &dyn TensorIndex,
    family: &'static str,
    names: &NameTable,
    adjust: impl FnOnce(&crate::config::ConfigReader, &mut DenseDecoderSpec) -> Result<(), ModelError>,
) -> Result<crate::model::ModelParts, ModelError> {
    let cfg = crate::config::ConfigReader::new(raw);
    let basics = DecoderBasics::read(&cfg, index, names)?;
    let rope = RopeConfig {
        theta: basics.theta,
        dims: basics.rope_dims,
        scaling: RopeConfig::read_scaling(&cfg, basics.rope_dims)?,
    };
    let mut spec = DenseDecoderSpec::standard(family, &basics, rope, RopeStyle::HalfSplit);
    adjust(&cfg, &mut spec)?;
    Ok(crate::model::ModelParts {
        model: Box::new(DenseDecoder::build(spec, index, names, cfg.kind())?),
    })
}
