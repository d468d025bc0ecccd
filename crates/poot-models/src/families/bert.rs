//! BERT encoders (sentence embeddings such as all-MiniLM-L6-v2) and their cross-encoder variant
//! (a pooler and a classifier scoring a pair): post-norm layers, learned absolute positions,
//! segment embeddings, exact GeLU.

use poot_graph_ir::ops::{self, binary_bcast};
use poot_graph_ir::{BinaryOp, Builder, Graph};

use crate::components::{
    Activation, AttentionParams, KvSource, LayerParams, Norm, NormPlacement, QkNormSpan,
    StackParams, Step, attention, plain_ffn, standard_layer, standard_stack,
};
use crate::config::{ConfigReader, RawConfig, SourceKind, key};
use crate::error::{ModelError, TraceError};
use crate::limits::{LAYERS, POSITIONS, WIDTH};
use crate::model::{Model, ModelConfig, ModelKind, ModelParts, narrowed_positions};
use crate::registry::FamilyEntry;
use crate::schema::{ModelSchema, StepInput};
use crate::step::{Program, StepSpec};
use crate::weights::{NameTable, Role, TensorIndex, WeightMap, WeightRole, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "bert",
    keys: &[
        (SourceKind::HuggingFace, "bert"),
        (SourceKind::Gguf, "bert"),
    ],
    build,
};

const NAMES: NameTable = NameTable::new(&[
    spell(
        Role::TokenEmbed,
        "{p}embeddings.word_embeddings.weight",
        "token_embd.weight",
    ),
    spell(
        Role::PositionEmbed,
        "{p}embeddings.position_embeddings.weight",
        "position_embd.weight",
    ),
    spell(
        Role::TokenTypeEmbed,
        "{p}embeddings.token_type_embeddings.weight",
        "token_types.weight",
    ),
    spell(
        Role::EmbedNorm,
        "{p}embeddings.LayerNorm.weight",
        "token_embd_norm.weight",
    ),
    spell(
        Role::EmbedNormBias,
        "{p}embeddings.LayerNorm.bias",
        "token_embd_norm.bias",
    ),
    spell(
        Role::AttnQ,
        "{p}encoder.layer.{l}.attention.self.query.weight",
        "blk.{l}.attn_q.weight",
    ),
    spell(
        Role::AttnQBias,
        "{p}encoder.layer.{l}.attention.self.query.bias",
        "blk.{l}.attn_q.bias",
    ),
    spell(
        Role::AttnK,
        "{p}encoder.layer.{l}.attention.self.key.weight",
        "blk.{l}.attn_k.weight",
    ),
    spell(
        Role::AttnKBias,
        "{p}encoder.layer.{l}.attention.self.key.bias",
        "blk.{l}.attn_k.bias",
    ),
    spell(
        Role::AttnV,
        "{p}encoder.layer.{l}.attention.self.value.weight",
        "blk.{l}.attn_v.weight",
    ),
    spell(
        Role::AttnVBias,
        "{p}encoder.layer.{l}.attention.self.value.bias",
        "blk.{l}.attn_v.bias",
    ),
    spell(
        Role::AttnO,
        "{p}encoder.layer.{l}.attention.output.dense.weight",
        "blk.{l}.attn_output.weight",
    ),
    spell(
        Role::AttnOBias,
        "{p}encoder.layer.{l}.attention.output.dense.bias",
        "blk.{l}.attn_output.bias",
    ),
    spell(
        Role::AttnNorm,
        "{p}encoder.layer.{l}.attention.output.LayerNorm.weight",
        "blk.{l}.attn_output_norm.weight",
    ),
    spell(
        Role::AttnNormBias,
        "{p}encoder.layer.{l}.attention.output.LayerNorm.bias",
        "blk.{l}.attn_output_norm.bias",
    ),
    spell(
        Role::FfnUp,
        "{p}encoder.layer.{l}.intermediate.dense.weight",
        "blk.{l}.ffn_up.weight",
    ),
    spell(
        Role::FfnUpBias,
        "{p}encoder.layer.{l}.intermediate.dense.bias",
        "blk.{l}.ffn_up.bias",
    ),
    spell(
        Role::FfnDown,
        "{p}encoder.layer.{l}.output.dense.weight",
        "blk.{l}.ffn_down.weight",
    ),
    spell(
        Role::FfnDownBias,
        "{p}encoder.layer.{l}.output.dense.bias",
        "blk.{l}.ffn_down.bias",
    ),
    spell(
        Role::FfnNorm,
        "{p}encoder.layer.{l}.output.LayerNorm.weight",
        "blk.{l}.layer_output_norm.weight",
    ),
    spell(
        Role::FfnNormBias,
        "{p}encoder.layer.{l}.output.LayerNorm.bias",
        "blk.{l}.layer_output_norm.bias",
    ),
    spell(Role::Pooler, "{p}pooler.dense.weight", ""),
    spell(Role::PoolerBias, "{p}pooler.dense.bias", ""),
    spell(Role::Classifier, "classifier.weight", ""),
    spell(Role::ClassifierBias, "classifier.bias", ""),
]);

