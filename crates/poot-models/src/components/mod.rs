//! The pieces families share. A family passes its mixer and feed-forward to the residual pair
//! [`standard::standard_layer`] inside [`standard::standard_stack`]; norms, rotary embeddings,
//! attention and feed-forwards are options of one component each, not copies.

pub mod alibi;
pub mod attention;
pub mod dense;
pub mod ffn;
pub mod lora;
pub mod moe;
pub mod norm;
pub mod rotary;
pub mod standard;
pub mod step;

pub use alibi::{alibi_slopes, bind_alibi_slopes};
pub use attention::{AttentionParams, KvSource, QkNormSpan, RopeUse, attention};
pub use dense::{DenseDecoder, DenseDecoderSpec, LayerAttention, MoeSpec, QkvLayout};
pub use ffn::{Activation, gated_ffn, gated_ffn_of, plain_ffn};
pub use lora::adapted;
pub use moe::{
    ExpertParams, GateUp, GluClamp, RouterParams, RouterScore, SharedExpert, route, routed_experts,
    shared_expert,
};
pub use norm::{Norm, apply_norm};
pub use rotary::{RopeConfig, RopeScaling};
pub use standard::{
    LayerParams, NormPlacement, StackOutput, StackParams, standard_layer, standard_stack,
};
pub use step::Step;
