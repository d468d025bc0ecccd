//! Reference models at their real dimensions: published configs and synthetic tensor indexes
//! (shapes and stored types, no bytes), shared by the real-dimension and feature-matrix tests.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::PathBuf;

use std::num::NonZeroU32;

use poot_formats::{
    DenseType, GgmlType, GptqFormat, GptqZeros, GroupSize, MatrixShape, PackedFormat, Presence,
    StoredType,
};
use poot_models::weights::{PackedLinearMeta, TensorIndex, TensorMeta};
use poot_models::{Model, ModelError, Registry};

/// Tokens in one prefill chunk.
pub const PREFILL_TOKENS: usize = 512;

/// The most new tokens a traced step may carry.
pub const MAX_STEP_TOKENS: u64 = 4096;

/// The tensors of a dense decoder checkpoint, as its config implies them.
pub struct DecoderShape {
    pub hidden: u64,
    pub layers: usize,
    pub n_heads: u64,
    pub n_kv_heads: u64,
    pub head_dim: u64,
    pub intermediate: u64,
    pub vocab: u64,
    pub tied: bool,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    /// Gemma's four norms per layer (pre/post attention, pre/post feed-forward).
    pub sandwich_norms: bool,
}

/// How a reference stores its seven projections per layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Projections {
    /// One tensor each (dense words or GGUF blocks).
    Stored(StoredType),
    /// The component tensors of a Hugging Face packed layout (GPTQ, AWQ, FP8, FP4).
    Packed(PackedFormat),
}

impl From<StoredType> for Projections {
    fn from(t: StoredType) -> Projections {
        Projections::Stored(t)
    }
}

/// A checkpoint index with no bytes: every tensor's shape and stored type, and the linears
/// stored in a component format.
pub struct SyntheticIndex {
    pub tensors: HashMap<String, TensorMeta>,
    pub packed: HashMap<String, PackedLinearMeta>,
}

impl TensorIndex for SyntheticIndex {
    fn tensor_meta(&self, name: &str) -> Option<TensorMeta> {
        self.tensors.get(name).cloned()
    }

    fn packed_linear(&self, prefix: &str) -> Result<Option<PackedLinearMeta>, ModelError> {
        Ok(self.packed.get(prefix).cloned())
    }
}