/// A BERT encoder, optionally with its sequence-classification head.
pub struct Bert {
    config: ModelConfig,
    schema: ModelSchema,
    weights: WeightMap,
    n_heads: usize,
    eps: f32,
    activation: Activation,
    /// Scores pairs through the pooler and classifier instead of returning hidden states.
    cross_encoder: bool,
}

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    let cfg = ConfigReader::new(raw);
    let hidden = cfg.usize_at_most(key("hidden_size", "embedding_length"), WIDTH)?;
    let layers_key = key("num_hidden_layers", "block_count");
    let layers = cfg.usize_at_most(layers_key, LAYERS)?;
    let n_heads = cfg.usize_at_most(key("num_attention_heads", "attention.head_count"), WIDTH)?;
    let intermediate = cfg.usize_at_most(key("intermediate_size", "feed_forward_length"), WIDTH)?;
    let eps_key = key("layer_norm_eps", "attention.layer_norm_epsilon");
    let eps = cfg.opt_f32(eps_key)?.unwrap_or(1e-12);
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(cfg.out_of_range(eps_key, eps, "a finite epsilon >= 0"));
    }
    let max_positions =
        cfg.usize_at_most(key("max_position_embeddings", "context_length"), POSITIONS)?;
    if n_heads == 0 || hidden % n_heads != 0 {
        return Err(cfg.unsupported(
            key("num_attention_heads", "attention.head_count"),
            n_heads,
            "a divisor of hidden_size",
        ));
    }
    let act_key = key("hidden_act", "");
    let activation = match cfg.opt_str(act_key)?.unwrap_or("gelu") {
        "gelu" => Activation::GeluErf,
        "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
        other => return Err(cfg.unsupported(act_key, other, "gelu, gelu_new, gelu_pytorch_tanh")),
    };
    let prefixed = NAMES.with_prefix("bert.");
    let names = match NAMES.name(cfg.kind(), None, Role::TokenEmbed) {
        Some(n) if index.tensor_meta(&n).is_some() => NAMES,
        _ => prefixed,
    };
    crate::consistency::check_layer_count(&cfg, layers_key, layers, index, &names, Role::AttnNorm)?;
    let kind = cfg.kind();
    let d = hidden as u64;
    let mut w = WeightMap::new();
    let embed_name = names.name(kind, None, Role::TokenEmbed).unwrap_or_default();
    let vocab = match index.tensor_meta(&embed_name).map(|m| m.shape) {
        Some(s) if s.len() == 2 && s[1] == d && usize::try_from(s[0]).is_ok() => s[0] as usize,
        Some(s) => {
            return Err(ModelError::TensorShape {
                name: embed_name,
                expected: vec![0, d],
                found: s,
            });
        }
        None => {
            return Err(ModelError::MissingTensor {
                name: embed_name,
                role: "w.embed".into(),
            });
        }
    };
    crate::consistency::check_vocab(&cfg, &embed_name, vocab)?;
    let g = WeightRole::global;
    w.bind_named(index, &names, kind, g(Role::TokenEmbed), None)?;
    w.bind_named(
        index,
        &names,
        kind,
        g(Role::PositionEmbed),
        Some(&[max_positions as u64, d]),
    )?;
    let token_types = w.bind_named_opt(index, &names, kind, g(Role::TokenTypeEmbed), None)?;
    w.bind_named(index, &names, kind, g(Role::EmbedNorm), Some(&[d]))?;
    w.bind_named_opt(index, &names, kind, g(Role::EmbedNormBias), Some(&[d]))?;
    let ff = intermediate as u64;
    for l in 0..layers {
        let r = |role| WeightRole::layer(l, role);
        for (role, shape) in [
            (Role::AttnQ, [d, d]),
            (Role::AttnK, [d, d]),
            (Role::AttnV, [d, d]),
            (Role::AttnO, [d, d]),
            (Role::FfnUp, [ff, d]),
            (Role::FfnDown, [d, ff]),
        ] {
            w.bind_named(index, &names, kind, r(role), Some(&shape))?;
        }
        for role in [Role::AttnNorm, Role::FfnNorm] {
            w.bind_named(index, &names, kind, r(role), Some(&[d]))?;
        }
        for (role, n) in [
            (Role::AttnQBias, d),
            (Role::AttnKBias, d),
            (Role::AttnVBias, d),
            (Role::AttnOBias, d),
            (Role::AttnNormBias, d),
            (Role::FfnUpBias, ff),
            (Role::FfnDownBias, d),
            (Role::FfnNormBias, d),
        ] {
            w.bind_named_opt(index, &names, kind, r(role), Some(&[n]))?;
        }
    }
    let cross_encoder = w.bind_named_opt(index, &names, kind, g(Role::Classifier), None)?;
    if cross_encoder {
        w.bind_named(index, &names, kind, g(Role::ClassifierBias), None)?;
        w.bind_named(index, &names, kind, g(Role::Pooler), Some(&[d, d]))?;
        w.bind_named(index, &names, kind, g(Role::PoolerBias), Some(&[d]))?;
    }
    let config = ModelConfig {
        family: if cross_encoder {
            "bert/cross_encoder"
        } else {
            "bert"
        },
        kind: ModelKind::Encoder,
        vocab_size: vocab,
        hidden_size: hidden,
        n_layers: layers,
        max_positions,
        bos_id: None,
        eos_ids: Vec::new(),
        chat_format: None,
    };
    let schema = ModelSchema::encoder(token_types);
    Ok(ModelParts {
        model: Box::new(Bert {
            config,
            schema,
            weights: w,
            n_heads,
            eps,
            activation,
            cross_encoder,
        }),
    })
}

