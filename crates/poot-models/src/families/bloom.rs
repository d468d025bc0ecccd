//! BLOOM (BigScience, Hugging Face `BloomForCausalLM` and GGUF `bloom`): a pre-norm decoder with
//! ALiBi in place of positional embeddings, a LayerNorm on the token embeddings
//! (`word_embeddings_layernorm`), biases on every projection and LayerNorm, a plain GeLU (tanh)
//! feed-forward four times the hidden size, and a head tied to the embedding.
//!
//! The Hugging Face `query_key_value` holds each head's query, key and value rows in turn
//! (`[heads, 3, head_dim]` rows, and its bias alike): each part is bound as its runs of rows
//! ([`QkvLayout::FusedPerHead`]). llama.cpp's converter re-orders that tensor to `[3, heads,
//! head_dim]` rows for a GGUF, which binds as consecutive row ranges ([`QkvLayout::Fused`]);
//! llama.cpp fixes the slopes' largest bias at 8, as transformers does.
//!
//! Released checkpoints name their tensors without the `transformer.` prefix that
//! `save_pretrained` of a `BloomForCausalLM` writes; both are read. A Hugging Face config has no
//! context length (ALiBi has none): `seq_length` when stated, else BLOOM's training context of
//! 2048. `apply_residual_connection_post_layernorm` (residuals from the normed input) is
//! refused; `pretraining_tp` and `slow_but_exact` only reorder sums and are read as they come.

use crate::components::alibi::DEFAULT_MAX_BIAS;
use crate::components::dense::{CheckedVocab, DecoderBasics, DenseDecoder, DenseDecoderSpec};
use crate::components::{Activation, Norm, QkvLayout};
use crate::config::{ConfigReader, Key, RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::limits::{LAYERS, POSITIONS, WIDTH};
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "bloom",
    keys: &[
        (SourceKind::HuggingFace, "bloom"),
        (SourceKind::Gguf, "bloom"),
    ],
    build,
};

const QKV: (&str, &str) = (
    "{p}h.{l}.self_attention.query_key_value.weight",
    "blk.{l}.attn_qkv.weight",
);
const QKV_BIAS: (&str, &str) = (
    "{p}h.{l}.self_attention.query_key_value.bias",
    "blk.{l}.attn_qkv.bias",
);

const NAMES: NameTable = NameTable::new(&[
    spell(
        Role::TokenEmbed,
        "{p}word_embeddings.weight",
        "token_embd.weight",
    ),
    spell(
        Role::EmbedNorm,
        "{p}word_embeddings_layernorm.weight",
        "token_embd_norm.weight",
    ),
    spell(
        Role::EmbedNormBias,
        "{p}word_embeddings_layernorm.bias",
        "token_embd_norm.bias",
    ),
    spell(Role::Head, "lm_head.weight", "output.weight"),
    spell(Role::FinalNorm, "{p}ln_f.weight", "output_norm.weight"),
    spell(Role::FinalNormBias, "{p}ln_f.bias", "output_norm.bias"),
    spell(
        Role::AttnNorm,
        "{p}h.{l}.input_layernorm.weight",
        "blk.{l}.attn_norm.weight",
    ),
    spell(
        Role::AttnNormBias,
        "{p}h.{l}.input_layernorm.bias",
        "blk.{l}.attn_norm.bias",
    ),
    spell(Role::AttnQ, QKV.0, QKV.1),
    spell(Role::AttnK, QKV.0, QKV.1),
    spell(Role::AttnV, QKV.0, QKV.1),
    spell(Role::AttnQBias, QKV_BIAS.0, QKV_BIAS.1),
    spell(Role::AttnKBias, QKV_BIAS.0, QKV_BIAS.1),
    spell(Role::AttnVBias, QKV_BIAS.0, QKV_BIAS.1),
    spell(
        Role::AttnO,
        "{p}h.{l}.self_attention.dense.weight",
        "blk.{l}.attn_output.weight",
    ),
    spell(
        Role::AttnOBias,
        "{p}h.{l}.self_attention.dense.bias",
        "blk.{l}.attn_output.bias",
    ),
    spell(
        Role::FfnNorm,
        "{p}h.{l}.post_attention_layernorm.weight",
        "blk.{l}.ffn_norm.weight",
    ),
    spell(
        Role::FfnNormBias,
        "{p}h.{l}.post_attention_layernorm.bias",
        "blk.{l}.ffn_norm.bias",
    ),
    spell(
        Role::FfnUp,
        "{p}h.{l}.mlp.dense_h_to_4h.weight",
        "blk.{l}.ffn_up.weight",
    ),
    spell(
        Role::FfnUpBias,
        "{p}h.{l}.mlp.dense_h_to_4h.bias",
        "blk.{l}.ffn_up.bias",
    ),
    spell(
        Role::FfnDown,
        "{p}h.{l}.mlp.dense_4h_to_h.weight",
        "blk.{l}.ffn_down.weight",
    ),
    spell(
        Role::FfnDownBias,
        "{p}h.{l}.mlp.dense_4h_to_h.bias",
        "blk.{l}.ffn_down.bias",
    ),
]);