impl SyntheticIndex {
    /// The Hugging Face tensors of `shape`: norms, biases, embedding and head in `dense`, the
    /// seven projections of every layer in `projections`.
    pub fn hugging_face(
        shape: &DecoderShape,
        dense: StoredType,
        projections: Projections,
        experts: Option<Experts>,
    ) -> Self {
        let mut packed = HashMap::new();
        let mut tensors = HashMap::new();
        let mut put = |name: String, dims: &[u64], stored: StoredType| {
            tensors.insert(
                name,
                TensorMeta {
                    shape: dims.to_vec(),
                    stored,
                },
            );
        };
        let (d, ff) = (shape.hidden, shape.intermediate);
        let q_out = shape.n_heads * shape.head_dim;
        let kv_out = shape.n_kv_heads * shape.head_dim;
        put("model.embed_tokens.weight".into(), &[shape.vocab, d], dense);
        if !shape.tied {
            put("lm_head.weight".into(), &[shape.vocab, d], dense);
        }
        put("model.norm.weight".into(), &[d], dense);
        for l in 0..shape.layers {
            let p = format!("model.layers.{l}");
            put(format!("{p}.input_layernorm.weight"), &[d], dense);
            put(format!("{p}.post_attention_layernorm.weight"), &[d], dense);
            if shape.sandwich_norms {
                put(format!("{p}.pre_feedforward_layernorm.weight"), &[d], dense);
                put(
                    format!("{p}.post_feedforward_layernorm.weight"),
                    &[d],
                    dense,
                );
            }
            let mut linears = vec![
                ("self_attn.q_proj".to_string(), q_out, d),
                ("self_attn.k_proj".to_string(), kv_out, d),
                ("self_attn.v_proj".to_string(), kv_out, d),
                ("self_attn.o_proj".to_string(), d, q_out),
            ];
            match experts {
                None => linears.extend([
                    ("mlp.gate_proj".to_string(), ff, d),
                    ("mlp.up_proj".to_string(), ff, d),
                    ("mlp.down_proj".to_string(), d, ff),
                ]),
                Some(Experts::PerExpert {
                    count,
                    expert_ff,
                    router,
                    gate,
                    up,
                    down,
                }) => {
                    put(format!("{p}.{router}"), &[count, d], dense);
                    for e in 0..count {
                        let named = |n: &str| n.replace("{e}", &e.to_string());
                        linears.extend([
                            (named(gate), expert_ff, d),
                            (named(up), expert_ff, d),
                            (named(down), d, expert_ff),
                        ]);
                    }
                }
                Some(Experts::GptOssMxfp4 { count, expert_ff }) => {
                    let u8s = StoredType::Dense(DenseType::U8);
                    put(format!("{p}.mlp.router.weight"), &[count, d], dense);
                    put(format!("{p}.mlp.router.bias"), &[count], dense);
                    for (stack, out, inner) in [
                        ("gate_up_proj", 2 * expert_ff, d),
                        ("down_proj", d, expert_ff),
                    ] {
                        let e = format!("{p}.mlp.experts.{stack}");
                        put(format!("{e}_blocks"), &[count, out, inner / 32, 16], u8s);
                        put(format!("{e}_scales"), &[count, out, inner / 32], u8s);
                        put(format!("{e}_bias"), &[count, out], dense);
                    }
                    put(format!("{p}.self_attn.sinks"), &[shape.n_heads], dense);
                    put(format!("{p}.self_attn.o_proj.bias"), &[d], dense);
                }
            }
            for (proj, rows, cols) in linears {
                match projections {
                    Projections::Stored(t) => put(format!("{p}.{proj}.weight"), &[rows, cols], t),
                    Projections::Packed(format) => {
                        let prefix = format!("{p}.{proj}");
                        let components = format
                            .components(MatrixShape::new(rows as usize, cols as usize))
                            .unwrap()
                            .into_iter()
                            .filter(|c| c.presence == Presence::Required)
                            .map(|c| (c.name, format!("{prefix}.{}", c.name)))
                            .collect();
                        packed.insert(
                            prefix,
                            PackedLinearMeta {
                                format,
                                shape: [rows, cols],
                                components,
                            },
                        );
                    }
                }
            }
            if shape.qkv_bias {
                put(format!("{p}.self_attn.q_proj.bias"), &[q_out], dense);
                put(format!("{p}.self_attn.k_proj.bias"), &[kv_out], dense);
                put(format!("{p}.self_attn.v_proj.bias"), &[kv_out], dense);
            }
            if shape.qk_norm {
                put(
                    format!("{p}.self_attn.q_norm.weight"),
                    &[shape.head_dim],
                    dense,
                );
                put(
                    format!("{p}.self_attn.k_norm.weight"),
                    &[shape.head_dim],
                    dense,
                );
            }
        }
        SyntheticIndex { tensors, packed }
    }
}

pub const BF16: StoredType = StoredType::Dense(DenseType::BF16);
pub const Q4_K: StoredType = StoredType::Ggml(GgmlType::Q4_K);

/// A reference model: its `config.json` and the tensors that config implies.
pub struct Reference {
    pub name: &'static str,
    pub config_json: String,
    pub shape: DecoderShape,
    pub projections: Projections,
    /// Routed experts in place of every layer's feed-forward.
    pub experts: Option<Experts>,
}

/// A mixture-of-experts checkpoint's expert tensors, as its family's Hugging Face layout names
/// them.
#[derive(Clone, Copy, Debug)]
pub enum Experts {
    /// A router `[count, hidden]` and one gate, up and down tensor per expert, in the
    /// projections' type: names under the layer's prefix (`model.layers.{l}.`), `{e}` the
    /// expert.
    PerExpert {
        count: u64,
        expert_ff: u64,
        router: &'static str,
        gate: &'static str,
        up: &'static str,
        down: &'static str,
    },
    /// gpt-oss as released: a biased router, MXFP4 stacks of every expert (`{stack}_blocks` U8
    /// `[count, out, in / 32, 16]`, `{stack}_scales` U8 `[count, out, in / 32]`, gate and up
    /// rows interleaved in one stack) with BF16 biases, attention sinks and an output bias.
    GptOssMxfp4 { count: u64, expert_ff: u64 },
}

pub fn qwen2_5_0_5b() -> Reference {
    Reference {
        name: "Qwen2.5-0.5B",
        config_json: r#"{
            "model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
            "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864,
            "vocab_size": 151936, "tie_word_embeddings": true, "max_position_embeddings": 32768,
            "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "hidden_act": "silu",
            "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16"
        }"#
        .into(),
        shape: DecoderShape {
            hidden: 896,
            layers: 24,
            n_heads: 14,
            n_kv_heads: 2,
            head_dim: 64,
            intermediate: 4864,
            vocab: 151936,
            tied: true,
            qkv_bias: true,
            qk_norm: false,
            sandwich_norms: false,
        },
        projections: Projections::Stored(BF16),
        experts: None,
    }
}