impl Model for Bert {
    /// Only the positions: the learned position embedding is a checkpoint tensor, bound whole.
    fn narrow_positions(&mut self, positions: usize) -> Result<(), TraceError> {
        self.config.max_positions = narrowed_positions(positions, self.config.max_positions)?;
        Ok(())
    }

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn schema(&self) -> &ModelSchema {
        &self.schema
    }

    fn weights(&self) -> &WeightMap {
        &self.weights
    }

    fn trace_into(&self, spec: &StepSpec, b: Builder) -> Result<Graph, TraceError> {
        let decl = self
            .schema
            .program(Program::Encode)
            .ok_or(TraceError::NoProgram {
                program: spec.program,
            })?;
        if spec.program != Program::Encode {
            return Err(TraceError::NoProgram {
                program: spec.program,
            });
        }
        let inputs: Vec<StepInput> = decl.step_inputs.clone();
        let step = Step::with_inputs(&b, spec.shape, &self.weights, &inputs)?;
        let norm = Norm::Layer { eps: self.eps };
        let stack = StackParams {
            embed_scale: None,
            learned_positions: true,
            embed_norm: Some(norm),
            final_norm: None,
            final_softcap: None,
            logit_divisor: None,
            head: false,
            hidden: self.config.hidden_size,
            vocab: self.config.vocab_size,
        };
        let layer = LayerParams {
            norm,
            placement: NormPlacement::Post,
            residual_scale: None,
        };
        let head_dim = self.config.hidden_size / self.n_heads;
        let attn = AttentionParams {
            n_heads: self.n_heads,
            n_kv_heads: self.n_heads,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            rope: None,
            window: None,
            softcap: None,
            qk_norm: None,
            qk_norm_span: QkNormSpan::Head,
            kv: KvSource::SelfOnly,
            sinks: false,
            alibi: false,
            clip: None,
        };
        let out = standard_stack(&b, &step, &stack, self.config.n_layers, |b, l, x| {
            standard_layer(
                b,
                &step,
                l,
                x,
                &layer,
                |b, h| b.scope("attn", |b| attention(b, &step, l, h, &attn)),
                |b, h| b.scope("ffn", |b| plain_ffn(b, &step, l, h, self.activation)),
            )
        })?;
        if !self.cross_encoder {
            return step.finish(b, out.hidden);
        }
        // Score: classifier(tanh(pooler(h[:, 0]))).
        let (rows, d) = (spec.shape.rows, self.config.hidden_size);
        let cls = b.reshape(
            b.slice(out.hidden, vec![0, 0, 0], vec![rows, 1, d])?,
            [rows, d],
        )?;
        let g = WeightRole::global;
        let pooled = ops::linear(
            &b,
            cls,
            step.weight(&b, g(Role::Pooler))?,
            Some(step.weight(&b, g(Role::PoolerBias))?),
        )?;
        let pooled = b.tanh(pooled)?;
        let scores = ops::linear(&b, pooled, step.weight(&b, g(Role::Classifier))?, None)?;
        let bias = ops::to_f32(&b, step.weight(&b, g(Role::ClassifierBias))?)?;
        let scores = binary_bcast(&b, BinaryOp::Add, scores, bias)?;
        step.finish(b, scores)
    }
}
