use std::path::PathBuf;

use poot_formats::{GgmlType, StoredType};

use crate::gguf::GgufError;
use crate::integrity::IntegrityError;
use crate::quantization::QuantError;
use crate::safetensors::{SafetensorsError, ShardIndexError};

/// Why a checkpoint (or part of one) cannot be loaded. Every variant names the file, tensor
/// or key involved; nothing read from a checkpoint panics the loader.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be opened, measured, mapped or read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The path is neither a directory (a Hugging Face checkpoint) nor a regular file (a GGUF).
    #[error("{} is neither a checkpoint directory nor a GGUF file", path.display())]
    NotACheckpoint { path: PathBuf },

    /// A GGUF file is malformed.
    #[error("{}: {source}", path.display())]
    Gguf {
        path: PathBuf,
        #[source]
        source: GgufError,
    },

    /// A safetensors file is malformed.
    #[error("{}: {source}", path.display())]
    Safetensors {
        path: PathBuf,
        #[source]
        source: SafetensorsError,
    },

    /// `model.safetensors.index.json` is malformed.
    #[error("{}: {source}", path.display())]
    ShardIndex {
        path: PathBuf,
        #[source]
        source: ShardIndexError,
    },

    /// A checkpoint directory has no `config.json`.
    #[error("{} has no config.json", dir.display())]
    MissingConfig { dir: PathBuf },

    /// `config.json` (or `quantize_config.json`) is not valid JSON.
    #[error("{}: {source}", path.display())]
    ConfigJson {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// `config.json` is JSON but not an object.
    #[error("{} is not a JSON object", path.display())]
    ConfigNotObject { path: PathBuf },

    /// A checkpoint directory has neither `model.safetensors` nor
    /// `model.safetensors.index.json` (PyTorch `.bin` checkpoints are not read).
    #[error("{} has no model.safetensors and no model.safetensors.index.json", dir.display())]
    NoWeights { dir: PathBuf },

    /// A shard holds a tensor the index puts in another shard (or does not list).
    #[error("shard `{shard}` holds `{tensor}`, which the index puts in {}", indexed_shard.as_deref().map_or("no shard".to_owned(), |s| format!("`{s}`")))]
    ShardTensorMismatch {
        tensor: String,
        shard: String,
        indexed_shard: Option<String>,
    },

    /// The index lists a tensor its shard does not hold.
    #[error("the index puts `{tensor}` in `{shard}`, which does not hold it")]
    IndexedTensorMissing { tensor: String, shard: String },

    /// A split GGUF (`split.count` above 1) opened at a part other than the first, or named
    /// otherwise than llama.cpp's `-0000k-of-0000N.gguf`, so its other parts cannot be found.
    #[error("{}: {detail}", path.display())]
    SplitGguf { path: PathBuf, detail: String },

    /// Two weight files hold a tensor of the same name.
    #[error("`{tensor}` is in both `{first_file}` and `{second_file}`")]
    DuplicateTensor {
        tensor: String,
        first_file: String,
        second_file: String,
    },

    /// A tensor's byte range is past the end of its mapped file (the file shrank after it was
    /// parsed, or a parser bug).
    #[error("`{tensor}` ends at {end_bytes} B, past the end of `{file}` ({file_len_bytes} B)")]
    TensorPastFileEnd {
        tensor: String,
        file: String,
        end_bytes: u64,
        file_len_bytes: u64,
    },

    /// A GGUF tensor is stored in a ggml type poot has no packed format for. It is refused
    /// rather than read as anything else; requantize the checkpoint to a supported type.
    #[error("GGUF tensor `{tensor}` is stored as {}, which poot has no packed format for", ggml_type.name())]
    UnsupportedGgmlType { tensor: String, ggml_type: GgmlType },

    /// A GGUF metadata key a reader needs is absent.
    #[error("GGUF metadata has no `{key}`")]
    MissingMetadata { key: String },

    /// A GGUF metadata value has a type that cannot be read as the one asked for.
    #[error("GGUF metadata `{key}` is {found}, expected {expected}")]
    MetadataType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },

    /// A GGUF integer metadata value (or array element) does not fit the type asked for.
    #[error("GGUF metadata `{key}`{}: {value} does not fit {expected}", index.map_or(String::new(), |i| format!("[{i}]")))]
    MetadataOutOfRange {
        key: String,
        expected: &'static str,
        index: Option<usize>,
        value: i128,
    },

    /// A tensor a reader asked for is not in the checkpoint.
    #[error("the checkpoint has no tensor `{tensor}`")]
    TensorNotFound { tensor: String },

    /// Rows were asked of a rank-0 tensor.
    #[error("`{tensor}` is a scalar and has no rows")]
    ScalarHasNoRows { tensor: String },

    /// A row range is outside the tensor's rows.
    #[error("rows {start}..{end} of `{tensor}` are outside its {n_rows} rows")]
    RowRange {
        tensor: String,
        start: u64,
        end: u64,
        n_rows: u64,
    },

    /// Row split sizes do not add up to the tensor's rows.
    #[error("row parts {part_rows:?} of `{tensor}` do not add up to its {n_rows} rows")]
    RowSplit {
        tensor: String,
        part_rows: Vec<u64>,
        n_rows: u64,
    },

    /// A row of a packed tensor is not a whole number of blocks (a packed rank-1 tensor).
    #[error("a row of `{tensor}` ({row_elems} elements of {}) is not whole blocks", stored_type.name())]
    PartialBlockRow {
        tensor: String,
        stored_type: StoredType,
        row_elems: u64,
    },

    /// The integrity manifest is malformed, or a file does not match it.
    #[error(transparent)]
    Integrity(#[from] IntegrityError),

    /// A Hugging Face quantization config or quantized tensor layout cannot be used.
    #[error(transparent)]
    Quant(#[from] QuantError),
}