pub fn qwen3_0_6b() -> Reference {
    Reference {
        name: "Qwen3-0.6B",
        config_json: r#"{
            "model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
            "intermediate_size": 3072, "vocab_size": 151936, "tie_word_embeddings": true,
            "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
            "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151645,
            "torch_dtype": "bfloat16"
        }"#
        .into(),
        shape: DecoderShape {
            hidden: 1024,
            layers: 28,
            n_heads: 16,
            n_kv_heads: 8,
            head_dim: 128,
            intermediate: 3072,
            vocab: 151936,
            tied: true,
            qkv_bias: false,
            qk_norm: true,
            sandwich_norms: false,
        },
        projections: Projections::Stored(BF16),
        experts: None,
    }
}

pub const Q4_1: StoredType = StoredType::Ggml(GgmlType::Q4_1);
pub const Q5_0: StoredType = StoredType::Ggml(GgmlType::Q5_0);

/// SmolLM2-135M with its projections in Q4_1, as the packaged GGUF stores them.
pub fn smollm2_135m() -> Reference {
    Reference {
        name: "SmolLM2-135M",
        config_json: r#"{
            "model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30,
            "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
            "vocab_size": 49152, "tie_word_embeddings": true, "max_position_embeddings": 8192,
            "rope_theta": 100000.0, "rms_norm_eps": 1e-05, "hidden_act": "silu",
            "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"
        }"#
        .into(),
        shape: DecoderShape {
            hidden: 576,
            layers: 30,
            n_heads: 9,
            n_kv_heads: 3,
            head_dim: 64,
            intermediate: 1536,
            vocab: 49152,
            tied: true,
            qkv_bias: false,
            qk_norm: false,
            sandwich_norms: false,
        },
        projections: Projections::Stored(Q4_1),
        experts: None,
    }
}

/// Gemma 3 270M with its projections in Q5_0 (most of the packaged Q4_K_M GGUF's projections:
/// its 640-wide rows are not a multiple of the K-quants' 256-element blocks).
pub fn gemma3_270m() -> Reference {
    Reference {
        name: "Gemma-3-270M",
        config_json: r#"{
            "model_type": "gemma3_text", "hidden_size": 640, "num_hidden_layers": 18,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
            "intermediate_size": 2048, "vocab_size": 262144, "max_position_embeddings": 32768,
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
            "sliding_window": 512, "sliding_window_pattern": 6, "query_pre_attn_scalar": 256,
            "rms_norm_eps": 1e-06, "hidden_activation": "gelu_pytorch_tanh",
            "attn_logit_softcapping": null, "final_logit_softcapping": null,
            "bos_token_id": 2, "eos_token_id": [1, 106], "torch_dtype": "bfloat16"
        }"#
        .into(),
        shape: DecoderShape {
            hidden: 640,
            layers: 18,
            n_heads: 4,
            n_kv_heads: 1,
            head_dim: 256,
            intermediate: 2048,
            vocab: 262144,
            tied: true,
            qkv_bias: false,
            qk_norm: true,
            sandwich_norms: true,
        },
        projections: Projections::Stored(Q5_0),
        experts: None,
    }
}

pub const LLAMA_3_1_8B_CONFIG: &str = r#"{
    "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 128256, "tie_word_embeddings": false, "max_position_embeddings": 131072,
    "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "hidden_act": "silu",
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16"
}"#;

pub const LLAMA_3_1_8B_SHAPE: DecoderShape = DecoderShape {
    hidden: 4096,
    layers: 32,
    n_heads: 32,
    n_kv_heads: 8,
    head_dim: 128,
    intermediate: 14336,
    vocab: 128256,
    tied: false,
    qkv_bias: false,
    qk_norm: false,
    sandwich_norms: false,
};

pub fn llama_3_1_8b() -> Reference {
    Reference {
        name: "Llama-3.1-8B",
        config_json: LLAMA_3_1_8B_CONFIG.into(),
        shape: LLAMA_3_1_8B_SHAPE,
        projections: Projections::Stored(BF16),
        experts: None,
    }
}

