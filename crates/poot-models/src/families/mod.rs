//! The shipped model families. Each is a config reader, a name table and (only when its layers
//! are not of the standard shape) a tracer over the shared components.

pub mod bert;
pub mod bloom;
pub mod gemma2;
pub mod gemma3;
pub mod gpt_oss;
pub mod granite;
pub mod granitemoe;
pub mod llama;
pub mod mixtral;
pub mod mpt;
pub mod olmo2;
pub mod olmoe;
pub mod phi3;
pub mod qwen2;
pub mod qwen2moe;
pub mod qwen3;
pub mod qwen3moe;
pub mod smollm3;
