//! MPT (MosaicML, Hugging Face `MptForCausalLM` and GGUF `mpt`): a pre-norm decoder with ALiBi
//! in place of positional embeddings, Q, K and V stored as one `Wqkv` (bound as its row
//! ranges), optionally clamped to `clip_qkv`, no biases anywhere (LayerNorms without bias), a
//! plain GeLU (erf) feed-forward and a head tied to the embedding.
//!
//! `attn_config.alibi_bias_max` sets the slopes as MosaicML's code and llama.cpp
//! (`mpt.attention.max_alibi_bias`) read it; transformers always uses 8, the value every
//! released MPT states. `softmax_scale` replaces `1/sqrt(head_dim)` when set. What this family
//! does not implement is refused by the key that asks for it rather than run wrong: learned
//! positions instead of ALiBi (`alibi: false`, or a GGUF bias of 0), `qk_ln` (or a GGUF's
//! `attn_q_norm`), a prefix LM, rotary embeddings, grouped-query attention, a sliding window,
//! biases (`no_bias: false`, or a GGUF's bias tensors), `logit_scale`, a gated feed-forward
//! (`ffn_config`), a norm other than LayerNorm, and an unknown `attn_impl` (`torch`, `flash` and
//! `triton` compute the same attention).

use serde_json::Value;

use crate::components::dense::{CheckedVocab, DecoderBasics, DenseDecoder, DenseDecoderSpec};
use crate::components::{Activation, Norm, QkvLayout};
use crate::config::{ConfigReader, RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::limits::{LAYERS, POSITIONS, WIDTH};
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "mpt",
    keys: &[(SourceKind::HuggingFace, "mpt"), (SourceKind::Gguf, "mpt")],
    build,
};

const QKV: (&str, &str) = (
    "transformer.blocks.{l}.attn.Wqkv.weight",
    "blk.{l}.attn_qkv.weight",
);

const NAMES: NameTable = NameTable::new(&[
    spell(
        Role::TokenEmbed,
        "transformer.wte.weight",
        "token_embd.weight",
    ),
    spell(Role::Head, "lm_head.weight", "output.weight"),
    spell(
        Role::FinalNorm,
        "transformer.norm_f.weight",
        "output_norm.weight",
    ),
    spell(
        Role::AttnNorm,
        "transformer.blocks.{l}.norm_1.weight",
        "blk.{l}.attn_norm.weight",
    ),
    spell(
        Role::FfnNorm,
        "transformer.blocks.{l}.norm_2.weight",
        "blk.{l}.ffn_norm.weight",
    ),
    spell(Role::AttnQ, QKV.0, QKV.1),
    spell(Role::AttnK, QKV.0, QKV.1),
    spell(Role::AttnV, QKV.0, QKV.1),
    spell(
        Role::AttnO,
        "transformer.blocks.{l}.attn.out_proj.weight",
        "blk.{l}.attn_output.weight",
    ),
    spell(
        Role::FfnUp,
        "transformer.blocks.{l}.ffn.up_proj.weight",
        "blk.{l}.ffn_up.weight",
    ),
    spell(
        Role::FfnDown,
        "transformer.blocks.{l}.ffn.down_proj.weight",
        "blk.{l}.ffn_down.weight",
    ),
]);

/// Tensors llama.cpp's MPT reads that this family does not: qk-norms (`qk_ln`), biases
/// (`no_bias: false`) and learned positions.
const GGUF_UNREAD: [&str; 5] = [
    "blk.0.attn_q_norm.weight",
    "blk.0.attn_norm.bias",
    "blk.0.attn_qkv.bias",
    "blk.0.ffn_up.bias",
    "position_embd.weight",
];