/// The 8B with its seven projections stored as GGUF Q4_K blocks (embedding, head and norms
/// BF16): the family reads each weight's type from the index.
pub fn llama_3_1_8b_q4_k() -> Reference {
    Reference {
        name: "Llama-3.1-8B-Q4_K",
        config_json: LLAMA_3_1_8B_CONFIG.into(),
        shape: LLAMA_3_1_8B_SHAPE,
        projections: Projections::Stored(Q4_K),
        experts: None,
    }
}

/// The 8B with its seven projections in GPTQ int4 (group 128, act-order, as published 8B GPTQ
/// checkpoints store them; embedding, head and norms BF16): `qweight`, `qzeros`, `scales` and
/// `g_idx` of every projection bound as one component-format constant.
pub fn llama_3_1_8b_gptq() -> Reference {
    Reference {
        name: "Llama-3.1-8B-GPTQ",
        config_json: LLAMA_3_1_8B_CONFIG.into(),
        shape: LLAMA_3_1_8B_SHAPE,
        projections: Projections::Packed(PackedFormat::Gptq(GptqFormat {
            group: GroupSize::Elems(NonZeroU32::new(128).unwrap()),
            act_order: true,
            zeros: GptqZeros::V1PlusOne,
        })),
        experts: None,
    }
}

/// A one-layer Llama-shaped decoder whose projections are stored as `projections`.
pub fn one_layer(name: &'static str, projections: Projections) -> Reference {
    Reference {
        name,
        config_json: r#"{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 1,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
            "vocab_size": 512, "tie_word_embeddings": false, "max_position_embeddings": 256,
            "rope_theta": 10000.0, "rms_norm_eps": 1e-05}"#
            .to_string(),
        shape: DecoderShape {
            hidden: 256,
            layers: 1,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 64,
            intermediate: 512,
            vocab: 512,
            tied: false,
            qkv_bias: false,
            qk_norm: false,
            sandwich_norms: false,
        },
        projections,
        experts: None,
    }
}

pub fn gemma3_27b() -> Reference {
    Reference {
        name: "Gemma-3-27B",
        config_json: r#"{
            "model_type": "gemma3_text", "hidden_size": 5376, "num_hidden_layers": 62,
            "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
            "intermediate_size": 21504, "vocab_size": 262208, "max_position_embeddings": 131072,
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            "sliding_window": 1024, "sliding_window_pattern": 6, "query_pre_attn_scalar": 168,
            "rms_norm_eps": 1e-06, "hidden_activation": "gelu_pytorch_tanh",
            "attn_logit_softcapping": null, "final_logit_softcapping": null,
            "bos_token_id": 2, "eos_token_id": [1, 106], "torch_dtype": "bfloat16"
        }"#
        .into(),
        shape: DecoderShape {
            hidden: 5376,
            layers: 62,
            n_heads: 32,
            n_kv_heads: 16,
            head_dim: 128,
            intermediate: 21504,
            vocab: 262208,
            tied: true,
            qkv_bias: false,
            qk_norm: true,
            sandwich_norms: true,
        },
        projections: Projections::Stored(BF16),
        experts: None,
    }
}

/// Qwen3-30B-A3B: 128 routed experts of 768 features a layer, 8 per token, renormalized.
pub fn qwen3_30b_a3b() -> Reference {
    Reference {
        name: "Qwen3-30B-A3B",
        config_json: r#"{
            "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
            "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
            "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
            "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
            "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 40960,
            "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "hidden_act": "silu",
            "tie_word_embeddings": false, "attention_bias": false, "use_sliding_window": false,
            "sliding_window": null, "bos_token_id": 151643, "eos_token_id": 151645,
            "torch_dtype": "bfloat16"
        }"#
        .into(),
        shape: DecoderShape {
            hidden: 2048,
            layers: 48,
            n_heads: 32,
            n_kv_heads: 4,
            head_dim: 128,
            intermediate: 6144,
            vocab: 151936,
            tied: false,
            qkv_bias: false,
            qk_norm: true,
            sandwich_norms: false,
        },
        projections: Projections::Stored(BF16),
        experts: Some(Experts::PerExpert {
            count: 128,
            expert_ff: 768,
            router: "mlp.gate.weight",
            gate: "mlp.experts.{e}.gate_proj",
            up: "mlp.experts.{e}.up_proj",
            down: "mlp.experts.{e}.down_proj",
        }),
    }
}