/// BLOOM's defaults: `layer_norm_epsilon`, and the training context a config without
/// `seq_length` stands for.
const EPS: f32 = 1e-5;
const SEQ_LEN: usize = 2048;

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    let cfg = ConfigReader::new(raw);
    let post_ln = key("apply_residual_connection_post_layernorm", "");
    if cfg.opt_bool(post_ln)?.unwrap_or(false) {
        return Err(cfg.unsupported(post_ln, true, "false (residuals from the unnormed input)"));
    }
    // `save_pretrained` of a `BloomForCausalLM` nests the model under `transformer.`.
    let prefixed = NAMES.with_prefix("transformer.");
    let names = match prefixed.name(cfg.kind(), None, Role::TokenEmbed) {
        Some(n) if index.tensor_meta(&n).is_some() => prefixed,
        _ => NAMES,
    };
    let hidden_key = alias(&cfg, key("hidden_size", "embedding_length"), "n_embed");
    let hidden = cfg.usize_at_most(hidden_key, WIDTH)?;
    let layers_key = alias(&cfg, key("n_layer", "block_count"), "num_hidden_layers");
    let layers = cfg.usize_at_most(layers_key, LAYERS)?;
    let heads_key = alias(
        &cfg,
        key("n_head", "attention.head_count"),
        "num_attention_heads",
    );
    let n_heads = cfg.usize_at_most(heads_key, WIDTH)?;
    if n_heads == 0 || !hidden.is_multiple_of(n_heads) {
        return Err(cfg.unsupported(heads_key, n_heads, "a divisor of the hidden size"));
    }
    let kv_key = key("", "attention.head_count_kv");
    if let Some(kv) = cfg.opt_usize(kv_key)?
        && kv != n_heads
    {
        return Err(cfg.unsupported(kv_key, kv, "the head count (multi-head attention)"));
    }
    let (intermediate, qkv, max_positions) = match cfg.kind() {
        SourceKind::HuggingFace => {
            let positions = cfg
                .opt_usize_at_most(key("seq_length", ""), POSITIONS)?
                .unwrap_or(SEQ_LEN);
            (4 * hidden, QkvLayout::FusedPerHead, positions)
        }
        SourceKind::Gguf => (
            cfg.usize_at_most(key("", "feed_forward_length"), WIDTH)?,
            QkvLayout::Fused,
            cfg.usize_at_most(key("", "context_length"), POSITIONS)?,
        ),
    };
    let eps_key = key("layer_norm_epsilon", "attention.layer_norm_epsilon");
    let eps = cfg.opt_f32(eps_key)?.unwrap_or(EPS);
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(cfg.out_of_range(eps_key, eps, "a finite epsilon >= 0"));
    }
    let CheckedVocab {
        vocab,
        bos_id,
        eos_ids,
    } = DecoderBasics::check_tensors(&cfg, index, &names, layers_key, layers, hidden)?;
    let basics = DecoderBasics {
        hidden,
        layers,
        n_heads,
        n_kv_heads: n_heads,
        head_dim: hidden / n_heads,
        intermediate,
        eps,
        theta: 0.0,
        vocab,
        max_positions,
        bos_id,
        eos_ids,
        rope_dims: 0,
    };
    let mut spec = DenseDecoderSpec::alibi("bloom", &basics, DEFAULT_MAX_BIAS);
    spec.norm = Norm::Layer { eps };
    spec.qkv = qkv;
    spec.plain_ffn = true;
    spec.activation = Activation::GeluTanh;
    spec.embed_norm = true;
    spec.biases = true;
    Ok(ModelParts {
        model: Box::new(DenseDecoder::build(spec, index, &names, cfg.kind())?),
    })
}

/// `k`, or its older Hugging Face spelling `legacy` when only that one is present.
fn alias(cfg: &ConfigReader, k: Key, legacy: &'static str) -> Key {
    match (cfg.hf(k.hf), cfg.hf(legacy)) {
        (None, Some(_)) => key(legacy, k.gguf),
        _ => k,
    }
}
