//! poot-load: reads checkpoints into one [`WeightStore`] that keeps every tensor exactly as
//! stored.
//!
//! - A directory is a Hugging Face checkpoint: `config.json`, `model.safetensors` or a
//!   sharded `model.safetensors.index.json`, and the tokenizer and template side files.
//! - A file is a GGUF (v2/v3): config, weights and tokenizer inside.
//!
//! Both parsers are our own, work on byte slices, and turn every malformed input into a typed
//! error: no panic, and no allocation beyond what the file itself holds. Weight files are
//! memory-mapped; a tensor is a borrowed view of its stored bytes (dense words, BF16/F16
//! included, or packed ggml blocks). Shapes are outermost-first everywhere (GGUF's
//! innermost-first dims are reversed). A GGUF tensor in a ggml type poot has no packed format
//! for is refused at load ([`format_table`]). Decoding packed formats belongs to
//! `poot-formats`.
//!
//! [`LoadOptions::integrity`] checks every file the load reads against a [`Manifest`] of
//! lengths and SHA-256 digests.

mod checkpoint;
mod error;
pub mod format_table;
pub mod gguf;
mod integrity;
mod json_object;
mod manifest;
mod mapped_file;
mod options;
mod quantization;
mod quantized_linear;
pub mod safetensors;
mod shape;
mod side_files;
mod store;
mod tensor_view;

pub use checkpoint::{CONFIG_FILE, Checkpoint, ConfigSource, SAFETENSORS_FILE, load, peek_config};
pub use error::LoadError;
pub use integrity::IntegrityError;
pub use manifest::{MANIFEST_VERSION, Manifest, ManifestEntry};
pub use options::LoadOptions;
pub use quantization::{QuantError, QuantMethod, QuantizationConfig};
pub use quantized_linear::{
    Fp8ScaleLayout, Fp8ScaleName, LinearWeight, PackedLinear, QuantComponents, QuantizedLinear,
    linear,
};
pub use side_files::{SIDE_FILES, SideFiles};
pub use store::WeightStore;
pub use tensor_view::TensorView;