/// Mixtral with `hidden`, `layers`, `n_heads`, `ff` and `vocab` as published, 8 experts, 2 a
/// token.
fn mixtral(
    name: &'static str,
    hidden: u64,
    layers: usize,
    n_heads: u64,
    ff: u64,
    vocab: u64,
    positions: u64,
) -> Reference {
    Reference {
        name,
        config_json: format!(
            r#"{{
            "model_type": "mixtral", "hidden_size": {hidden}, "num_hidden_layers": {layers},
            "num_attention_heads": {n_heads}, "num_key_value_heads": 8,
            "intermediate_size": {ff}, "num_local_experts": 8, "num_experts_per_tok": 2,
            "vocab_size": {vocab}, "max_position_embeddings": {positions},
            "rope_theta": 1000000.0, "rms_norm_eps": 1e-05, "sliding_window": null,
            "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1,
            "eos_token_id": 2, "torch_dtype": "bfloat16"
        }}"#
        ),
        shape: DecoderShape {
            hidden,
            layers,
            n_heads,
            n_kv_heads: 8,
            head_dim: hidden / n_heads,
            intermediate: ff,
            vocab,
            tied: false,
            qkv_bias: false,
            qk_norm: false,
            sandwich_norms: false,
        },
        projections: Projections::Stored(BF16),
        // Mixtral's experts under `block_sparse_moe`: `w1` the gate, `w3` the up, `w2` the down.
        experts: Some(Experts::PerExpert {
            count: 8,
            expert_ff: ff,
            router: "block_sparse_moe.gate.weight",
            gate: "block_sparse_moe.experts.{e}.w1",
            up: "block_sparse_moe.experts.{e}.w3",
            down: "block_sparse_moe.experts.{e}.w2",
        }),
    }
}

pub fn mixtral_8x7b() -> Reference {
    mixtral("Mixtral-8x7B", 4096, 32, 32, 14336, 32000, 32768)
}

/// Its expert stacks (8 x 16384 x 6144 BF16, 1.6 GB a projection) are over wgpu's single-buffer
/// limit.
pub fn mixtral_8x22b() -> Reference {
    mixtral("Mixtral-8x22B", 6144, 56, 48, 16384, 32000, 65536)
}

/// gpt-oss-20b as released: MXFP4 expert stacks (32 experts, 4 a token), attention sinks, every
/// other layer sliding over 128 positions, YaRN.
pub fn gpt_oss_20b() -> Reference {
    let layer_types = (0..24)
        .map(|l| {
            if l % 2 == 0 {
                "\"sliding_attention\""
            } else {
                "\"full_attention\""
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    Reference {
        name: "gpt-oss-20b",
        config_json: format!(
            r#"{{
            "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
            "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
            "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4,
            "vocab_size": 201088, "max_position_embeddings": 131072, "rope_theta": 150000,
            "rope_scaling": {{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                "beta_slow": 1.0, "truncate": false, "original_max_position_embeddings": 4096}},
            "sliding_window": 128, "layer_types": [{layer_types}], "attention_bias": true,
            "rms_norm_eps": 1e-05, "hidden_act": "silu", "swiglu_limit": 7.0,
            "tie_word_embeddings": false, "eos_token_id": 200002, "pad_token_id": 199999,
            "torch_dtype": "bfloat16", "quantization_config": {{"quant_method": "mxfp4"}}
        }}"#
        ),
        shape: DecoderShape {
            hidden: 2880,
            layers: 24,
            n_heads: 64,
            n_kv_heads: 8,
            head_dim: 64,
            intermediate: 2880,
            vocab: 201088,
            tied: false,
            qkv_bias: true,
            qk_norm: false,
            sandwich_norms: false,
        },
        projections: Projections::Stored(BF16),
        experts: Some(Experts::GptOssMxfp4 {
            count: 32,
            expert_ff: 2880,
        }),
    }
}

/// Builds the reference's model through the registry, from its config (read back from a
/// `config.json` on disk, as a checkpoint directory holds it) and its synthetic index.
pub fn build(r: &Reference) -> Box<dyn Model> {
    // One directory per build: tests run in parallel and may build the same reference.
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("real_dimensions")
        .join(format!("{}-{}-{n}", r.name, std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(poot_load::CONFIG_FILE), &r.config_json).unwrap();
    let config = poot_load::peek_config(&dir).unwrap();
    let index = SyntheticIndex::hugging_face(&r.shape, BF16, r.projections, r.experts);
    let registry = Registry::builtin().unwrap();
    let family = registry.resolve(&config).unwrap();
    (family.build)(&config, &index)
        .unwrap_or_else(|e| panic!("{}: build: {e}", r.name))
        .model
}