/// MPT's defaults: `alibi_bias_max`, `expansion_ratio`, `layer_norm_epsilon`, `max_seq_len`.
const MAX_BIAS: f32 = crate::components::alibi::DEFAULT_MAX_BIAS;
const EXPANSION: f32 = 4.0;
const EPS: f32 = 1e-5;
const MAX_SEQ_LEN: usize = 2048;

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    let cfg = ConfigReader::new(raw);
    let attn = match cfg.kind() {
        SourceKind::HuggingFace => {
            refuse_hf_options(&cfg)?;
            AttnConfig::read(&cfg)?
        }
        SourceKind::Gguf => {
            if let Some(name) = GGUF_UNREAD.iter().find(|n| index.tensor_meta(n).is_some()) {
                return Err(ModelError::Unsupported {
                    key: (*name).into(),
                    value: "present".into(),
                    supported: "an MPT without qk-norms, biases or learned positions",
                });
            }
            AttnConfig::read_gguf(&cfg)?
        }
    };
    let hidden_key = key("d_model", "embedding_length");
    let hidden = cfg.usize_at_most(hidden_key, WIDTH)?;
    let layers_key = key("n_layers", "block_count");
    let layers = cfg.usize_at_most(layers_key, LAYERS)?;
    let heads_key = key("n_heads", "attention.head_count");
    let n_heads = cfg.usize_at_most(heads_key, WIDTH)?;
    if n_heads == 0 || !hidden.is_multiple_of(n_heads) {
        return Err(cfg.unsupported(heads_key, n_heads, "a divisor of d_model"));
    }
    let kv_key = key("", "attention.head_count_kv");
    if let Some(kv) = cfg.opt_usize(kv_key)?
        && kv != n_heads
    {
        return Err(cfg.unsupported(kv_key, kv, "the head count (multi-head attention)"));
    }
    let intermediate = match cfg.kind() {
        SourceKind::HuggingFace => {
            let ratio_key = key("expansion_ratio", "");
            let ratio = cfg.opt_f32(ratio_key)?.unwrap_or(EXPANSION);
            let width = ratio * hidden as f32;
            if !(width >= 1.0 && width.fract() == 0.0 && width <= WIDTH.max as f32) {
                return Err(cfg.out_of_range(ratio_key, ratio, "a whole feed-forward width"));
            }
            width as usize
        }
        SourceKind::Gguf => cfg.usize_at_most(key("", "feed_forward_length"), WIDTH)?,
    };
    let eps_key = key("layer_norm_epsilon", "attention.layer_norm_epsilon");
    let eps = cfg.opt_f32(eps_key)?.unwrap_or(EPS);
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(cfg.out_of_range(eps_key, eps, "a finite epsilon >= 0"));
    }
    let max_positions = cfg
        .opt_usize_at_most(key("max_seq_len", "context_length"), POSITIONS)?
        .unwrap_or(MAX_SEQ_LEN);
    let CheckedVocab {
        vocab,
        bos_id,
        eos_ids,
    } = DecoderBasics::check_tensors(&cfg, index, &NAMES, layers_key, layers, hidden)?;
    let head_dim = hidden / n_heads;
    let basics = DecoderBasics {
        hidden,
        layers,
        n_heads,
        n_kv_heads: n_heads,
        head_dim,
        intermediate,
        eps,
        theta: 0.0,
        vocab,
        max_positions,
        bos_id,
        eos_ids,
        rope_dims: 0,
    };
    let mut spec = DenseDecoderSpec::alibi("mpt", &basics, attn.max_bias);
    spec.norm = Norm::Layer { eps };
    spec.qkv = QkvLayout::Fused;
    spec.plain_ffn = true;
    spec.activation = Activation::GeluErf;
    spec.clip_qkv = attn.clip;
    if let Some(scale) = attn.softmax_scale {
        spec.attn_scale = scale;
    }
    Ok(ModelParts {
        model: Box::new(DenseDecoder::build(spec, index, &NAMES, cfg.kind())?),
    })
}

/// What an MPT config says about attention.
struct AttnConfig {
    max_bias: f32,
    clip: Option<f32>,
    softmax_scale: Option<f32>,
}

impl AttnConfig {
    /// `attn_config`'s keys (absent keys take MPT's defaults), refusing what changes the
    /// attention's math in ways this family does not implement.
    fn read(cfg: &ConfigReader) -> Result<AttnConfig, ModelError> {
        let object = cfg.hf("attn_config");
        if object.is_some_and(|v| !v.is_object()) {
            return Err(ModelError::KeyType {
                key: "attn_config".into(),
                expected: "an object",
            });
        }
        let a = AttnKeys(object);
        if !a.bool("alibi")?.unwrap_or(true) {
            return Err(a.unsupported("alibi", false, "true (learned positions are not read)"));
        }
        for (k, off) in [
            ("qk_ln", "false (no q/k LayerNorms)"),
            ("prefix_lm", "false (causal attention)"),
            ("rope", "false (ALiBi)"),
        ] {
            if a.bool(k)?.unwrap_or(false) {
                return Err(a.unsupported(k, true, off));
            }
        }
        if let Some(t) = a.str("attn_type")?
            && t != "multihead_attention"
        {
            return Err(a.unsupported("attn_type", t, "multihead_attention"));
        }
        if let Some(i) = a.str("attn_impl")?
            && !matches!(i, "torch" | "flash" | "triton")
        {
            return Err(a.unsupported("attn_impl", i, "torch, flash or triton"));
        }
        if let Some(w) = a.number("sliding_window_size")?
            && w != -1.0
        {
            return Err(a.unsupported("sliding_window_size", w, "-1 (no window)"));
        }
        let max_bias = a.number("alibi_bias_max")?.unwrap_or(f64::from(MAX_BIAS)) as f32;
        if !(max_bias.is_finite() && max_bias > 0.0) {
            return Err(a.out_of_range("alibi_bias_max", max_bias, "a finite bias > 0"));
        }
        let clip = a.number("clip_qkv")?.map(|c| c as f32);
        if let Some(c) = clip
            && !(c.is_finite() && c > 0.0)
        {
            return Err(a.out_of_range("clip_qkv", c, "a finite clip > 0"));
        }
        let softmax_scale = a.number("softmax_scale")?.map(|s| s as f32);
        if let Some(s) = softmax_scale
            && !(s.is_finite() && s > 0.0)
        {
            return Err(a.out_of_range("softmax_scale", s, "a finite scale > 0"));
        }
        Ok(AttnConfig {
            max_bias,
            clip,
            softmax_scale,
        })
    }

