//! Reference models at their real dimensions plan for the PTX preset: each is built from its
//! published config and a synthetic tensor index (shapes and stored types derived from the
//! config, no bytes), traced for a decode step and a 512-token prefill chunk over a cache of the
//! model's whole context, and compiled. A device whose single-buffer limit is below the 8B's
//! embedding table refuses it, naming the constant and both sizes.
//!
//! Run with `--nocapture` to see each graph's dispatch and kernel counts and the time spent.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use poot_formats::{DenseType, GgmlType, StoredType};
use poot_graph_ir::TraceLimits;
use poot_graph_plan::{BufferRole, Plan, PlanError, Target, compile};
use poot_models::weights::{TensorIndex, TensorMeta};
use poot_models::{Model, Registry, StepShape, StepSpec};

/// Tokens in one prefill chunk.
const PREFILL_TOKENS: usize = 512;

/// The most new tokens a traced step may carry.
const MAX_STEP_TOKENS: u64 = 4096;

/// The tensors of a dense decoder checkpoint, as its config implies them.
struct DecoderShape {
    hidden: u64,
    layers: usize,
    n_heads: u64,
    n_kv_heads: u64,
    head_dim: u64,
    intermediate: u64,
    vocab: u64,
    tied: bool,
    qkv_bias: bool,
    qk_norm: bool,
    /// Gemma's four norms per layer (pre/post attention, pre/post feed-forward).
    sandwich_norms: bool,
}

/// A checkpoint index with no bytes: every tensor's shape and stored type.
struct SyntheticIndex {
    tensors: HashMap<String, TensorMeta>,
}

impl TensorIndex for SyntheticIndex {
    fn tensor_meta(&self, name: &str) -> Option<TensorMeta> {
        self.tensors.get(name).cloned()
    }
}

impl SyntheticIndex {
    /// The Hugging Face tensors of `shape`: norms, biases, embedding and head in `dense`, the
    /// seven projections of every layer in `projections`.
    fn hugging_face(shape: &DecoderShape, dense: StoredType, projections: StoredType) -> Self {
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
            for (proj, rows, cols) in [
                ("self_attn.q_proj", q_out, d),
                ("self_attn.k_proj", kv_out, d),
                ("self_attn.v_proj", kv_out, d),
                ("self_attn.o_proj", d, q_out),
                ("mlp.gate_proj", ff, d),
                ("mlp.up_proj", ff, d),
                ("mlp.down_proj", d, ff),
            ] {
                put(format!("{p}.{proj}.weight"), &[rows, cols], projections);
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
        SyntheticIndex { tensors }
    }
}

const BF16: StoredType = StoredType::Dense(DenseType::BF16);
const Q4_K: StoredType = StoredType::Ggml(GgmlType::Q4_K);

/// A reference model: its `config.json` and the tensors that config implies.
struct Reference {
    name: &'static str,
    config_json: String,
    shape: DecoderShape,
    projections: StoredType,
}

fn qwen2_5_0_5b() -> Reference {
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
        projections: BF16,
    }
}

fn qwen3_0_6b() -> Reference {
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
        projections: BF16,
    }
}

const LLAMA_3_1_8B_CONFIG: &str = r#"{
    "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 128256, "tie_word_embeddings": false, "max_position_embeddings": 131072,
    "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "hidden_act": "silu",
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16"
}"#;

const LLAMA_3_1_8B_SHAPE: DecoderShape = DecoderShape {
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

fn llama_3_1_8b() -> Reference {
    Reference {
        name: "Llama-3.1-8B",
        config_json: LLAMA_3_1_8B_CONFIG.into(),
        shape: LLAMA_3_1_8B_SHAPE,
        projections: BF16,
    }
}

/// The 8B with its seven projections stored as GGUF Q4_K blocks (embedding, head and norms
/// BF16): the family reads each weight's type from the index.
fn llama_3_1_8b_q4_k() -> Reference {
    Reference {
        name: "Llama-3.1-8B-Q4_K",
        config_json: LLAMA_3_1_8B_CONFIG.into(),
        shape: LLAMA_3_1_8B_SHAPE,
        projections: Q4_K,
    }
}

fn gemma3_27b() -> Reference {
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
        projections: BF16,
    }
}

/// Builds the reference's model through the registry, from its config (read back from a
/// `config.json` on disk, as a checkpoint directory holds it) and its synthetic index.
fn build(r: &Reference) -> Box<dyn Model> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("real_dimensions")
        .join(r.name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(poot_load::CONFIG_FILE), &r.config_json).unwrap();
    let config = poot_load::peek_config(&dir).unwrap();
    let index = SyntheticIndex::hugging_face(&r.shape, BF16, r.projections);
    let registry = Registry::builtin().unwrap();
    let family = registry.resolve(&config).unwrap();
    (family.build)(&config, &index)
        .unwrap_or_else(|e| panic!("{}: build: {e}", r.name))
        .model
}

/// Bytes of the plan's buffers of each kind: constants, states, scratch.
fn buffer_bytes(plan: &Plan) -> (u64, u64, u64) {
    let mut sums = (0, 0, 0);
    for b in &plan.buffers {
        match b.role {
            BufferRole::Const { .. } | BufferRole::Table { .. } => sums.0 += b.size_bytes,
            BufferRole::State { .. } => sums.1 += b.size_bytes,
            BufferRole::Scratch => sums.2 += b.size_bytes,
            BufferRole::Slot { .. } => {}
        }
    }
    sums
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Traces `r`'s decode step and a prefill chunk over its whole context and plans both for the
/// PTX preset; prints each graph's counts and times.
fn plans_at_real_dimensions(r: Reference) {
    let t0 = Instant::now();
    let model = build(&r);
    let build_time = t0.elapsed();
    let capacity = model.config().max_positions;
    let target = Target::ptx_preset();
    println!(
        "{}: built in {:.2?} ({} layers, context {capacity})",
        r.name,
        build_time,
        model.config().n_layers
    );
    for (what, tokens) in [("decode", 1), ("prefill", PREFILL_TOKENS)] {
        let spec = StepSpec::step(StepShape::new(1, tokens, capacity));
        let t = Instant::now();
        let graph = model
            .trace(&spec, TraceLimits::standard(MAX_STEP_TOKENS))
            .unwrap_or_else(|e| panic!("{} {what}: trace: {e}", r.name));
        let trace_time = t.elapsed();
        let t = Instant::now();
        let plan = compile(&graph, &target)
            .unwrap_or_else(|e| panic!("{} {what} on {}: {e}", r.name, target.backend));
        let plan_time = t.elapsed();
        for k in &plan.kernels {
            k.validate().unwrap();
        }
        for d in &plan.dispatches {
            assert_eq!(d.args.len(), plan.kernels[d.kernel].params.len());
            assert!(d.grid[0] >= 1 && d.grid[0] <= target.limits.max_groups_x);
        }
        assert_eq!(plan.states.len(), 2 * model.config().n_layers);
        assert_eq!(plan.states.len(), graph.states().count());
        let (const_bytes, state_bytes, scratch_bytes) = buffer_bytes(&plan);
        println!(
            "{} {what} (tokens {tokens}, capacity {capacity}) on {}: {} eqns, {} dispatches, \
             {} kernels; consts {:.2} GiB, states {:.2} GiB, scratch {:.2} GiB; \
             trace {trace_time:.2?}, plan {plan_time:.2?}",
            r.name,
            target.backend,
            graph.eqns().len(),
            plan.dispatches.len(),
            plan.kernels.len(),
            gib(const_bytes),
            gib(state_bytes),
            gib(scratch_bytes),
        );
    }
    let total: Duration = t0.elapsed();
    println!("{}: total {total:.2?}", r.name);
}

#[test]
fn qwen2_5_0_5b_plans_at_real_dimensions() {
    plans_at_real_dimensions(qwen2_5_0_5b());
}

#[test]
fn qwen3_0_6b_plans_at_real_dimensions() {
    plans_at_real_dimensions(qwen3_0_6b());
}

#[test]
fn llama_3_1_8b_plans_at_real_dimensions() {
    plans_at_real_dimensions(llama_3_1_8b());
}

#[test]
fn llama_3_1_8b_q4_k_plans_at_real_dimensions() {
    plans_at_real_dimensions(llama_3_1_8b_q4_k());
}

#[test]
fn gemma3_27b_plans_at_real_dimensions() {
    plans_at_real_dimensions(gemma3_27b());
}

/// The 8B's decode graph on a device whose largest buffer (512 MiB) is below its BF16 embedding
/// table (128256 x 4096 x 2 B): refused, naming the table and both sizes. The full-context KV
/// cache of one layer is exactly 512 MiB and fits.
#[test]
fn llama_3_1_8b_is_refused_below_its_embedding_table() {
    let model = build(&llama_3_1_8b());
    let capacity = model.config().max_positions;
    let spec = StepSpec::step(StepShape::new(1, 1, capacity));
    let graph = model
        .trace(&spec, TraceLimits::standard(MAX_STEP_TOKENS))
        .unwrap();
    let limit_bytes: u64 = 512 << 20;
    let embed_bytes: u64 = 128_256 * 4096 * 2;
    for mut target in [Target::ptx_preset(), Target::wgpu_preset()] {
        target.limits.max_buffer_bytes = limit_bytes;
        let err = compile(&graph, &target).unwrap_err();
        let message = err.to_string();
        println!("Llama-3.1-8B decode, {limit_bytes} B buffer limit: {message}");
        assert_eq!(
            err,
            PlanError::ConstantTooLarge {
                backend: target.backend,
                name: "w.embed".into(),
                needed_bytes: embed_bytes,
                limit_bytes,
            }
        );
        for part in [
            "w.embed".to_string(),
            embed_bytes.to_string(),
            limit_bytes.to_string(),
        ] {
            assert!(message.contains(&part), "`{message}` lacks `{part}`");
        }
    }
}