    /// llama.cpp's keys: `attention.max_alibi_bias` (required, as llama.cpp reads it; 0 means
    /// learned positions), `attention.clamp_kqv` (absent or 0 for none), and the standard
    /// `attention.scale` when a GGUF states the checkpoint's `softmax_scale` (llama.cpp's
    /// converter drops it and scales by `1/sqrt(head_dim)`, which is what its absence means).
    fn read_gguf(cfg: &ConfigReader) -> Result<AttnConfig, ModelError> {
        let bias_key = key("", "attention.max_alibi_bias");
        let max_bias = cfg.f32(bias_key)?;
        if !(max_bias.is_finite() && max_bias > 0.0) {
            return Err(cfg.unsupported(bias_key, max_bias, "a bias > 0 (ALiBi)"));
        }
        let clip_key = key("", "attention.clamp_kqv");
        let clip = cfg.opt_f32(clip_key)?.filter(|&c| c != 0.0);
        if let Some(c) = clip
            && !(c.is_finite() && c > 0.0)
        {
            return Err(cfg.out_of_range(clip_key, c, "a finite clip > 0"));
        }
        let scale_key = key("", "attention.scale");
        let softmax_scale = cfg.opt_f32(scale_key)?;
        if let Some(s) = softmax_scale
            && !(s.is_finite() && s > 0.0)
        {
            return Err(cfg.out_of_range(scale_key, s, "a finite scale > 0"));
        }
        Ok(AttnConfig {
            max_bias,
            clip,
            softmax_scale,
        })
    }
}

/// The top-level Hugging Face keys whose other values change the model's math.
fn refuse_hf_options(cfg: &ConfigReader) -> Result<(), ModelError> {
    let no_bias = key("no_bias", "");
    if !cfg.opt_bool(no_bias)?.unwrap_or(true) {
        return Err(cfg.unsupported(no_bias, false, "true (no biases)"));
    }
    let logit_scale = key("logit_scale", "");
    if let Some(v) = cfg.hf(logit_scale.hf) {
        return Err(cfg.unsupported(logit_scale, v, "null (unscaled logits)"));
    }
    let norm_type = key("norm_type", "");
    if let Some(n) = cfg.opt_str(norm_type)?
        && !matches!(n, "low_precision_layernorm" | "layernorm")
    {
        return Err(cfg.unsupported(norm_type, n, "low_precision_layernorm or layernorm"));
    }
    if let Some(ffn) = cfg.hf("ffn_config") {
        let ffn_type = ffn.get("ffn_type").filter(|v| !v.is_null());
        match ffn_type.map(|t| t.as_str()) {
            None | Some(Some("mptmlp")) => {}
            Some(Some(other)) => {
                return Err(ModelError::Unsupported {
                    key: "ffn_config.ffn_type".into(),
                    value: other.into(),
                    supported: "mptmlp (a plain GeLU feed-forward)",
                });
            }
            Some(None) => {
                return Err(ModelError::KeyType {
                    key: "ffn_config.ffn_type".into(),
                    expected: "a string",
                });
            }
        }
    }
    Ok(())
}

/// The keys of a Hugging Face `attn_config` object, named `attn_config.{key}` in errors.
struct AttnKeys<'a>(Option<&'a Value>);

impl<'a> AttnKeys<'a> {
    fn get(&self, k: &str) -> Option<&'a Value> {
        self.0?.get(k).filter(|v| !v.is_null())
    }

    fn name(k: &str) -> String {
        format!("attn_config.{k}")
    }

    fn typed<T>(
        &self,
        k: &str,
        read: impl FnOnce(&'a Value) -> Option<T>,
        expected: &'static str,
    ) -> Result<Option<T>, ModelError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => read(v).map(Some).ok_or(ModelError::KeyType {
                key: Self::name(k),
                expected,
            }),
        }
    }

    fn bool(&self, k: &str) -> Result<Option<bool>, ModelError> {
        self.typed(k, Value::as_bool, "a boolean")
    }

    fn str(&self, k: &str) -> Result<Option<&'a str>, ModelError> {
        self.typed(k, Value::as_str, "a string")
    }

    fn number(&self, k: &str) -> Result<Option<f64>, ModelError> {
        self.typed(k, Value::as_f64, "a number")
    }

    fn unsupported(
        &self,
        k: &str,
        value: impl std::fmt::Display,
        supported: &'static str,
    ) -> ModelError {
        ModelError::Unsupported {
            key: Self::name(k),
            value: value.to_string(),
            supported,
        }
    }

    fn out_of_range(
        &self,
        k: &str,
        value: impl std::fmt::Display,
        expected: &'static str,
    ) -> ModelError {
        ModelError::OutOfRange {
            key: Self::name(k),
            value: value.to_string(),
            expected,
        }
    }
}
